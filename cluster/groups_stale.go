package cluster

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
)

// staleGrace is how long a member must be found in a shared group that no
// destination places in it before the group's leader drops it; a var for
// tests.
var staleGrace = time.Minute

// dropStale has each shared group this node leads drop the members that no
// destination places in it any more. A deleted member is dropped when its
// replica on the group's leader is destroyed (Replica.Destroy); one whose
// group changed leaders in between would otherwise stay, with its messages.
// A member counts as stale only while this node's meta replica is caught up
// and for staleGrace on end, so that a leader whose meta replica trails the
// one that just added a new member by an entry does not drop it.
func (gs *groups) dropStale() {
	if gs.n.meta.CaughtUp() != nil {
		return
	}
	gs.mu.RLock()
	shared := maps.Clone(gs.shared)
	gs.mu.RUnlock()
	now, found := time.Now(), map[string]bool{}
	for id, s := range shared {
		if s.Raft().State() != raft.Leader {
			continue
		}
		for _, key := range s.Members() {
			gs.mu.RLock()
			_, open := gs.byGroup[key]
			gs.mu.RUnlock()
			if open || gs.placedIn(key, id) {
				continue
			}
			found[key] = true
			first, seen := gs.stale[key]
			if !seen {
				gs.stale[key] = now
				continue
			}
			if now.Sub(first) < staleGrace {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := s.Drop(ctx, key)
			cancel()
			if err != nil {
				gs.n.log.Warn("dropping a member no destination places in its group", "group", id, "member", key, "err", err)
				continue
			}
			gs.n.log.Info("dropped a member no destination places in its group", "group", id, "member", key)
		}
	}
	for key := range gs.stale {
		if !found[key] {
			delete(gs.stale, key)
		}
	}
}

// placedIn reports whether the meta state places the member keyed key
// (groupID) in shared group id.
func (gs *groups) placedIn(key, id string) bool {
	addr, _, _ := strings.Cut(key, "@")
	name, idx, err := fsm.ParseAddress(addr)
	if err != nil || idx < 0 {
		return false
	}
	d, ok := gs.n.meta.Destination(name)
	return ok && idx < len(d.Members) && groupID(d, uint32(idx)) == key && d.Members[idx].Group == id
}
