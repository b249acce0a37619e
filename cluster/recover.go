package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/raftgroup"
)

// RecoverMeta makes voters the meta group's only voters on the stopped
// node cfg names (its --node-id and --data-dir), for a meta group that
// lost its quorum for good: run it on each node that is kept, with the
// same voters, then start them. It first drops the meta log from the first
// entry the node could never apply (a junk or foreign entry that stopped
// it at every start). It returns how many entries it dropped.
func RecoverMeta(cfg Config, voters []string) (dropped uint64, err error) {
	if cfg.NodeID == "" || cfg.DataDir == "" {
		return 0, fmt.Errorf("%w: give the stopped node's --node-id and --data-dir", ErrConfig)
	}
	b, err := os.ReadFile(filepath.Join(cfg.DataDir, "node-id"))
	if err != nil {
		return 0, fmt.Errorf("%w: --data-dir %s holds no node (%v)", ErrConfig, cfg.DataDir, err)
	}
	if owner := strings.TrimSpace(string(b)); owner != cfg.NodeID {
		return 0, fmt.Errorf("%w: --data-dir %s belongs to node %q, not %q", ErrConfig, cfg.DataDir, owner, cfg.NodeID)
	}
	if len(voters) == 0 {
		return 0, fmt.Errorf("%w: name the meta group's voters (--voters), this node among them", ErrConfig)
	}
	dir := filepath.Join(cfg.DataDir, "meta")
	held := raftgroup.HeldStore(dir)
	if held == "" {
		return 0, fmt.Errorf("%w: --data-dir %s holds no meta group state", ErrConfig, cfg.DataDir)
	}
	return metagroup.Recover(metagroup.Config{NodeID: cfg.NodeID, Dir: dir, LogStore: held, Logger: cfg.Logger}, voters)
}
