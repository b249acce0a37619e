package cluster

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// replicaMove is one change to a member's replicas, and to its shared
// group's: from "" adds a replica on to, to "" drops from's, both move
// from's replica to to. keepHost moves a replica off a live node: if it
// is the preferred host, the next replica becomes it
// (fsmpb.ReplaceReplica.keep_host).
type replicaMove struct {
	dest     string
	index    uint32
	from, to string
	keepHost bool
}

// placementScope is what a plan may change: with repair, members short of
// replicas and where replicas and hosts are (off in the automatic rounds
// with Config.NoAutoRebalance); up to spreadReplicas replicas onto nodes
// that hold fewer; up to hostMoves hosts; up to rehomes members renewed
// onto nodes that host fewer.
type placementScope struct {
	repair                             bool
	spreadReplicas, hostMoves, rehomes int
}

// placementPlan is what placement would change: members' replicas, then
// preferred hosts, then members renewed onto other hosts. spread says the
// replica moves spread replicas (rather than repair). degraded says why no
// host is planned to move: a registered node is down or a member is short
// of replicas.
type placementPlan struct {
	replicas []replicaMove
	hosts    []*fsmpb.PreferReplica
	rehome   []*fsmpb.RenewMember
	spread   bool
	degraded bool
}

// planPlacement says what keeps every member at the replicas its
// destination wants, and the preferred hosts spread:
//   - a replica placed on a removed node moves to a live node that holds
//     none of that member (the one with the fewest replicas), or is dropped
//     when there is none; one on a decommissioning node moves the same way
//     but is never dropped, and nothing new is placed on such a node;
//   - with repair, a member with fewer replicas than wanted gets one on
//     such a node as soon as one is alive (a node joining after a removal);
//   - with repair, while the cluster is whole (every registered node
//     alive, no member short), up to spreadReplicas groups move a replica
//     from the node that holds the most members' replicas to the one that
//     holds the fewest (spreadReplicas: a node that joined), each move
//     planned as if the ones before it were made;
//   - with repair, while the cluster is whole and no replica moves, up to
//     hostMoves groups whose preferred host has more members to host than
//     another replica's node make that one their preferred host
//     (spreadHosts), planned the same way;
//   - with repair, when no group's host can move so, up to rehomes members
//     are renewed onto the node that hosts the fewest (rehomes): a group
//     is hosted whole, so a node that joined hosts members of earlier
//     destinations only once they leave the groups they were born in.
func planPlacement(m *fsm.Meta, alive, canLead map[string]bool, scope placementScope) placementPlan {
	var plan placementPlan
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
			var mv []replicaMove
			for _, id := range p.Replicas {
				switch {
				case m.Removed(id):
					mv = append(mv, replicaMove{dest: d.Name, index: p.Index, from: id, to: free(p)})
				case m.Decommissioning(id):
					// Moved only onto another node: until one is free
					// the replica stays, and the node does not leave.
					if to := free(p); to != "" {
						mv = append(mv, replicaMove{dest: d.Name, index: p.Index, from: id, to: to, keepHost: true})
					}
					whole = false
				}
			}
			if len(p.Replicas) < fsm.Wanted(d, p) {
				whole = false
				if node := free(p); node != "" && len(mv) == 0 && scope.repair {
					mv = append(mv, replicaMove{dest: d.Name, index: p.Index, to: node})
				}
			}
			plan.replicas = append(plan.replicas, mv...)
		}
	}
	plan.degraded = !whole
	if len(plan.replicas) > 0 || !whole || !scope.repair {
		return plan
	}
	for len(plan.replicas) < scope.spreadReplicas {
		mv := spreadReplicas(units, candidates)
		if mv == nil {
			break
		}
		plan.replicas = append(plan.replicas, *mv)
	}
	if plan.spread = len(plan.replicas) > 0; plan.spread {
		return plan // hosts spread once the new replicas vote
	}
	for len(plan.hosts) < scope.hostMoves {
		prefer := spreadHosts(units, candidates, canLead)
		if prefer == nil {
			break
		}
		plan.hosts = append(plan.hosts, prefer)
	}
	if len(plan.hosts) == 0 {
		plan.rehome = rehomes(m, candidates, canLead, scope.rehomes)
	}
	return plan
}

// placing is what planPlacement plans with: the live nodes that may take
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

// placeReplicas, on the meta leader, makes the moves planPlacement plans:
// repairs at once; spreading one replica or one preferred host at a time,
// at most every rebalanceEvery, and a replica only once no group's
// configuration is still changing (the group's leader then adds the new
// replica, or moves the leadership, preferHosts). Repair and spreading
// stop with Config.NoAutoRebalance. The leader asks every second; a round
// that found nothing to do is not walked again until the meta state, the
// live nodes or the nodes that can lead change.
func (mg *metaGroup) placeReplicas(ctx context.Context) error {
	alive, canLead := mg.n.aliveNodes(), mg.n.nodesThatCanLead()
	auto := !mg.n.cfg.NoAutoRebalance
	var plan placementPlan
	var at placementRound
	mg.read(func(m *fsm.Meta) {
		at = placementRound{applied: m.Applied(), alive: strings.Join(slices.Sorted(maps.Keys(alive)), ","),
			canLead: fmt.Sprint(canLead)} // fmt prints a map's keys in order
		if at != mg.placedAt {
			plan = planPlacement(m, alive, canLead, placementScope{repair: auto, spreadReplicas: 1, hostMoves: 1, rehomes: 1})
		}
	})
	if at == mg.placedAt {
		return nil
	}
	spreading := len(plan.hosts) > 0 || plan.spread
	if spreading && (time.Since(mg.rebalanced) < rebalanceEvery || plan.spread && mg.n.movesInFlight(ctx)) {
		plan.hosts = nil
		if plan.spread {
			plan.replicas = nil
		}
		at = placementRound{} // the next round, not placedAt: this one had work
	}
	n, err := mg.n.applyPlan(ctx, plan)
	if n > 0 || err != nil {
		if spreading && err == nil {
			mg.rebalanced = time.Now()
		}
		return err
	}
	mg.placedAt = at
	return nil
}

// applyPlan runs a plan's commands through the meta group, in order, and
// returns how many it ran before the first that failed.
func (n *Node) applyPlan(ctx context.Context, plan placementPlan) (int, error) {
	done := 0
	for _, mv := range plan.replicas {
		name := fsm.MemberName(mv.dest, mv.index)
		if mv.from == "" {
			if _, err := n.meta.apply(ctx, &fsmpb.AddReplica{Destination: mv.dest, Member: mv.index, Node: mv.to}); err != nil {
				return done, fmt.Errorf("adding a replica of under-replicated %s on %s: %w", name, mv.to, err)
			}
			n.log.Info("under-replicated member given a replica", "member", name, "node", mv.to)
		} else {
			if _, err := n.meta.apply(ctx, &fsmpb.ReplaceReplica{Destination: mv.dest, Member: mv.index, Old: mv.from, New: mv.to, KeepHost: mv.keepHost}); err != nil {
				return done, fmt.Errorf("moving %s's replica on %s: %w", name, mv.from, err)
			}
			n.log.Info("member's replica moved", "member", name, "from", mv.from, "to", mv.to)
		}
		done++
	}
	for _, p := range plan.hosts {
		name := fsm.MemberName(p.Destination, p.Member)
		if _, err := n.meta.apply(ctx, p); err != nil {
			return done, fmt.Errorf("moving %s's preferred host to %s: %w", name, p.Node, err)
		}
		n.log.Info("hosts spread: a group's preferred host moved", "member", name, "node", p.Node)
		done++
	}
	for _, r := range plan.rehome {
		name := fsm.MemberName(r.Name, r.Index)
		if _, err := n.meta.apply(ctx, r); err != nil {
			return done, fmt.Errorf("renewing %s onto %s: %w", name, r.On, err)
		}
		n.log.Info("hosts spread: a member is renewed onto a node that hosts fewer", "member", name, "node", r.On)
		done++
	}
	return done, nil
}

// movesInFlight reports whether some member group's configuration, as
// its leader reports it, differs from its placement: a new replica still
// catching up, or an old one not removed yet.
func (n *Node) movesInFlight(ctx context.Context) bool {
	var nodes []*clientpb.NodeStatus
	for id := range n.aliveNodes() {
		nodes = append(nodes, &clientpb.NodeStatus{Id: id, Alive: true})
	}
	reports := n.groupReports(ctx, nodes)
	inFlight := false
	n.meta.read(func(m *fsm.Meta) {
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				name := fsm.MemberName(d.Name, p.Index)
				for node, rs := range reports {
					if g := rs[name]; g != nil && g.Leader == node && (len(g.Nonvoters) > 0 || !sameNodes(g.Servers, p.Replicas)) {
						inFlight = true
						return
					}
				}
			}
		}
	})
	return inFlight
}

// sameNodes reports whether a and b hold the same node ids.
func sameNodes(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// rebalanceEvery bounds how often the meta leader moves a group's
// preferred host or replica, so that they move one at a time.
const rebalanceEvery = 10 * time.Second

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
func spreadReplicas(units map[string]*hostUnit, nodes []string) *replicaMove {
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
	return &replicaMove{dest: best.dest, index: best.index, from: most, to: fewest, keepHost: true}
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

// placementRound is what a round of placeReplicas saw: the meta state's
// index, the live nodes and those that can lead.
type placementRound struct {
	applied        uint64
	alive, canLead string
}

// rebalance plans the moves placeReplicas would make, all of them at
// once (every host move, not one per rebalanceEvery), from this node's
// view of the meta state and of the live nodes, and with apply makes
// them. It repairs and spreads whatever Config.NoAutoRebalance says: an
// operator who turned the automatic moves off runs them by hand.
func (n *Node) rebalance(ctx context.Context, apply bool) (*clientpb.RebalanceResponse, error) {
	alive, canLead := n.aliveNodes(), n.nodesThatCanLead()
	var plan placementPlan
	n.meta.read(func(m *fsm.Meta) {
		plan = planPlacement(m, alive, canLead, placementScope{repair: true, spreadReplicas: math.MaxInt, hostMoves: math.MaxInt, rehomes: math.MaxInt})
	})
	resp := &clientpb.RebalanceResponse{Degraded: plan.degraded}

	for _, mv := range plan.replicas {
		action := "move-replica"
		switch {
		case mv.from == "":
			action = "add-replica"
		case mv.to == "":
			action = "drop-replica"
		}
		resp.Moves = append(resp.Moves, &clientpb.PlacementMove{Member: fsm.MemberName(mv.dest, mv.index), Action: action, From: mv.from, To: mv.to})
	}
	for _, p := range plan.hosts {
		resp.Moves = append(resp.Moves, &clientpb.PlacementMove{Member: fsm.MemberName(p.Destination, p.Member), Action: "prefer-host", To: p.Node})
	}
	for _, r := range plan.rehome {
		name := fsm.MemberName(r.Name, r.Index)
		resp.Moves = append(resp.Moves, &clientpb.PlacementMove{Member: name, Action: "renew-member", From: n.groups.preferred(name), To: r.On})
	}
	if !apply || len(resp.Moves) == 0 {
		return resp, nil
	}
	done, err := n.applyPlan(ctx, plan)
	if err != nil {
		return nil, fmt.Errorf("%w (%d of %d moves made; see cairn cluster status, then run rebalance again)", err, done, len(resp.Moves))
	}
	resp.Applied = true
	return resp, nil
}
