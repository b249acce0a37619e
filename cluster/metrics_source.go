package cluster

import (
	"strings"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/cluster/metrics"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// metricsSource is what a node reports at /metrics (package metrics).
type metricsSource struct{ n *Node }

// Members are the queue and subscription members this node hosts; a
// topic's own members hold nothing (its subscriptions' do).
func (s metricsSource) Members() []metrics.Member {
	var out []metrics.Member
	for _, r := range s.n.groups.all() {
		if !r.Leading() {
			continue
		}
		dest, _, err := fsm.ParseAddress(r.Name())
		if err != nil {
			continue
		}
		d, ok := s.n.meta.Destination(dest)
		if !ok || d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC {
			continue
		}
		m := metrics.Member{Name: r.Name(), Destination: dest, Consumers: r.Consumers()}
		if d.Subscription != nil {
			m.Topic = d.Subscription.Topic
		}
		r.Read(func(fm *fsm.Member) { m.Stats, m.Counters = fm.Stats(), fm.Counters() })
		out = append(out, m)
	}
	return out
}

// Groups are this node's replicas of the meta group and of members.
func (s metricsSource) Groups() []metrics.Group {
	report := func(name string, r *raft.Raft) metrics.Group {
		return metrics.Group{Name: name, State: strings.ToLower(r.State().String()), Term: r.CurrentTerm(),
			CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(), LastIndex: r.LastIndex()}
	}
	out := []metrics.Group{report(metagroup.ID, s.n.meta.Raft())}
	for _, r := range s.n.groups.all() {
		g := report(r.Name(), r.Raft())
		g.Snapshots, g.Restores = r.Snapshots()
		out = append(out, g)
	}
	return out
}

// Node counts this node's client connections, their sessions and
// consumers, the peer streams it serves, and the gossip pool by state.
func (s metricsSource) Node() metrics.Node {
	nd := metrics.Node{PeerStreams: int(s.n.peerStreams.Load()), Gossip: map[string]int{}, DiskMinFree: -1}
	if mib := s.n.cfg.MinFreeDiskMiB; mib >= 0 {
		nd.DiskMinFree = mib << 20
	}
	nd.DiskFree, _ = s.n.diskFree()
	if s.n.auth != nil {
		nd.LoginFailures, nd.LoginThrottled = s.n.auth.Logins()
	}
	if s.n.groups != nil {
		nd.ReplicasRebuilding, nd.ReplicaRebuilds = s.n.groups.rebuildState()
	}
	for _, c := range s.n.conns.List() {
		nd.Connections++
		nd.Sessions += int(c.Sessions)
		nd.Consumers += int(c.Consumers)
	}
	for _, m := range s.n.gossip.members() {
		nd.Gossip[m.State]++
	}
	return nd
}
