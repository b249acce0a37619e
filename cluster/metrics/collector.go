package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// memberMetric is one metric of each hosted member: a queue's
// (cairn_queue_NAME{queue,member}) and a subscription's
// (cairn_subscription_NAME{topic,subscription,member}).
type memberMetric struct {
	name, help string
	counter    bool
	value      func(Member) float64
}

const (
	byHost  = " Reported by the member's host alone: sum over the nodes for the cluster's figure."
	counted = " Counted by the member's state machine, so a new host goes on from its predecessor's count." + byHost
)

var memberMetrics = []memberMetric{
	{"pending_messages", "Messages waiting for a consumer." + byHost, false, func(m Member) float64 { return float64(m.Stats.Pending) }},
	{"delivered_messages", "Messages delivered and not yet acknowledged." + byHost, false, func(m Member) float64 { return float64(m.Stats.Delivered) }},
	{"delayed_messages", "Messages given back, waiting out a redelivery delay." + byHost, false, func(m Member) float64 { return float64(m.Stats.Delayed) }},
	{"moving_messages", "Messages on their way to another member or to the dead-letter queue." + byHost, false, func(m Member) float64 { return float64(m.Stats.Moving) }},
	{"prepared_messages", "Sends and acknowledgements held by prepared transactions until their decision." + byHost, false, func(m Member) float64 { return float64(m.Stats.Prepared) }},
	{"bytes", "What the messages held cost in memory, as --max-size counts it." + byHost, false, func(m Member) float64 { return float64(m.Stats.Bytes) }},
	{"consumers", "Consumers attached." + byHost, false, func(m Member) float64 { return float64(m.Consumers) }},
	{"sent_messages_total", "Messages stored: sent, published, or moved in from another member." + counted, true, func(m Member) float64 { return float64(m.Counters.Sent) }},
	{"delivered_messages_total", "Deliveries, redeliveries included." + counted, true, func(m Member) float64 { return float64(m.Counters.Delivered) }},
	{"redelivered_messages_total", "Deliveries of a message marked redelivered." + counted, true, func(m Member) float64 { return float64(m.Counters.Redelivered) }},
	{"acknowledged_messages_total", "Deliveries acknowledged, by a session or a committed transaction." + counted, true, func(m Member) float64 { return float64(m.Counters.Acknowledged) }},
	{"expired_messages_total", "Messages removed at the end of their time to live." + counted, true, func(m Member) float64 { return float64(m.Counters.Expired) }},
	{"dead_lettered_messages_total", "Messages moved to the dead-letter queue." + counted, true, func(m Member) float64 { return float64(m.Stats.DeadLettered) }},
	{"moved_messages_total", "Messages moved to another member (one with consumers, a resize, a renewal)." + counted, true, func(m Member) float64 { return float64(m.Counters.Moved) }},
}

// collector reads a Source at each scrape.
type collector struct {
	src Source
	// queue and subscription are memberMetrics' descriptions, in order.
	queue, subscription                     []*prometheus.Desc
	groupState, term, commit, applied, last *prometheus.Desc
	snapshots, restores                     *prometheus.Desc
	connections, sessions, consumers        *prometheus.Desc
	peerStreams, gossip                     *prometheus.Desc
	diskFree, diskMinFree                   *prometheus.Desc
	loginFailures, loginThrottled           *prometheus.Desc
	rebuilding, rebuilds                    *prometheus.Desc
}

func newCollector(src Source) *collector {
	c := &collector{src: src}
	for _, m := range memberMetrics {
		c.queue = append(c.queue, prometheus.NewDesc("cairn_queue_"+m.name, m.help, []string{"queue", "member"}, nil))
		c.subscription = append(c.subscription, prometheus.NewDesc("cairn_subscription_"+m.name, m.help, []string{"topic", "subscription", "member"}, nil))
	}
	const ofReplica = " Of this node's replica of the group (a member's, or meta)."
	group := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("cairn_raft_group_"+name, help+ofReplica, append([]string{"group"}, labels...), nil)
	}
	c.groupState = group("state", "1 for the Raft state the replica is in (follower, candidate, leader, shutdown), 0 for the others.", "state")
	c.term = group("term", "The replica's current Raft term; it grows by one with each election, so increase() counts them.")
	c.snapshots = group("snapshots_total", "Snapshots of the group's state taken by this replica since it opened.")
	c.restores = group("restores_total", "Restores of this replica's state from a snapshot (at its start, or sent by the leader) since it opened.")
	c.commit = group("commit_index", "The highest log index the replica knows committed.")
	c.applied = group("applied_index", "The highest log index applied to the replica's state machine; a replica's lag is the group's highest commit index less this.")
	c.last = group("last_index", "The highest index in the replica's log.")
	c.connections = prometheus.NewDesc("cairn_client_connections", "Client connections this node serves.", nil, nil)
	c.sessions = prometheus.NewDesc("cairn_client_sessions", "Sessions of the client connections this node serves.", nil, nil)
	c.consumers = prometheus.NewDesc("cairn_client_consumers", "Consumers of the client connections this node serves.", nil, nil)
	c.peerStreams = prometheus.NewDesc("cairn_peer_streams", "Streams other nodes hold open on this node's peer API (relayed sends and consumers of members hosted here).", nil, nil)
	c.gossip = prometheus.NewDesc("cairn_gossip_members", "Members of the gossip pool as this node sees them, by state.", []string{"state"}, nil)
	c.diskFree = prometheus.NewDesc("cairn_data_disk_free_bytes", "Space left to the node on its data directory's disk.", nil, nil)
	c.diskMinFree = prometheus.NewDesc("cairn_data_disk_min_free_bytes", "The free space under which /readyz says not ready (--min-free-disk-mib; -1: never).", nil, nil)
	c.loginFailures = prometheus.NewDesc("cairn_login_failures_total", "Password logins this node refused: a wrong user or password, or a malformed header.", nil, nil)
	c.loginThrottled = prometheus.NewDesc("cairn_login_throttled_total", "Logins this node refused unchecked because their source was waiting out its failed logins.", nil, nil)
	c.rebuilding = prometheus.NewDesc("cairn_replicas_rebuilding", "Member replicas on this node stopped and being rebuilt from their groups' other replicas.", nil, nil)
	c.rebuilds = prometheus.NewDesc("cairn_replica_rebuilds_total", "Member replicas this node stopped to rebuild: an entry they could not apply (entry), or data on disk they could not read (log).", []string{"reason"}, nil)
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(append([]*prometheus.Desc{}, c.queue...), c.subscription...) {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.groupState, c.term, c.commit, c.applied, c.last, c.snapshots, c.restores, c.connections, c.sessions, c.consumers, c.peerStreams, c.gossip, c.diskFree, c.diskMinFree, c.loginFailures, c.loginThrottled, c.rebuilding, c.rebuilds} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, mb := range c.src.Members() {
		descs, labels := c.queue, []string{mb.Destination, mb.Name}
		if mb.Topic != "" {
			descs, labels = c.subscription, []string{mb.Topic, mb.Destination, mb.Name}
		}
		for i, m := range memberMetrics {
			kind := prometheus.GaugeValue
			if m.counter {
				kind = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(descs[i], kind, m.value(mb), labels...)
		}
	}
	for _, g := range c.src.Groups() {
		for _, s := range raftStates {
			v := 0.0
			if s == g.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.groupState, prometheus.GaugeValue, v, g.Name, s)
		}
		for d, v := range map[*prometheus.Desc]uint64{c.term: g.Term, c.commit: g.CommitIndex, c.applied: g.AppliedIndex, c.last: g.LastIndex} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), g.Name)
		}
		ch <- prometheus.MustNewConstMetric(c.snapshots, prometheus.CounterValue, float64(g.Snapshots), g.Name)
		ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(g.Restores), g.Name)
	}
	n := c.src.Node()
	for d, v := range map[*prometheus.Desc]int{c.connections: n.Connections, c.sessions: n.Sessions, c.consumers: n.Consumers, c.peerStreams: n.PeerStreams} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	ch <- prometheus.MustNewConstMetric(c.diskFree, prometheus.GaugeValue, float64(n.DiskFree))
	ch <- prometheus.MustNewConstMetric(c.diskMinFree, prometheus.GaugeValue, float64(n.DiskMinFree))
	ch <- prometheus.MustNewConstMetric(c.loginFailures, prometheus.CounterValue, float64(n.LoginFailures))
	ch <- prometheus.MustNewConstMetric(c.loginThrottled, prometheus.CounterValue, float64(n.LoginThrottled))
	ch <- prometheus.MustNewConstMetric(c.rebuilding, prometheus.GaugeValue, float64(n.ReplicasRebuilding))
	for reason, v := range n.ReplicaRebuilds {
		ch <- prometheus.MustNewConstMetric(c.rebuilds, prometheus.CounterValue, float64(v), reason)
	}
	for state, v := range n.Gossip {
		ch <- prometheus.MustNewConstMetric(c.gossip, prometheus.GaugeValue, float64(v), state)
	}
}
