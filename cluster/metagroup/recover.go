package metagroup

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/raftgroup"
)

// Recover makes voters the meta group's only voters on this stopped node's
// replica (cfg.Dir), for a meta group that lost its quorum for good; it
// first drops the log from the first entry the meta state machine could
// never apply. It returns how many entries it dropped. The voters'
// addresses are found at start, from gossip and the registry, as always.
func Recover(cfg Config, voters []string) (dropped uint64, err error) {
	if len(voters) == 0 {
		return 0, errors.New("no voters given")
	}
	servers := make([]raft.Server, len(voters))
	for i, id := range voters {
		servers[i] = raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)}
	}
	var corrupt error
	a := &metaFSM{m: fsm.NewMeta(), changed: func() {}, corrupt: func(index uint64, err error) { corrupt = fmt.Errorf("meta entry %d: %w", index, err) }}
	dropped, err = raftgroup.Recover(raftgroup.Config{Group: ID, NodeID: cfg.NodeID, Dir: cfg.Dir, LogStore: cfg.LogStore, Logger: cfg.Logger}, a, servers, applies)
	if err == nil && corrupt != nil {
		err = corrupt
	}
	return dropped, err
}

// applies reports whether the meta state machine can apply a command
// entry: one that does not decode, or carries a command of another state
// machine, stops a replica at every start.
func applies(l *raft.Log) bool {
	if l.Type != raft.LogCommand {
		return true
	}
	e, err := fsm.Decode(l.Data)
	if err != nil {
		return false
	}
	for _, c := range e.Commands {
		if _, err := fsm.DecodeMetaCommand(c); err != nil {
			return false
		}
	}
	return true
}
