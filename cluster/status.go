package cluster

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// clusterStatus reports the nodes and every Raft group with each replica's
// progress, asking every live node for its replicas (in parallel, briefly).
func (n *Node) clusterStatus(ctx context.Context) *clientpb.ClusterStatusResponse {
	resp := &clientpb.ClusterStatusResponse{AnsweredBy: n.cfg.NodeID}
	states := map[string]gossipMember{}
	for _, m := range n.gossip.members() {
		states[m.ID] = m
	}
	seen := map[string]bool{}
	// emptied are nodes back with an empty data directory that the meta
	// leader has not registered again yet: they hold none of their replicas.
	emptied := map[string]bool{}
	var dests []*fsmpb.Destination
	n.meta.Read(func(m *fsm.Meta) {
		dests = m.Destinations()
		for _, nd := range m.Nodes() {
			if inc := states[nd.Id].Meta.Incarnation; inc != "" && nd.Incarnation != "" && inc != nd.Incarnation {
				emptied[nd.Id] = true
			}
			st := states[nd.Id].State
			if st == "" {
				st = "dead"
			}
			resp.Nodes = append(resp.Nodes, &clientpb.NodeStatus{Id: nd.Id, ClientAddr: nd.ClientAddr, PeerAddr: nd.PeerAddr,
				RaftAddr: nd.RaftAddr, GossipAddr: nd.GossipAddr, HttpAddr: nd.HttpAddr, State: st, MetaRole: n.meta.Role(nd.Id), Alive: st == "alive",
				Decommissioning: m.Decommissioning(nd.Id)})
			seen[nd.Id] = true
		}
	})
	for id, gm := range states {
		if !seen[id] {
			resp.Nodes = append(resp.Nodes, &clientpb.NodeStatus{Id: id, ClientAddr: gm.Meta.Client, PeerAddr: gm.Meta.Peer, RaftAddr: gm.Meta.Raft,
				GossipAddr: gm.Addr, HttpAddr: gm.Meta.HTTP, State: gm.State, MetaRole: n.meta.Role(id), Alive: gm.State == "alive"})
		}
	}
	slices.SortFunc(resp.Nodes, func(a, b *clientpb.NodeStatus) int { return strings.Compare(a.Id, b.Id) })

	reports := n.groupReports(ctx, resp.Nodes)
	// memberlist keeps its own suspicion to itself (no event, and Members
	// does not carry it), so a node is suspect here when gossip still holds
	// it alive but it did not answer the report: paused, overloaded, or
	// cut off from this node.
	for _, nd := range resp.Nodes {
		if _, answered := reports[nd.Id]; nd.State == "alive" && !answered {
			nd.State = "suspect"
		}
	}
	metaServers := []string{}
	if f := n.meta.Raft().GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			metaServers = append(metaServers, string(s.ID))
		}
	}
	resp.Groups = append(resp.Groups, groupStatus(metagroup.ID, metaServers, reports))
	n.memberGroupStatus(resp, dests, reports, emptied)
	return resp
}

// memberGroupStatus adds every member group to resp, with the counts of
// members short of live replicas and of members moving. A replica counts
// when its node is alive and it is not catching up after its node came
// back with an empty data directory (emptied, or rejoining once
// registered again).
func (n *Node) memberGroupStatus(resp *clientpb.ClusterStatusResponse, dests []*fsmpb.Destination, reports map[string]map[string]*peerpb.GroupReplica, emptied map[string]bool) {
	alive := map[string]bool{}
	for _, nd := range resp.Nodes {
		alive[nd.Id] = nd.Alive
	}
	n.meta.Read(func(m *fsm.Meta) {
		for _, d := range dests {
			for _, p := range d.Members {
				g := groupStatus(fsm.MemberName(d.Name, p.Index), p.Replicas, reports)
				g.Wanted = d.Replicas
				resp.Groups = append(resp.Groups, g)
				live := 0
				for _, id := range p.Replicas {
					if alive[id] && !emptied[id] && !m.Rejoining(id, fsm.GroupKey(d.Name, p)) {
						live++
					}
				}
				if live < fsm.Wanted(d, p) {
					resp.UnderReplicated++
				}
				catchingUp := slices.ContainsFunc(g.Replicas, func(r *clientpb.ReplicaStatus) bool { return r.CatchingUp })
				renewing := p.Renewing || fsm.NeedsRenewal(d, p)
				if renewing || catchingUp || g.Leader != "" && g.Leader != p.Replicas[0] && alive[p.Replicas[0]] {
					resp.Moving++
				}
			}
		}
	})
}

// groupReports collects every live node's report of its group replicas.
func (n *Node) groupReports(ctx context.Context, nodes []*clientpb.NodeStatus) map[string]map[string]*peerpb.GroupReplica {
	out := map[string]map[string]*peerpb.GroupReplica{}
	var mu sync.Mutex
	add := func(node string, gs []*peerpb.GroupReplica) {
		m := map[string]*peerpb.GroupReplica{}
		for _, g := range gs {
			m[g.Name] = g
		}
		mu.Lock()
		out[node] = m
		mu.Unlock()
	}
	add(n.cfg.NodeID, n.localGroups())
	var wg sync.WaitGroup
	for _, nd := range nodes {
		if nd.Id == n.cfg.NodeID || !nd.Alive {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := n.peers.client(nd.Id)
			if err != nil {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if r, err := c.Groups(cctx, &peerpb.GroupsRequest{}); err == nil {
				add(nd.Id, r.Groups)
			}
		}()
	}
	wg.Wait()
	return out
}

// groupStatus describes one Raft group from its replicas' reports: the
// leader, the leader's commit index, and each replica's progress.
func groupStatus(name string, replicas []string, reports map[string]map[string]*peerpb.GroupReplica) *clientpb.GroupStatus {
	gs := &clientpb.GroupStatus{Name: name}
	for _, id := range replicas {
		if r := reports[id][name]; r != nil && r.Leader != "" {
			gs.Leader = r.Leader
		}
	}
	var nonvoters []string
	if r := reports[gs.Leader][name]; r != nil {
		gs.CommitIndex, gs.AppliedIndex, nonvoters = r.CommitIndex, r.AppliedIndex, r.Nonvoters
	}
	for _, id := range replicas {
		rs := &clientpb.ReplicaStatus{Node: id, Role: "follower", CatchingUp: slices.Contains(nonvoters, id)}
		if id == gs.Leader {
			rs.Role = "leader"
		}
		if r := reports[id][name]; r != nil {
			rs.Reachable, rs.MatchIndex = true, r.LastIndex
			if gs.CommitIndex > r.AppliedIndex {
				rs.Lag = gs.CommitIndex - r.AppliedIndex
			}
		}
		gs.Replicas = append(gs.Replicas, rs)
	}
	return gs
}
