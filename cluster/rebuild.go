package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
)

// A member replica that cannot apply an entry of its log, or whose log or
// snapshots on disk cannot be read back, is rebuilt rather than stopping
// the node (cluster/DESIGN.md, "A damaged replica is rebuilt"): it is
// closed, the meta group marks it as rejoining its group (RebuildReplica,
// one replica of a group at a time, never an only one), its directory is
// emptied, and it opens again as a replica back from an empty data
// directory does: the group's leader demotes it, sends it a snapshot and
// the log, and promotes it once it has caught up.

// Why a replica is rebuilt: the label of cairn_replica_rebuilds_total.
const (
	rebuildEntry = "entry" // an entry it could not apply
	rebuildLog   = "log"   // a log or snapshots it could not read at its start
)

// rebuildRetry bounds the wait between two asks of the meta group to
// rebuild a replica.
const rebuildRetry = 30 * time.Second

// rebuildTarget is a Raft group open (or to open) here: its id (its
// directory under members/) and its key in the meta group (fsm.GroupKey).
type rebuildTarget struct{ id, key string }

// onCorrupt is member.Config.OnCorrupt for the replicas of group t: it
// only notes the replica, as the replica's own goroutine calls it; run's
// next round rebuilds it (startRebuilds). The member logged the entry.
func (gs *groups) onCorrupt(t rebuildTarget) func(uint64, error) {
	return func(uint64, error) { gs.toRebuild(t, rebuildEntry) }
}

// toRebuild notes that this node's replica of group t must be rebuilt.
func (gs *groups) toRebuild(t rebuildTarget, reason string) {
	gs.mu.Lock()
	if _, ok := gs.rebuilding[t.id]; !ok {
		gs.rebuilding[t.id] = false
		gs.rebuildAsked[t.id] = t
		gs.rebuilds[reason]++
	}
	gs.mu.Unlock()
	gs.poke()
}

// startRebuilds closes each replica noted to rebuild (every member in it,
// for a shared group) and rebuilds it on a goroutine of its own. It runs
// on run's goroutine between rounds, so no open of it is under way.
func (gs *groups) startRebuilds() {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for id, started := range gs.rebuilding {
		if started {
			continue
		}
		gs.rebuilding[id] = true
		t := gs.rebuildAsked[id]
		delete(gs.rebuildAsked, id)
		s := gs.shared[id]
		var rs []*member.Replica
		for gid, r := range gs.byGroup {
			if gid == id || (s != nil && r.Shared() == s) {
				rs = append(rs, r)
				delete(gs.byGroup, gid)
				delete(gs.byName, r.Name())
			}
		}
		delete(gs.shared, id)
		gs.n.bg.Add(1)
		go func() {
			defer gs.n.bg.Done()
			for _, r := range rs {
				if err := r.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
					gs.n.log.Warn("closing a member replica to rebuild", "member", r.Name(), "err", err)
				}
			}
			if s != nil {
				if err := s.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
					gs.n.log.Warn("closing a shared group to rebuild", "group", id, "err", err)
				}
			}
			gs.rebuildClosed(t)
		}()
	}
}

// rebuildingGroup reports whether group id (a member's own, or a shared
// one) is noted to rebuild or being rebuilt: not to open.
func (gs *groups) rebuildingGroup(id string) bool {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	_, ok := gs.rebuilding[id]
	return ok
}

// rebuildClosed asks the meta group to rebuild the closed replica of t
// until it agrees (or no longer places it here), then empties its
// directory and lets the next round open it, if placed here. A refusal (another replica of the group is being rebuilt, or
// this one is the group's only) is asked again, up to rebuildRetry apart.
func (gs *groups) rebuildClosed(t rebuildTarget) {
	wait, said := 2*time.Second, ""
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := gs.n.meta.Apply(ctx, &fsmpb.RebuildReplica{Node: gs.n.cfg.NodeID, Group: t.key})
		cancel()
		if err == nil || !gs.holdsGroup(t.key) { // rebuilt, or no longer placed here
			break
		}
		if msg := err.Error(); msg != said {
			gs.n.log.Warn("member replica stopped, not rebuilt yet: it stays closed and is asked again", "group", t.id, "err", err)
			said = msg
		}
		select {
		case <-gs.n.stopped:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, rebuildRetry)
	}
	dir := filepath.Join(gs.n.cfg.DataDir, "members", t.id)
	if err := os.RemoveAll(dir); err != nil {
		// Left as it is, the replica would open on the same damage.
		gs.n.cfg.OnFatal(fmt.Errorf("emptying %s to rebuild the replica: %w", dir, err))
		return
	}
	gs.n.log.Info("member replica emptied: it rejoins its group and copies the others' snapshot and log", "group", t.id)
	gs.mu.Lock()
	delete(gs.rebuilding, t.id)
	gs.mu.Unlock()
	gs.poke()
}

// holdsGroup reports whether the meta state places a replica of group key
// on this node.
func (gs *groups) holdsGroup(key string) (held bool) {
	gs.n.meta.Read(func(m *fsm.Meta) {
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				held = held || (fsm.GroupKey(d.Name, p) == key && slices.Contains(p.Replicas, gs.n.cfg.NodeID))
			}
		}
	})
	return held
}

// rebuildState is what the metrics say of rebuilds: how many replicas
// are being rebuilt now, and how many were since the start, by reason.
func (gs *groups) rebuildState() (now int, total map[string]uint64) {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	total = map[string]uint64{rebuildEntry: gs.rebuilds[rebuildEntry], rebuildLog: gs.rebuilds[rebuildLog]}
	return len(gs.rebuilding), total
}
