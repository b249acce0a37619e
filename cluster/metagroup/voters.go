package metagroup

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// maxMetaVoters bounds the meta group's voters; more nodes join as
// non-voters, which replicate it without slowing its commits.
const maxMetaVoters = 5

// reconcileMetaVoters, on the meta leader, adds registered nodes that gossip
// holds alive to the meta group, as non-voters that vote once caught up
// (up to maxMetaVoters), and removes the nodes an operator removed.
func (mg *Group) reconcileMetaVoters() error {
	r := mg.group.Raft
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	servers := f.Configuration().Servers
	voters := 0
	in := map[string]raft.ServerSuffrage{}
	for _, s := range servers {
		in[string(s.ID)] = s.Suffrage
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	alive := mg.alive()
	var toAdd, toPromote []*fsmpb.Node
	var toRemove []string
	mg.Read(func(m *fsm.Meta) {
		for _, nd := range m.Nodes() {
			switch suffrage, ok := in[nd.Id]; {
			case !alive[nd.Id]:
			case !ok:
				toAdd = append(toAdd, nd)
			case suffrage == raft.Nonvoter:
				toPromote = append(toPromote, nd)
			}
		}
		for _, s := range servers {
			if m.Removed(string(s.ID)) {
				toRemove = append(toRemove, string(s.ID))
			}
		}
	})
	for _, nd := range toAdd {
		if err := r.AddNonvoter(raft.ServerID(nd.Id), raft.ServerAddress(nd.RaftAddr), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("adding node %s to the meta group: %w", nd.Id, err)
		}
		mg.cfg.Logger.Info("node added to the meta group, not voting until caught up", "id", nd.Id)
	}
	for _, nd := range toPromote {
		if voters >= maxMetaVoters || !mg.node.ReplicaCaughtUp(nd.Id, ID, mg.group.Raft) {
			continue
		}
		if err := r.AddVoter(raft.ServerID(nd.Id), raft.ServerAddress(nd.RaftAddr), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("promoting node %s in the meta group: %w", nd.Id, err)
		}
		voters++
		mg.cfg.Logger.Info("node caught up with the meta group: now a voter", "id", nd.Id)
	}
	for _, id := range toRemove {
		if err := r.RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("removing node %s from the meta group: %w", id, err)
		}
		mg.cfg.Logger.Info("removed node taken out of the meta group", "id", id)
	}
	return nil
}

// demoteEmptied, on the meta leader, makes a node that came back with an
// empty data directory a non-voter of the meta group, when the other
// voters are alive to commit without it; reconcileMetaVoters promotes it
// again once caught up. Left a voter, it would vote for a candidate
// missing what it had acknowledged, and an entry committed on it could be
// lost.
func (mg *Group) demoteEmptied(id string) error {
	r := mg.group.Raft
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	alive := mg.alive()
	isVoter := false
	for _, s := range f.Configuration().Servers {
		switch {
		case s.Suffrage != raft.Voter:
		case string(s.ID) == id:
			isVoter = true
		case !alive[string(s.ID)]:
			return nil // the group needs every voter it has
		}
	}
	if !isVoter {
		return nil
	}
	if err := r.DemoteVoter(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("demoting node %s, back empty, in the meta group: %w", id, err)
	}
	return nil
}

// alive are the nodes gossip holds alive.
func (mg *Group) alive() map[string]bool {
	out := map[string]bool{}
	for _, m := range mg.node.Members() {
		if m.Alive {
			out[m.ID] = true
		}
	}
	return out
}
