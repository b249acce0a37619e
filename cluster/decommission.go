package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
)

// Decommission takes this node out of the cluster for good, a scale-down:
// the meta group marks it decommissioning, placement moves each replica it
// holds to another live node (the new replica joins as a non-voter; this
// one stays a voter, open, until the new one votes), and once no group
// holds a replica here, the node is removed (RemoveNode), hands the meta
// group over if it leads it, and stops as Leave does. It returns how many
// member replicas moved. Refused, changing nothing, when some member has
// no other node to move to. When ctx ends first, the moves go on: calling
// it again waits for the rest.
func (n *Node) Decommission(ctx context.Context) (int, error) {
	id := n.cfg.NodeID
	held, err := n.decommissionable()
	if err != nil {
		return 0, err
	}
	if _, err := n.meta.Apply(ctx, &fsmpb.DecommissionNode{Id: id}); err != nil {
		return 0, frontend.WireError(err)
	}
	n.log.Info("decommissioning: moving this node's replicas to other nodes", "members", held)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for n.holdsReplicas() {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: node %s's replicas have not all moved yet; they go on moving: run the command again to wait for them (cairn cluster status shows them moving)",
				transport.ErrUnavailable, id)
		case <-t.C:
		}
	}
	if _, err := n.meta.Apply(ctx, &fsmpb.RemoveNode{Id: id}); err != nil {
		return held, frontend.WireError(err)
	}
	n.log.Info("decommissioned: every replica moved, node removed from the cluster; stopping", "members", held)
	return held, n.Leave(ctx)
}

// decommissionable counts the member replicas this node holds, or says
// why it cannot leave: it is the cluster's last live node, or a member has
// no live node left to move to.
func (n *Node) decommissionable() (held int, err error) {
	id, alive := n.cfg.NodeID, n.aliveNodes()
	n.meta.Read(func(m *fsm.Meta) {
		if _, ok := m.Node(id); !ok {
			err = fmt.Errorf("%w: node %s is not registered in the cluster yet; wait until it is ready", transport.ErrUnavailable, id)
			return
		}
		var others []string
		for _, nd := range m.Nodes() {
			if nd.Id != id && alive[nd.Id] && !m.Decommissioning(nd.Id) {
				others = append(others, nd.Id)
			}
		}
		if len(others) == 0 {
			err = fmt.Errorf("%w: node %s is the cluster's only live node (not leaving); it cannot leave the cluster", transport.ErrInvalidArgument, id)
			return
		}
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				if !slices.Contains(p.Replicas, id) {
					continue
				}
				held++
				if !slices.ContainsFunc(others, func(o string) bool { return !slices.Contains(p.Replicas, o) }) {
					err = fmt.Errorf("%w: %s has replicas on %v and no other live node to move the one on %s to; start another node first, or remove a replica with fewer --replicas",
						transport.ErrInvalidArgument, fsm.MemberName(d.Name, p.Index), p.Replicas, id)
					return
				}
			}
		}
	})
	return held, err
}

// holdsReplicas says whether this node still holds a member replica:
// placed here, or moved away and still open, in its group's configuration
// until the replica that replaces it votes (groups.retired).
func (n *Node) holdsReplicas() bool {
	placed := false
	n.meta.Read(func(m *fsm.Meta) {
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				placed = placed || slices.Contains(p.Replicas, n.cfg.NodeID)
			}
		}
	})
	return placed || len(n.groups.all()) > 0
}
