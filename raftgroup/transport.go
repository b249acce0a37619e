package raftgroup

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// raftTransport is what hashicorp/raft uses of raft.NetworkTransport.
type raftTransport interface {
	raft.Transport
	raft.WithClose
	raft.WithPreVote
}

// groupTransport is a group's Raft transport with two rules of ours on top
// of hashicorp/raft's NetworkTransport (raftgroup/DESIGN.md):
//   - its snapshot sends go through the node's SnapshotSends: Raft's
//     replication goroutine for a follower waits in InstallSnapshot for a
//     slot, and stopWaiting ends the wait, as raft.Shutdown waits for that
//     goroutine;
//   - a replica with no Raft configuration grants no vote (see
//     refuseVotes).
type groupTransport struct {
	raftTransport
	sends     *SnapshotSends
	rpcs      chan raft.RPC
	done      chan struct{}
	closeOnce sync.Once
	// configured reports whether the replica holds a configuration; nil
	// until its raft.Raft exists (serve).
	configured atomic.Pointer[func() bool]
	// refused counts the votes refused; tests read it.
	refused atomic.Int64
}

func newGroupTransport(t raftTransport, sends *SnapshotSends) *groupTransport {
	g := &groupTransport{raftTransport: t, sends: sends, rpcs: make(chan raft.RPC), done: make(chan struct{})}
	go g.refuseVotes()
	return g
}

// InstallSnapshot implements raft.Transport.
func (t *groupTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.sends.send(t.done, data, func(r io.Reader) error {
		return t.raftTransport.InstallSnapshot(id, target, args, resp, r)
	})
}

// Consumer implements raft.Transport.
func (t *groupTransport) Consumer() <-chan raft.RPC { return t.rpcs }

// serve makes r's configuration decide whether votes are refused.
func (t *groupTransport) serve(r *raft.Raft) {
	configured := func() bool {
		f := r.GetConfiguration()
		return f.Error() == nil && len(f.Configuration().Servers) > 0
	}
	t.configured.Store(&configured)
}

// refuseVotes passes the RPCs on to Raft, but answers the vote and pre-vote
// requests a replica with no configuration gets itself, refusing them.
// hashicorp/raft grants those (it checks the candidate against its
// configuration only when it has one), and a replica without one is a node
// back with an empty data directory, still a voter to the others: its vote
// could elect a candidate that lacks an entry the replica acknowledged
// before it lost its disk. It votes again once its group's leader has sent
// it the log, which holds the configuration.
func (t *groupTransport) refuseVotes() {
	in := t.raftTransport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-t.done:
			return
		}
		// Until its raft.Raft exists the replica refuses too: a candidate
		// asks again after its election timeout.
		if f := t.configured.Load(); f == nil || !(*f)() {
			switch req := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				t.refused.Add(1)
				rpc.Respond(&raft.RequestVoteResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: req.Term}, nil)
				continue
			case *raft.RequestPreVoteRequest:
				t.refused.Add(1)
				rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}, Term: req.Term}, nil)
				continue
			}
		}
		select {
		case t.rpcs <- rpc:
		case <-t.done:
			return
		}
	}
}

// stopWaiting ends every snapshot send of the group still waiting, and
// the passing on of RPCs, before the group shuts down.
func (t *groupTransport) stopWaiting() {
	t.closeOnce.Do(func() { close(t.done) })
}
