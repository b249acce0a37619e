package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairnmq/cairn/cluster/placement"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member is renewed (fsm/meta_renew.go) when its destination's
// replication factor changed (SetReplicas) or to spread hosts onto nodes
// that joined (placement.Decide): the meta leader starts each renewal
// (renewMembers, placeReplicas), the renewed member's host ends it once
// the member is empty (mover.Drained, finishRenewal).

// renewMembers, on the meta leader, takes each destination one step
// towards its replication factor: while no member of it drains, it starts
// renewing the first active member placed with another factor, after
// adding a spare member when that one is the only active member; once none
// is left to renew, the spare drains away. It waits while fewer live nodes
// than the factor could take the new members.
func (m metaNode) renewMembers(ctx context.Context) error {
	n := m.n
	var dests []*fsmpb.Destination
	n.meta.Read(func(m *fsm.Meta) {
		for _, d := range m.Destinations() {
			if d.Spare || slices.ContainsFunc(d.Members, func(p *fsmpb.MemberPlacement) bool { return fsm.NeedsRenewal(d, p) }) {
				dests = append(dests, d)
			}
		}
	})
	if len(dests) == 0 {
		return nil
	}
	nodes := n.placementNodes(ctx)
	for _, d := range dests {
		cmd := placement.RenewalStep(d, len(nodes))
		if cmd == nil {
			continue
		}
		if r, ok := cmd.(*fsmpb.ResizeDestination); ok && r.Spare {
			p := n.placeMember(uint32(len(d.Members)), nodes, placement.LeastHosting(d, nodes), int(d.Replicas), false)
			p.Uid = newID(8)
			r.Add = []*fsmpb.MemberPlacement{p}
		}
		if _, err := n.meta.Apply(ctx, cmd); err != nil {
			return fmt.Errorf("renewing the members of %s: %w", d.Name, err)
		}
		n.groups.poke()
		n.log.Info("renewing a destination's members to its replication factor", "destination", d.Name, "replicas", d.Replicas, "step", fmt.Sprintf("%T", cmd))
	}
	return nil
}

// finishRenewal places a drained renewing member anew: preferring the
// node it is renewed onto (RenewOn) or else its preferred host, if that
// node can still take it, with the destination's replication factor,
// under a new uid, numbering its deliveries on from nextDelivery.
func (n *Node) finishRenewal(ctx context.Context, d *fsmpb.Destination, idx uint32, nextDelivery uint64) error {
	nodes := n.placementNodes(ctx)
	if len(nodes) < int(d.Replicas) {
		return fmt.Errorf("%d live nodes for a replication factor of %d", len(nodes), d.Replicas)
	}
	old := d.Members[idx]
	first := slices.Index(nodes, old.RenewOn)
	if first < 0 {
		first = slices.Index(nodes, old.Replicas[0])
	}
	if first < 0 {
		first = placement.LeastHosting(d, nodes)
	}
	p := n.placeMember(idx, nodes, first, int(d.Replicas), old.RenewOn != "")
	p.Uid, p.FirstDeliveryId = newID(8), nextDelivery
	if _, err := n.meta.Apply(ctx, &fsmpb.RenewMember{Name: d.Name, Index: idx, Placement: p}); err != nil {
		return err
	}
	n.groups.poke()
	n.log.Info("member renewed", "member", fsm.MemberName(d.Name, idx), "replicas", p.Replicas)
	return nil
}

// memberGroup is the Raft group (groupID) of the member named name, or "".
func (n *Node) memberGroup(name string) string {
	dest, idx, err := fsm.ParseAddress(name)
	d, ok := n.meta.Destination(dest)
	if err != nil || !ok || idx < 0 || idx >= len(d.Members) {
		return ""
	}
	return groupID(d, uint32(idx))
}
