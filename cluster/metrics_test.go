package cluster

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"
)

// scrape reads node n's /metrics with Prometheus's own text parser.
func scrape(t *testing.T, n *Node) map[string]*dto.MetricFamily {
	t.Helper()
	get := http.Get
	if o := clientOptions(t, n); o.TLS != nil {
		get = (&http.Client{Transport: &http.Transport{TLSClientConfig: o.TLS}}).Get
	}
	resp, err := get(map[bool]string{false: "http://", true: "https://"}[n.cfg.TLSCA != ""] + n.Addrs().HTTP + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", n.ID(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", n.ID(), resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s's /metrics: %v", n.ID(), err)
	}
	return families
}

// sumOver sums metric name's series whose label has the value, over the
// scrapes of several nodes, and counts the series.
func sumOver(scrapes []map[string]*dto.MetricFamily, name, label, value string) (sum float64, series int) {
	for _, s := range scrapes {
		for _, m := range s[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
					series++
				}
			}
		}
	}
	return sum, series
}

func scrapeAll(t *testing.T, tc *TestCluster, ids ...string) []map[string]*dto.MetricFamily {
	t.Helper()
	var out []map[string]*dto.MetricFamily
	for _, id := range ids {
		out = append(out, scrape(t, tc.Node(id)))
	}
	return out
}

// usedByOperators checks that every metric the dashboard, the alerts and
// docs/operations.md name is one the nodes serve.
func usedByOperators(t *testing.T, scrapes []map[string]*dto.MetricFamily) {
	t.Helper()
	served := map[string]bool{}
	for _, s := range scrapes {
		for name := range s {
			served[name] = true
		}
	}
	// A name ending in _* stands for the families it starts.
	names := regexp.MustCompile(`\bcairn_[a-z_]*[a-z](_\*)?`)
	for _, file := range []string{"../deploy/grafana/cairn.json", "../deploy/prometheus-rules.yml", "../docs/operations.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names.FindAllString(string(b), -1) {
			if prefix, ok := strings.CutSuffix(name, "*"); ok {
				if !slices.ContainsFunc(slices.Collect(maps.Keys(served)), func(s string) bool { return strings.HasPrefix(s, prefix) }) {
					t.Errorf("%s names %s, and no node serves a metric of that name", file, name)
				}
				continue
			}
			family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !served[family] && !served[name] {
				t.Errorf("%s names %s, which no node serves", file, name)
			}
		}
	}
}

// Under traffic, the sum over the nodes of cairn_queue_pending_messages is
// what queue show says, each member reported once (by its host); the
// counters only grow across a leader change; the latency histograms, the
// Raft groups, the clients and Go's collectors are there.
func TestMetrics_SumOverNodesIsTheQueueAndCountersOnlyGrow(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	tc.CreateSpread(ctx, map[string]int{"metered": 3})
	a := tc.Admin("n1")
	s := mustSession(t, tc.Dial("n1"), client.ClientAck)
	for i := range uint32(3) {
		name := fsm.MemberName("metered", i)
		sendN(t, ctx, mustProducer(t, s, name), name+"/", 10)
	}
	k := mustConsumer(t, ctx, s, "metered#0")
	recvN(t, k, 4) // delivered, not acknowledged
	if _, err := a.CreateTopic(ctx, "news", client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	sub, err := s.Subscribe(ctx, "news", client.Subscription{Name: "audit", Durable: true, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := s.Publisher("news")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Send(ctx, &client.Message{Body: []byte("published")}); err != nil {
		t.Fatal(err)
	}
	recv(t, sub)

	var scrapes []map[string]*dto.MetricFamily
	wait.Until(t, 10*time.Second, "the nodes' pending and delivered summing to queue show's", func() string {
		q := showQueue(t, a, "metered")
		scrapes = scrapeAll(t, tc, tc.IDs()...)
		pending, series := sumOver(scrapes, "cairn_queue_pending_messages", "queue", "metered")
		delivered, _ := sumOver(scrapes, "cairn_queue_delivered_messages", "queue", "metered")
		if pending != float64(q.Pending) || delivered != float64(q.Delivered) || series != 3 {
			return fmt.Sprintf("metrics: %v pending, %v delivered in %d series; queue show: %d pending, %d delivered", pending, delivered, series, q.Pending, q.Delivered)
		}
		return ""
	})
	if sent, _ := sumOver(scrapes, "cairn_queue_sent_messages_total", "queue", "metered"); sent != 30 {
		t.Errorf("cairn_queue_sent_messages_total sums to %v, want 30", sent)
	}
	// queue show reports the same counters, its members' from their hosts.
	// (The consumer's prefetch took metered#0's ten: delivered, none
	// acknowledged.)
	if q := showQueue(t, a, "metered"); q.Counters.Sent != 30 || q.Counters.Delivered != q.Delivered || q.Delivered != 10 || q.Counters.Acknowledged != 0 {
		t.Errorf("queue show: %d delivered, counters %+v; want 30 sent, 10 delivered, none acknowledged", q.Delivered, q.Counters)
	}
	for _, name := range []string{"cairn_send_seconds", "cairn_delivery_seconds", "cairn_raft_apply_seconds", "cairn_raft_log_write_seconds"} {
		var count uint64
		for _, sc := range scrapes {
			for _, m := range sc[name].GetMetric() {
				count += m.GetHistogram().GetSampleCount()
			}
		}
		if count == 0 {
			t.Errorf("%s observed nothing", name)
		}
	}
	for _, name := range []string{"cairn_raft_group_state", "cairn_raft_group_applied_index", "cairn_client_connections", "cairn_gossip_members", "go_goroutines", "process_resident_memory_bytes"} {
		if scrapes[0][name] == nil {
			t.Errorf("n1's /metrics has no %s", name)
		}
	}
	if conns, _ := sumOver(scrapes, "cairn_gossip_members", "state", "alive"); conns != 9 {
		t.Errorf("cairn_gossip_members{state=alive} sums to %v over three nodes, want 9", conns)
	}
	if _, series := sumOver(scrapes, "cairn_subscription_pending_messages", "topic", "news"); series == 0 {
		t.Error("no cairn_subscription_pending_messages of topic news")
	}
	usedByOperators(t, scrapes)

	// Each member's host stops: its counts go on from another node.
	counters := []string{"cairn_queue_sent_messages_total", "cairn_queue_delivered_messages_total"}
	before := map[string]float64{}
	for _, name := range counters {
		before[name], _ = sumOver(scrapes, name, "queue", "metered")
	}
	host := tc.WaitHost("metered#1")
	tc.Stop(host)
	others := tc.Others(host)
	wait.Until(t, 20*time.Second, "metered's members hosted again and reported", func() string {
		scrapes = scrapeAll(t, tc, others...)
		if _, series := sumOver(scrapes, "cairn_queue_pending_messages", "queue", "metered"); series != 3 {
			return fmt.Sprintf("%d of 3 members reported", series)
		}
		return ""
	})
	for _, name := range counters {
		if after, _ := sumOver(scrapes, name, "queue", "metered"); after < before[name] {
			t.Errorf("%s fell from %v to %v when %s stopped", name, before[name], after, host)
		}
	}
}
