package metrics

import (
	"net/http"
	"sync"
	"time"

	gometrics "github.com/armon/go-metrics"
	gmprom "github.com/armon/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairnmq/cairn/fsm"
)

// Source is what a node reports when it is scraped.
type Source interface {
	// Members are the members this node hosts, with their counts.
	Members() []Member
	// Groups are the Raft groups this node holds a replica of.
	Groups() []Group
	// Clients and the rest of the node's own counts.
	Node() Node
}

// Member is one member a node hosts: of a queue (Topic empty) or of a
// topic's subscription (Destination then names the subscription).
type Member struct {
	// Name is the member's address (orders#0); Destination its queue, or
	// for a subscription its name within Topic.
	Name, Destination, Topic string
	Stats                    fsm.Stats
	Counters                 fsm.Counters
	Consumers                int
}

// Group is this node's replica of one Raft group: a member's ("orders#0")
// or the meta group's ("meta").
type Group struct {
	Name                                       string
	State                                      string
	Term, CommitIndex, AppliedIndex, LastIndex uint64
	// Snapshots and Restores count the replica's snapshots taken and its
	// restores from one since it opened (members' groups only).
	Snapshots, Restores uint64
}

// Node counts a node's clients, peers and gossip view.
type Node struct {
	Connections, Sessions, Consumers, PeerStreams int
	// Gossip counts the gossip pool's members by state (alive, dead,
	// left).
	Gossip map[string]int
	// DiskFree is the space left on the data directory's disk, and
	// DiskMinFree where /readyz says not ready (-1: never).
	DiskFree, DiskMinFree int64
	// LoginFailures counts the password logins refused, LoginThrottled
	// those refused unchecked while their source waited (0 without TLS).
	LoginFailures, LoginThrottled uint64
	// ReplicasRebuilding counts the member replicas being rebuilt now,
	// ReplicaRebuilds those rebuilt since the start, by reason (entry: one
	// it could not apply; log: a log it could not read).
	ReplicasRebuilding int
	ReplicaRebuilds    map[string]uint64
}

// Raft states a Group may be in; cairn_raft_group_state has one series
// per state, 1 for the group's.
var raftStates = []string{"follower", "candidate", "leader", "shutdown"}

// Metrics is a node's registry and the histograms its paths observe.
type Metrics struct {
	reg                             *prometheus.Registry
	send, delivery, apply, logWrite prometheus.Histogram
}

// latencyBuckets span 100 µs to 10 s.
var latencyBuckets = prometheus.ExponentialBucketsRange(0.0001, 10, 16)

// New makes a node's metrics, reading src at each scrape, and bridges
// go-metrics (Raft's and memberlist's) into them.
func New(src Source) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	}
	m := &Metrics{
		reg: reg,
		send: hist("cairn_send_seconds",
			"Sends (and publishes) on the members this node hosts, from their arrival at the host to their commit."),
		delivery: hist("cairn_delivery_seconds",
			"Deliveries by the members this node hosts, from the host's Deliver command to the push of its messages to the consumer's connection."),
		apply: hist("cairn_raft_apply_seconds",
			"Raft entries of member groups applied to their state machine on this node, one entry each."),
		logWrite: hist("cairn_raft_log_write_seconds",
			"Writes of Raft entries to a member group's log on this node, its fsync included."),
	}
	for _, c := range []prometheus.Collector{
		m.send, m.delivery, m.apply, m.logWrite, newCollector(src),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	if err := bridge.start(); err != nil {
		return nil, err
	}
	return m, nil
}

// bridge is go-metrics's Prometheus sink, one per process as go-metrics
// is: every node of the process serves it beside its own registry.
var bridge goMetricsBridge

type goMetricsBridge struct {
	once sync.Once
	reg  *prometheus.Registry
	err  error
}

func (b *goMetricsBridge) start() error {
	b.once.Do(func() {
		b.reg = prometheus.NewRegistry()
		sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: b.reg, Expiration: time.Minute})
		if err != nil {
			b.err = err
			return
		}
		cfg := gometrics.DefaultConfig("cairn")
		cfg.EnableHostname, cfg.EnableRuntimeMetrics, cfg.EnableServiceLabel = false, false, false
		// Only what happens now and then: Raft's metrics of each entry,
		// RPC and heartbeat, taken into Prometheus summaries for hundreds
		// of groups, cost 10-15 % of synchronous sends (docs/performance.md),
		// and this package measures an entry's apply and log write itself.
		// The filter sees keys with the service name.
		cfg.FilterDefault = false
		cfg.AllowedPrefixes = bridged
		_, b.err = gometrics.NewGlobal(cfg, sink)
	})
	return b.err
}

// bridged are the go-metrics that reach /metrics: Raft's state changes,
// elections, snapshots and restores, and memberlist's gossip.
var bridged = []string{"cairn.raft.state.", "cairn.raft.transition.", "cairn.raft.snapshot.", "cairn.raft.fsm.snapshot",
	"cairn.raft.fsm.restore", "cairn.raft.restoreUserSnapshot", "cairn.memberlist."}

// Handler serves the registry and the go-metrics bridge in Prometheus's
// text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(prometheus.Gatherers{m.reg, bridge.reg}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Sent observes a send from its arrival at the host to its commit.
func (m *Metrics) Sent(d time.Duration) { m.send.Observe(d.Seconds()) }

// Pushed observes a delivery from its Deliver command to its push.
func (m *Metrics) Pushed(d time.Duration) { m.delivery.Observe(d.Seconds()) }

// Applied observes one Raft entry's apply.
func (m *Metrics) Applied(d time.Duration) { m.apply.Observe(d.Seconds()) }

// LogWritten observes a write of Raft entries, fsync included.
func (m *Metrics) LogWritten(d time.Duration) { m.logWrite.Observe(d.Seconds()) }
