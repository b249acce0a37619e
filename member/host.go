package member

import (
	"cmp"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/cairnmq/cairn/raftgroup"

	"github.com/hashicorp/raft"
)

// raftHost is one Raft group on this node and what every group needs
// whatever it carries: the state machine adapter, the proposer, the
// snapshot loop and its pace. A member of a group of its own has one
// (Open); a shared group has one for all its members (OpenShared).
type raftHost struct {
	nodeID string
	log    *slog.Logger
	group  *raftgroup.Group
	fsm    *memberFSM
	prop   *proposer
	// snapshotEntries is Config.SnapshotThreshold, which the pace is
	// computed from again whenever the replica's role or rank may have
	// changed.
	snapshotEntries uint64
	paceMu          sync.Mutex

	stop chan struct{}
	wg   sync.WaitGroup
}

// openHost opens cfg's Raft group (cfg.Name and cfg.GroupID name it) over
// a state machine that applies entries with a (its group and callbacks
// set), sending leadership news to notify.
func openHost(cfg Config, a *memberFSM, notify chan bool) (*raftHost, error) {
	h := &raftHost{
		nodeID: cfg.NodeID, log: cfg.Logger.With("member", cfg.Name), fsm: a, stop: make(chan struct{}),
		snapshotEntries: cmp.Or(cfg.SnapshotThreshold, raft.DefaultConfig().SnapshotThreshold),
	}
	onCorrupt := cfg.OnFatal
	if onCorrupt == nil {
		onCorrupt = func(err error) { panic(err) }
	}
	a.log, a.snapshotWanted, a.observer = h.log, make(chan struct{}, 1), cfg.Observer
	a.corrupt = func(index uint64, err error) {
		if cfg.OnCorrupt != nil {
			h.log.Error("member replica stopped: a log entry cannot be applied; the node's other replicas go on", "group", cfg.GroupID, "index", index, "err", err)
			cfg.OnCorrupt(index, err)
			return
		}
		h.log.Error("member log entry cannot be applied; stopping to avoid diverging from the other replicas", "group", cfg.GroupID, "index", index, "err", err)
		onCorrupt(fmt.Errorf("member %s: %w", cfg.Name, err))
	}
	a.fatal = func(err error) {
		h.log.Error("message bodies on this node's disk cannot be read; stopping so that another replica serves them (a restart rebuilds them from the Raft log)", "err", err)
		onCorrupt(fmt.Errorf("member %s: %w", cfg.Name, err))
	}
	if cfg.BodyMemory >= 0 {
		bodies, err := openBodyStore(filepath.Join(cfg.Dir, "bodies"))
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", cfg.Name, err)
		}
		a.bodies, a.bodyMemory = bodies, cfg.BodyMemory
		if a.g != nil {
			a.g.TrackBodies()
		} else {
			a.m.TrackBodies()
		}
	}
	// hashicorp/raft snapshots on its own only at maxSnapshotThreshold;
	// snapshotLoop snapshots at the configured threshold when the log has
	// grown enough for the state's size, at the replica's turn.
	g, err := raftgroup.Open(raftgroup.Config{
		Group: cfg.GroupID, NodeID: cfg.NodeID, Dir: cfg.Dir, Stream: cfg.Stream, Peers: cfg.Peers,
		Timing: cfg.Timing, SnapshotThreshold: max(h.snapshotEntries, maxSnapshotThreshold), SnapshotInterval: cfg.SnapshotInterval, LogStore: cfg.LogStore,
		Logger: cfg.Logger, NotifyCh: notify, Addresses: cfg.Addresses, OnStorageError: cfg.OnFatal, SnapshotSends: cfg.SnapshotSends,
		ObserveLogWrite: observeLogWrite(cfg.Observer), CheckRPC: cfg.CheckRPC,
	}, a)
	if err != nil {
		a.closeBodies()
		return nil, err
	}
	h.group = g
	h.prop = newProposer(g.Raft)
	// The pace is refreshed at each interval too, since a membership
	// change moves the ranks.
	h.refreshSnapshotPace()
	runEvery(&h.wg, h.stop, cmp.Or(cfg.SnapshotInterval, raftgroup.DefaultSnapshotInterval), h.refreshSnapshotPace)
	h.wg.Go(h.snapshotLoop)
	return h, nil
}

// observeLogWrite is o's LogWritten, nil without an observer.
func observeLogWrite(o Observer) func(time.Duration) {
	if o == nil {
		return nil
	}
	return o.LogWritten
}

// close stops the group; destroy also deletes its data. The caller closes
// the body store (h.fsm.closeBodies) once nothing reads it.
func (h *raftHost) close(destroy bool) error {
	close(h.stop)
	h.prop.close()
	var err error
	if destroy {
		err = h.group.Destroy()
	} else {
		err = h.group.Close()
	}
	h.wg.Wait()
	return err
}

// runEvery runs tick at each interval on a goroutine counted in wg, until
// stop is closed.
func runEvery(wg *sync.WaitGroup, stop <-chan struct{}, interval time.Duration, tick func()) {
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			tick()
		}
	})
}
