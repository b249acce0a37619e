// Package metrics is a node's Prometheus metrics, served at /metrics on
// --http-addr: what the node's members, Raft groups, clients and peers are
// doing, latency histograms of the paths a message takes, the metrics
// hashicorp/raft and memberlist emit through go-metrics, and Go's runtime
// and process collectors. docs/operations.md lists them with what to
// alert on.
//
// Decision: each node has a registry of its own, and a member's counts
// are reported by its host alone. Reason: sum() over the nodes' scrapes is
// then the cluster's figure (a member replicated on three nodes is counted
// once), and nodes in one test process do not share a registry.
// Trade-off: while a member has no host (an election), its series are
// missing for a scrape or two.
//
// Decision: a member's counters (cairn_queue_sent_messages_total and the
// others) are the counts its state machine keeps (fsm.Counters), not
// counts of this process. Reason: a new host goes on from its
// predecessor's count, so the cluster's sum never falls back at a leader
// change and rate() stays right. Trade-off: a host's series of a member
// starts at the member's whole count, not at 0; Prometheus sees a new
// series (another instance label), as it does for any moved target.
//
// Decision: Raft's and memberlist's own metrics are bridged from
// go-metrics (armon/go-metrics's Prometheus sink, names cairn_raft_* and
// cairn_memberlist_*, timers in milliseconds as go-metrics keeps them),
// those of what happens now and then only: state changes, elections,
// snapshots, restores, gossip. Reason: Raft's metrics of each entry, RPC
// and heartbeat, in summaries for hundreds of groups, cost synchronous
// sends 10-15 % (docs/performance.md); the timings that matter of those
// (an entry's apply, a log write) this package measures as histograms in
// seconds. Trade-off: Raft's commit and replication timings are not
// served. go-metrics is one per process, and so is the
// bridge: every node of a process (several, in tests) serves it.
//
// Labels are destination and member names, Raft group names, and states:
// never message, connection or session ids, so the series grow with the
// destinations, not with traffic.
package metrics
