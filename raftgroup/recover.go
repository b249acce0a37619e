package raftgroup

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// Recover rewrites a stopped group's configuration to servers, with
// hashicorp/raft's RecoverCluster: the way back for a group that lost its
// quorum for good, run on each replica that is kept, with the same
// servers. Before that, if sound is set, it drops the log from the first
// entry sound refuses (or whose configuration does not decode) to the
// end: an entry the replica could never apply would stop it at every
// start. It returns how many entries it dropped. fsm replays the kept
// state, as RecoverCluster needs; the recovered group starts from the
// snapshot it takes.
func Recover(cfg Config, fsm raft.FSM, servers []raft.Server, sound func(*raft.Log) bool) (dropped uint64, err error) {
	store, err := openStore(cfg.LogStore, cfg.Dir)
	if err != nil {
		return 0, fmt.Errorf("raft group %s: open log store (is the node still running?): %w", cfg.Group, err)
	}
	defer store.Close()
	hlog := hclogFor(cfg.Logger, cfg.Group)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hlog.Named("snapshots"))
	if err != nil {
		return 0, fmt.Errorf("raft group %s: open snapshot store: %w", cfg.Group, err)
	}
	if sound != nil {
		if dropped, err = dropUnsound(store, sound); err != nil {
			return 0, fmt.Errorf("raft group %s: %w", cfg.Group, err)
		}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	rc.NoLegacyTelemetry = true
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID))
	if err := raft.RecoverCluster(rc, fsm, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		return dropped, fmt.Errorf("raft group %s: recover: %w", cfg.Group, err)
	}
	return dropped, nil
}

// dropUnsound deletes the log from its first unsound entry to its end.
func dropUnsound(store raft.LogStore, sound func(*raft.Log) bool) (uint64, error) {
	first, err := store.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := store.LastIndex()
	if err != nil {
		return 0, err
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return 0, fmt.Errorf("log entry %d: %w", i, err)
		}
		if entrySound(&l, sound) {
			continue
		}
		if err := store.DeleteRange(i, last); err != nil {
			return 0, fmt.Errorf("dropping entries %d to %d: %w", i, last, err)
		}
		return last - i + 1, nil
	}
	return 0, nil
}

// entrySound reports whether a configuration entry decodes (hashicorp/raft
// panics on one that does not) and sound takes any other.
func entrySound(l *raft.Log, sound func(*raft.Log) bool) (ok bool) {
	if l.Type != raft.LogConfiguration {
		return sound(l)
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	raft.DecodeConfiguration(l.Data)
	return true
}
