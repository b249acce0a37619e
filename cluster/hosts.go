package cluster

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
)

// Which node hosts each member group: the leadership goes to the group's
// preferred host once that node can lead and votes in the group.

// transferEvery bounds how often a member's leadership is moved towards its
// preferred host, so an unhealthy preferred host cannot make it flap.
const transferEvery = 5 * time.Second

// preferHosts moves the leadership of each member this node hosts to the
// member's preferred host (its first replica) when that node is alive and
// caught up: placement spreads preferred hosts over the nodes, so this
// spreads the hosting. hashicorp/raft brings the target's log up to date
// before handing over, and gives up (the leader stays) if it cannot; but
// not its state machine, whose applies a new leader waits for before it
// serves.
func (gs *groups) preferHosts() {
	canLead := gs.n.nodesThatCanLead()
	for _, u := range gs.units() {
		if u.raft.State() != raft.Leader {
			continue
		}
		if err := gs.reconcileMemberVoters(u); err != nil {
			gs.n.log.Warn("matching member group to its placement", "group", u.id, "err", err)
			continue
		}
		preferred := gs.preferred(u.member)
		leaving := gs.n.leaving.Load()
		if preferred == "" || preferred == gs.n.cfg.NodeID || !canLead[preferred] || leaving || !votes(u.raft, preferred) {
			continue
		}
		gs.mu.Lock()
		last := gs.transferred[u.id]
		if time.Since(last) < transferEvery {
			gs.mu.Unlock()
			continue
		}
		gs.transferred[u.id] = time.Now()
		gs.mu.Unlock()
		addr, err := (raftAddresses{gs.n}).ServerAddr(raft.ServerID(preferred))
		if err != nil {
			continue
		}
		gs.n.log.Info("moving member leadership to its preferred host", "group", u.id, "to", preferred)
		go func() {
			if err := u.raft.LeadershipTransferToServer(raft.ServerID(preferred), addr).Error(); err != nil {
				gs.n.log.Info("leadership transfer did not happen", "group", u.id, "to", preferred, "err", err)
			}
		}()
	}
}

// votes reports whether node is a voter of the group: a replica still
// catching up as a non-voter cannot take its leadership.
func votes(r *raft.Raft, node string) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == node && s.Suffrage == raft.Voter
	})
}

// preferred is a member's preferred host in the current placement.
func (gs *groups) preferred(name string) string {
	dest, idx, err := fsm.ParseAddress(name)
	if err != nil || idx < 0 {
		return ""
	}
	d, ok := gs.n.meta.Destination(dest)
	if !ok || idx >= len(d.Members) || len(d.Members[idx].Replicas) == 0 {
		return ""
	}
	return d.Members[idx].Replicas[0]
}

// lagging reports whether a member replica open here holds more than
// leadSlack entries of its log that its state machine has not applied, as a
// restarted node does while it replays a deep queue's log: a leadership
// handed to it would keep the member waiting for the replay.
func (gs *groups) lagging() bool {
	for _, u := range gs.units() {
		if last := u.raft.LastIndex(); last > u.applied()+leadSlack {
			return true
		}
	}
	return false
}

// replicasLagging is groups.lagging; tests replace it to hold a node behind.
var replicasLagging = (*groups).lagging

// leadSlack is how many entries of its log a replica may hold unapplied and
// still be handed a leadership: a busy follower's applies trail its log by a
// few entries, a restarted one's by every entry since its last snapshot
// (about 5,000 for 1.2 million 1 KiB messages stored by asynchronous sends).
const leadSlack = 256
