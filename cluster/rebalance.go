package cluster

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cairnmq/cairn/cluster/placement"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// placeReplicas, on the meta leader, makes the moves placement.Decide plans:
// repairs at once; spreading one replica or one preferred host at a time,
// at most every rebalanceEvery, and a replica only once no group's
// configuration is still changing (the group's leader then adds the new
// replica, or moves the leadership, preferHosts). Repair and spreading
// stop with Config.NoAutoRebalance. The leader asks every second; a round
// that found nothing to do is not walked again until the meta state, the
// live nodes or the nodes that can lead change.
func (m metaNode) placeReplicas(ctx context.Context) error {
	n := m.n
	alive, canLead := n.aliveNodes(), n.nodesThatCanLead()
	auto := !n.cfg.NoAutoRebalance
	var plan placement.Plan
	var at placementRound
	n.meta.Read(func(m *fsm.Meta) {
		at = placementRound{applied: m.Applied(), alive: strings.Join(slices.Sorted(maps.Keys(alive)), ","),
			canLead: fmt.Sprint(canLead)} // fmt prints a map's keys in order
		if at != n.placedAt {
			plan = placement.Decide(m, alive, canLead, placement.Scope{Repair: auto, SpreadReplicas: 1, HostMoves: 1, Rehomes: 1})
		}
	})
	if at == n.placedAt {
		return nil
	}
	spreading := len(plan.Hosts) > 0 || plan.Spread
	if spreading && (time.Since(n.rebalanced) < rebalanceEvery || plan.Spread && n.movesInFlight(ctx)) {
		plan.Hosts = nil
		if plan.Spread {
			plan.Replicas = nil
		}
		at = placementRound{} // the next round, not placedAt: this one had work
	}
	done, err := n.applyPlan(ctx, plan)
	if done > 0 || err != nil {
		if spreading && err == nil {
			n.rebalanced = time.Now()
		}
		return err
	}
	n.placedAt = at
	return nil
}

// applyPlan runs a plan's commands through the meta group, in order, and
// returns how many it ran before the first that failed.
func (n *Node) applyPlan(ctx context.Context, plan placement.Plan) (int, error) {
	done := 0
	for _, mv := range plan.Replicas {
		name := fsm.MemberName(mv.Dest, mv.Index)
		if mv.From == "" {
			if _, err := n.meta.Apply(ctx, &fsmpb.AddReplica{Destination: mv.Dest, Member: mv.Index, Node: mv.To}); err != nil {
				return done, fmt.Errorf("adding a replica of under-replicated %s on %s: %w", name, mv.To, err)
			}
			n.log.Info("under-replicated member given a replica", "member", name, "node", mv.To)
		} else {
			if _, err := n.meta.Apply(ctx, &fsmpb.ReplaceReplica{Destination: mv.Dest, Member: mv.Index, Old: mv.From, New: mv.To, KeepHost: mv.KeepHost}); err != nil {
				return done, fmt.Errorf("moving %s's replica on %s: %w", name, mv.From, err)
			}
			n.log.Info("member's replica moved", "member", name, "from", mv.From, "to", mv.To)
		}
		done++
	}
	for _, p := range plan.Hosts {
		name := fsm.MemberName(p.Destination, p.Member)
		if _, err := n.meta.Apply(ctx, p); err != nil {
			return done, fmt.Errorf("moving %s's preferred host to %s: %w", name, p.Node, err)
		}
		n.log.Info("hosts spread: a group's preferred host moved", "member", name, "node", p.Node)
		done++
	}
	for _, r := range plan.Rehome {
		name := fsm.MemberName(r.Name, r.Index)
		if _, err := n.meta.Apply(ctx, r); err != nil {
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
	n.meta.Read(func(m *fsm.Meta) {
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				name := fsm.MemberName(d.Name, p.Index)
				for node, rs := range reports {
					if g := rs[name]; g != nil && g.Leader == node && (len(g.Nonvoters) > 0 || !placement.SameNodes(g.Servers, p.Replicas)) {
						inFlight = true
						return
					}
				}
			}
		}
	})
	return inFlight
}

// rebalanceEvery bounds how often the meta leader moves a group's
// preferred host or replica, so that they move one at a time.
const rebalanceEvery = 10 * time.Second

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
	var plan placement.Plan
	n.meta.Read(func(m *fsm.Meta) {
		plan = placement.Decide(m, alive, canLead, placement.Scope{Repair: true, SpreadReplicas: math.MaxInt, HostMoves: math.MaxInt, Rehomes: math.MaxInt})
	})
	resp := &clientpb.RebalanceResponse{Degraded: plan.Degraded}

	for _, mv := range plan.Replicas {
		action := "move-replica"
		switch {
		case mv.From == "":
			action = "add-replica"
		case mv.To == "":
			action = "drop-replica"
		}
		resp.Moves = append(resp.Moves, &clientpb.PlacementMove{Member: fsm.MemberName(mv.Dest, mv.Index), Action: action, From: mv.From, To: mv.To})
	}
	for _, p := range plan.Hosts {
		resp.Moves = append(resp.Moves, &clientpb.PlacementMove{Member: fsm.MemberName(p.Destination, p.Member), Action: "prefer-host", To: p.Node})
	}
	for _, r := range plan.Rehome {
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
