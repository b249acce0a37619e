package cluster

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member is renewed (fsm/meta_renew.go) when its destination's
// replication factor changed (SetReplicas) or to spread hosts onto nodes
// that joined (rehomes): the meta leader starts each renewal
// (renewMembers, placeReplicas), the renewed member's host ends it once
// the member is empty (mover.Drained, finishRenewal).

// renewMembers, on the meta leader, takes each destination one step
// towards its replication factor: while no member of it drains, it starts
// renewing the first active member placed with another factor, after
// adding a spare member when that one is the only active member; once none
// is left to renew, the spare drains away. It waits while fewer live nodes
// than the factor could take the new members.
func (mg *metaGroup) renewMembers(ctx context.Context) error {
	var dests []*fsmpb.Destination
	mg.read(func(m *fsm.Meta) {
		for _, d := range m.Destinations() {
			if d.Spare || slices.ContainsFunc(d.Members, func(p *fsmpb.MemberPlacement) bool { return fsm.NeedsRenewal(d, p) }) {
				dests = append(dests, d)
			}
		}
	})
	if len(dests) == 0 {
		return nil
	}
	nodes := mg.n.placementNodes(ctx)
	for _, d := range dests {
		cmd := renewalStep(d, len(nodes))
		if cmd == nil {
			continue
		}
		if r, ok := cmd.(*fsmpb.ResizeDestination); ok && r.Spare {
			p := mg.n.placeMember(uint32(len(d.Members)), nodes, leastHosting(d, nodes), int(d.Replicas), false)
			p.Uid = newID(8)
			r.Add = []*fsmpb.MemberPlacement{p}
		}
		if _, err := mg.n.meta.apply(ctx, cmd); err != nil {
			return fmt.Errorf("renewing the members of %s: %w", d.Name, err)
		}
		mg.n.groups.poke()
		mg.n.log.Info("renewing a destination's members to its replication factor", "destination", d.Name, "replicas", d.Replicas, "step", fmt.Sprintf("%T", cmd))
	}
	return nil
}

// renewalStep is the next meta command that renews d's members, or nil:
// a ResizeDestination with Spare set (its member still to be placed) when
// the only active member needs renewal, a RenewMember starting the first
// renewal, or a ResizeDestination draining the spare once none is left.
// Nothing starts while a member drains, or while fewer than d.Replicas
// nodes (live ones) could take a new member.
func renewalStep(d *fsmpb.Destination, live int) proto.Message {
	if slices.ContainsFunc(d.Members, func(p *fsmpb.MemberPlacement) bool { return p.Draining }) {
		return nil
	}
	i := slices.IndexFunc(d.Members, func(p *fsmpb.MemberPlacement) bool { return fsm.NeedsRenewal(d, p) })
	switch {
	case i < 0 && d.Spare:
		return &fsmpb.ResizeDestination{Name: d.Name, Active: uint32(len(d.Members) - 1)}
	case i < 0 || live < int(d.Replicas):
		return nil
	case len(d.Members) == 1:
		return &fsmpb.ResizeDestination{Name: d.Name, Active: 2, Spare: true}
	}
	return &fsmpb.RenewMember{Name: d.Name, Index: uint32(i)}
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
		first = leastHosting(d, nodes)
	}
	p := n.placeMember(idx, nodes, first, int(d.Replicas), old.RenewOn != "")
	p.Uid, p.FirstDeliveryId = newID(8), nextDelivery
	if _, err := n.meta.apply(ctx, &fsmpb.RenewMember{Name: d.Name, Index: idx, Placement: p}); err != nil {
		return err
	}
	n.groups.poke()
	n.log.Info("member renewed", "member", fsm.MemberName(d.Name, idx), "replicas", p.Replicas)
	return nil
}

// leastHosting is the index in nodes of the node that is preferred host of
// the fewest active members of d.
func leastHosting(d *fsmpb.Destination, nodes []string) int {
	hosted := map[string]int{}
	for _, p := range d.Members {
		if !p.Draining {
			hosted[p.Replicas[0]]++
		}
	}
	first := 0
	for j, node := range nodes {
		if hosted[node] < hosted[nodes[first]] {
			first = j
		}
	}
	return first
}

// memberGroup is the Raft group (groupID) of the member named name, or "".
func (n *Node) memberGroup(name string) string {
	dest, idx, err := fsm.ParseAddress(name)
	d, ok := n.meta.destination(dest)
	if err != nil || !ok || idx < 0 || idx >= len(d.Members) {
		return ""
	}
	return groupID(d, uint32(idx))
}

// rehomes plans up to max renewals that even out how many active members
// each candidate node is preferred host of, where moving whole groups
// (spreadHosts) cannot: while the node that hosts the most hosts two or
// more members over the one that hosts the fewest (and can lead), a member
// of the first is renewed onto the second (RenewMember.on), preferring a
// destination with no member on the second yet. Only while no member is
// being renewed, at most one per destination, and only members of
// destinations that have another active member to drain into, no member
// draining and none left to renew to their replication factor (which goes
// first).
func rehomes(m *fsm.Meta, nodes []string, canLead map[string]bool, max int) []*fsmpb.RenewMember {
	hosted := map[string]int{}
	for _, id := range nodes {
		hosted[id] = 0
	}
	dests := m.Destinations()
	for _, d := range dests {
		for _, p := range d.Members {
			if p.Renewing {
				return nil
			}
			if _, ok := hosted[p.Replicas[0]]; ok && !p.Draining {
				hosted[p.Replicas[0]]++
			}
		}
	}
	var out []*fsmpb.RenewMember
	used := map[string]bool{}
	for len(out) < max {
		most, fewest := "", ""
		for _, id := range nodes {
			if most == "" || hosted[id] > hosted[most] {
				most = id
			}
			if canLead[id] && (fewest == "" || hosted[id] < hosted[fewest]) {
				fewest = id
			}
		}
		if fewest == "" || hosted[most]-hosted[fewest] < 2 {
			return out
		}
		mv := rehomeOne(dests, used, most, fewest)
		if mv == nil {
			return out
		}
		out = append(out, mv)
		used[mv.Name] = true
		hosted[most]--
		hosted[fewest]++
	}
	return out
}

// rehomeOne picks a member hosted by from to renew onto to: of the first
// destination by name that may renew one (see rehomes) and has no member
// on to, or else of the first that may.
func rehomeOne(dests []*fsmpb.Destination, used map[string]bool, from, to string) *fsmpb.RenewMember {
	var fallback *fsmpb.RenewMember
	for _, d := range dests {
		busy := d.Spare || slices.ContainsFunc(d.Members, func(p *fsmpb.MemberPlacement) bool { return p.Draining || fsm.NeedsRenewal(d, p) })
		if used[d.Name] || len(d.Members) < 2 || busy {
			continue
		}
		on := slices.ContainsFunc(d.Members, func(p *fsmpb.MemberPlacement) bool { return p.Replicas[0] == to })
		i := slices.IndexFunc(d.Members, func(p *fsmpb.MemberPlacement) bool { return p.Replicas[0] == from })
		if i < 0 {
			continue
		}
		mv := &fsmpb.RenewMember{Name: d.Name, Index: uint32(i), On: to}
		if !on {
			return mv
		}
		if fallback == nil {
			fallback = mv
		}
	}
	return fallback
}
