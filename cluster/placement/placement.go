package placement

import (
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Move is one change to a member's replicas, and to its shared
// group's: From "" adds a replica on To, To "" drops From's, both move
// From's replica to To. KeepHost moves a replica off a live node: if it
// is the preferred host, the next replica becomes it
// (fsmpb.ReplaceReplica.keep_host).
type Move struct {
	Dest     string
	Index    uint32
	From, To string
	KeepHost bool
}

// Scope is what a plan may change: with Repair, members short of
// replicas and where replicas and hosts are (off in the automatic rounds
// of a node run with --auto-rebalance=false); up to SpreadReplicas
// replicas onto nodes that hold fewer; up to HostMoves hosts; up to
// Rehomes members renewed onto nodes that host fewer.
type Scope struct {
	Repair                             bool
	SpreadReplicas, HostMoves, Rehomes int
}

// Plan is what placement would change: members' replicas, then
// preferred hosts, then members renewed onto other hosts. Spread says the
// replica moves spread replicas (rather than repair). Degraded says why no
// host is planned to move: a registered node is down or a member is short
// of replicas.
type Plan struct {
	Replicas []Move
	Hosts    []*fsmpb.PreferReplica
	Rehome   []*fsmpb.RenewMember
	Spread   bool
	Degraded bool
}

// Decide says what keeps every member at the replicas its
// destination wants, and the preferred hosts spread:
//   - a replica placed on a removed node moves to a live node that holds
//     none of that member (the one with the fewest replicas), or is dropped
//     when there is none; one on a decommissioning node moves the same way
//     but is never dropped, and nothing new is placed on such a node;
//   - with Repair, a member with fewer replicas than wanted gets one on
//     such a node as soon as one is alive (a node joining after a removal);
//   - with Repair, while the cluster is whole (every registered node
//     alive, no member short), up to spreadReplicas groups move a replica
//     from the node that holds the most members' replicas to the one that
//     holds the fewest (spreadReplicas: a node that joined), each move
//     planned as if the ones before it were made;
//   - with Repair, while the cluster is whole and no replica moves, up to
//     hostMoves groups whose preferred host has more members to host than
//     another replica's node make that one their preferred host
//     (spreadHosts), planned the same way;
//   - with Repair, when no group's host can move so, up to rehomes members
//     are renewed onto the node that hosts the fewest (rehomes): a group
//     is hosted whole, so a node that joined hosts members of earlier
//     destinations only once they leave the groups they were born in.
func Decide(m *fsm.Meta, alive, canLead map[string]bool, scope Scope) Plan {
	var plan Plan
	pl, whole := newPlacing(m, alive)
	candidates, free := pl.candidates, pl.free
	units := map[string]*hostUnit{} // by group, or member for a group of its own
	for _, d := range m.Destinations() {
		for _, p := range d.Members {
			key := fsm.GroupKey(d.Name, p)
			if u := units[key]; u != nil {
				u.members++
				continue
			}
			units[key] = &hostUnit{dest: d.Name, index: p.Index, replicas: p.Replicas, members: 1}
			var mv []Move
			for _, id := range p.Replicas {
				switch {
				case m.Removed(id):
					mv = append(mv, Move{Dest: d.Name, Index: p.Index, From: id, To: free(p)})
				case m.Decommissioning(id):
					// Moved only onto another node: until one is free
					// the replica stays, and the node does not leave.
					if to := free(p); to != "" {
						mv = append(mv, Move{Dest: d.Name, Index: p.Index, From: id, To: to, KeepHost: true})
					}
					whole = false
				}
			}
			if len(p.Replicas) < fsm.Wanted(d, p) {
				whole = false
				if node := free(p); node != "" && len(mv) == 0 && scope.Repair {
					mv = append(mv, Move{Dest: d.Name, Index: p.Index, To: node})
				}
			}
			plan.Replicas = append(plan.Replicas, mv...)
		}
	}
	plan.Degraded = !whole
	if len(plan.Replicas) > 0 || !whole || !scope.Repair {
		return plan
	}
	for len(plan.Replicas) < scope.SpreadReplicas {
		mv := spreadReplicas(units, candidates)
		if mv == nil {
			break
		}
		plan.Replicas = append(plan.Replicas, *mv)
	}
	if plan.Spread = len(plan.Replicas) > 0; plan.Spread {
		return plan // hosts spread once the new replicas vote
	}
	for len(plan.Hosts) < scope.HostMoves {
		prefer := spreadHosts(units, candidates, canLead)
		if prefer == nil {
			break
		}
		plan.Hosts = append(plan.Hosts, prefer)
	}
	if len(plan.Hosts) == 0 {
		plan.Rehome = rehomes(m, candidates, canLead, scope.Rehomes)
	}
	return plan
}

// placing is what Decide plans with: the live nodes that may take
// replicas (not decommissioning) and how many members' replicas each
// holds, counting the ones planned.
type placing struct {
	candidates []string
	load       map[string]int
}

// newPlacing reads the nodes and their load from m; whole says every
// registered node is alive.
func newPlacing(m *fsm.Meta, alive map[string]bool) (pl *placing, whole bool) {
	pl, whole = &placing{load: map[string]int{}}, true
	for _, nd := range m.Nodes() {
		switch {
		case !alive[nd.Id]:
			whole = false
		case !m.Decommissioning(nd.Id):
			pl.candidates = append(pl.candidates, nd.Id)
			pl.load[nd.Id] = 0
		}
	}
	for _, d := range m.Destinations() {
		for _, p := range d.Members {
			for _, id := range p.Replicas {
				pl.load[id]++
			}
		}
	}
	return pl, whole
}

// free is the live node that holds no replica of p and the fewest
// replicas, or ""; it counts the replica planned there.
func (pl *placing) free(p *fsmpb.MemberPlacement) string {
	var out []string
	for _, c := range pl.candidates {
		if !slices.Contains(p.Replicas, c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return ""
	}
	sort.SliceStable(out, func(i, j int) bool { return pl.load[out[i]] < pl.load[out[j]] })
	pl.load[out[0]]++
	return out[0]
}

// SameNodes reports whether a and b hold the same node ids.
func SameNodes(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// hostUnit is a Raft group as placement sees it: a member of it, its
// replicas (the first its preferred host) and how many members it holds.
type hostUnit struct {
	dest     string
	index    uint32
	replicas []string
	members  int
}

// spreadHosts picks the move of a preferred host that best evens out how
// many members each live node hosts: from the node that hosts the most to
// the one that hosts the fewest, among the groups with a replica on both,
// the one whose size is nearest half the difference, and makes it in
// units. It returns nil when no move makes the spread narrower, or the
// target cannot lead yet.
func spreadHosts(units map[string]*hostUnit, nodes []string, canLead map[string]bool) *fsmpb.PreferReplica {
	hosted := map[string]int{}
	for _, u := range units {
		hosted[u.replicas[0]] += u.members
	}
	best, _, fewest := evenOut(units, nodes, hosted, func(u *hostUnit, most, fewest string) bool {
		return u.replicas[0] == most && slices.Contains(u.replicas, fewest)
	})
	if best == nil || !canLead[fewest] {
		return nil
	}
	// A new slice: the old one is the meta state's.
	best.replicas = append([]string{fewest}, slices.DeleteFunc(slices.Clone(best.replicas), func(id string) bool { return id == fewest })...)
	return &fsmpb.PreferReplica{Destination: best.dest, Member: best.index, Node: fewest}
}

// spreadReplicas picks the move of a replica that best evens out how many
// members' replicas each live node holds: from the node that holds the
// most to the one that holds the fewest, among the groups on the first
// and not the second, the one whose size is nearest half the difference,
// and makes it in units. It returns nil when no move makes the spread
// narrower.
func spreadReplicas(units map[string]*hostUnit, nodes []string) *Move {
	held := map[string]int{}
	for _, u := range units {
		for _, id := range u.replicas {
			held[id] += u.members
		}
	}
	best, most, fewest := evenOut(units, nodes, held, func(u *hostUnit, most, fewest string) bool {
		return slices.Contains(u.replicas, most) && !slices.Contains(u.replicas, fewest)
	})
	if best == nil {
		return nil
	}
	// A new slice: the old one is the meta state's. The preferred host
	// stays on a replica that holds the state.
	if best.replicas[0] == most {
		best.replicas = append(slices.Clone(best.replicas[1:]), fewest)
	} else {
		best.replicas = slices.Clone(best.replicas)
		best.replicas[slices.Index(best.replicas, most)] = fewest
	}
	return &Move{Dest: best.dest, Index: best.index, From: most, To: fewest, KeepHost: true}
}

// evenOut finds the nodes with the most and the fewest load and, among the
// units that fit a move between them and are smaller than the difference
// (so that moving one narrows it), the one whose size is nearest half the
// difference (by key, of equals); best is nil when there is none.
func evenOut(units map[string]*hostUnit, nodes []string, load map[string]int, fits func(u *hostUnit, most, fewest string) bool) (best *hostUnit, most, fewest string) {
	if len(nodes) < 2 {
		return nil, "", ""
	}
	most, fewest = nodes[0], nodes[0]
	for _, id := range nodes {
		if load[id] > load[most] {
			most = id
		}
		if load[id] < load[fewest] {
			fewest = id
		}
	}
	gap := load[most] - load[fewest]
	for _, key := range slices.Sorted(maps.Keys(units)) {
		u := units[key]
		if u.members >= gap || !fits(u, most, fewest) {
			continue
		}
		if best == nil || abs(2*u.members-gap) < abs(2*best.members-gap) {
			best = u
		}
	}
	return best, most, fewest
}

func abs(x int) int { return max(x, -x) }

// SharedGroupID names the shared group of the members placed on replicas,
// in that order (the first is the preferred host): the groups of a
// cluster grow with its nodes, not with its destinations.
func SharedGroupID(replicas []string) string {
	return "shared@" + strings.Join(replicas, ",")
}

// JoinSharedGroup puts p, placed on its replicas, in a shared group: the
// group named after its replicas (SharedGroupID) if it is on exactly those
// nodes (and, with sameHost, still prefers the first), else another group
// on those nodes, else a new group, named with suffix.
func JoinSharedGroup(m *fsm.Meta, p *fsmpb.MemberPlacement, sameHost bool, suffix string) {
	p.Group = SharedGroupID(p.Replicas)
	q := m.Group(p.Group)
	if q != nil && (!SameNodes(q.Replicas, p.Replicas) || sameHost && q.Replicas[0] != p.Replicas[0]) {
		if q = m.GroupOn(p.Replicas); q == nil {
			p.Group += "." + suffix
		}
	}
	if q != nil {
		p.Group, p.Replicas, p.Initial = q.Group, slices.Clone(q.Replicas), slices.Clone(q.Initial)
	}
}
