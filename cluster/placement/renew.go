package placement

import (
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// RenewalStep is the next meta command that renews d's members, or nil:
// a ResizeDestination with Spare set (its member still to be placed) when
// the only active member needs renewal, a RenewMember starting the first
// renewal, or a ResizeDestination draining the spare once none is left.
// Nothing starts while a member drains, or while fewer than d.Replicas
// nodes (live ones) could take a new member.
func RenewalStep(d *fsmpb.Destination, live int) proto.Message {
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

// LeastHosting is the index in nodes of the node that is preferred host of
// the fewest active members of d.
func LeastHosting(d *fsmpb.Destination, nodes []string) int {
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
		if used[d.Name] || len(d.Members) < 2 || busy || fsm.MembersFixed(d) {
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
