package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// Three nodes started at the same moment with --bootstrap-expect 3 form one
// cluster: one meta leader, every node a voter, every node registered.
func TestCluster_SimultaneousStartFormsOneCluster(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	st, err := tc.Admin("n1").ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, n := range st.Nodes {
		if n.State != "alive" {
			t.Errorf("node %s is %s", n.ID, n.State)
		}
		if n.MetaRole == "leader" {
			leaders++
		}
	}
	if len(st.Nodes) != 3 || leaders != 1 {
		t.Fatalf("status %+v: want 3 alive nodes and one meta leader", st.Nodes)
	}
}

// A queue created on three nodes gets one member per node, each hosted on a
// different node; sends and receives through any front-end reach every
// member, forwarded to its host.
func TestCluster_MembersSpreadAndFrontEndsForward(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	info, err := tc.Admin("n1").CreateQueue(ctx, "orders", client.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Members) != 3 || info.Replicas != 3 {
		t.Fatalf("queue %+v: want 3 members of 3 replicas", info)
	}
	// Leadership moves to each member's preferred host, one per node.
	wait.For(t, 10*time.Second, "one member hosted on each node", func() bool {
		hosts := map[string]bool{}
		for i := range 3 {
			hosts[tc.HostOf(fmt.Sprintf("orders#%d", i))] = true
		}
		return len(hosts) == 3 && !hosts[""]
	})
	// Through n1, send to each member directly.
	for i := range 3 {
		pm := mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), fmt.Sprintf("orders#%d", i))
		if _, err := pm.Send(ctx, &client.Message{Body: []byte(fmt.Sprint("direct ", i))}); err != nil {
			t.Fatalf("send to orders#%d through n1: %v", i, err)
		}
	}
	// Through n2, consume each member.
	for i := range 3 {
		s := mustSession(t, tc.Dial("n2"), client.ClientAck)
		k := mustConsumer(t, ctx, s, fmt.Sprintf("orders#%d", i))
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint("direct ", i); string(m.Body) != want {
			t.Fatalf("orders#%d gave %q, want %q", i, m.Body, want)
		}
		if err := m.Ack(); err != nil {
			t.Fatalf("ack through n2 of a message of orders#%d: %v", i, err)
		}
	}
	q, err := tc.Admin("n3").ShowQueue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if q.Pending != 0 || q.Delivered != 0 {
		t.Fatalf("after acks: %+v", q)
	}
	for _, m := range q.Members {
		if m.Host == "" {
			t.Errorf("member %s shows no host", m.Name)
		}
	}
}

// The host of a member crashes while a consumer on another front-end
// holds unacknowledged messages: a new host takes over, the consumer
// follows it without noticing, its acks of the held messages succeed (the
// delivery state is replicated), and sends and receives carry on.
func TestCluster_HostCrashed_ConsumerOnOtherFrontEndKeepsItsDeliveries(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "fo", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("fo", 1)[0]
	front := "n1"
	if host == front {
		front = "n2"
	}
	s := mustSession(t, tc.Dial(front), client.ClientAck)
	p := mustProducer(t, s, "fo")
	sendN(t, ctx, p, "before", 10)
	k := mustConsumer(t, ctx, s, "fo")
	var held []*client.Message
	for range 5 {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, m)
	}

	tc.Crash(host)
	newHost := tc.WaitHost("fo#0")
	if newHost == host {
		t.Fatalf("host %s stopped but still hosts", host)
	}
	// The held messages are still this session's: acking them works.
	if err := held[len(held)-1].Ack(); err != nil {
		t.Fatalf("ack after the host changed from %s to %s: %v", host, newHost, err)
	}
	sendN(t, ctx, p, "after", 5)
	got := map[string]bool{}
	for len(got) < 10 {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after failover (got %d): %v", len(got), err)
		}
		if m.Redelivered {
			t.Fatalf("message %s redelivered though its session never lost it", m.Body)
		}
		got[string(m.Body)] = true
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	tc.Start(host)
	q, err := tc.Admin(front).ShowQueue(ctx, "fo")
	if err != nil {
		t.Fatal(err)
	}
	if q.Pending != 0 || q.Delivered != 0 {
		t.Fatalf("after draining: %+v", q)
	}
}

// --join takes DNS names and keeps trying them: the first pod of a
// StatefulSet starts before its peers' names lead anywhere, and must find
// them when they come. Here only n1 lists the others, by name, and they
// start only after n1 has failed to reach them, so only n1's retries can
// bring the three together.
func TestCluster_JoinByNameKeepsTryingUntilTheOthersStart(t *testing.T) {
	t.Parallel()
	waiting := &logWatch{msg: "waiting for the other nodes to join", seen: make(chan struct{})}
	tc := PlanTestCluster(t, 3)
	for i := range tc.cfgs {
		tc.cfgs[i].Join = nil
	}
	for _, c := range tc.cfgs[1:] {
		_, port, _ := net.SplitHostPort(c.GossipAddr)
		tc.cfgs[0].Join = append(tc.cfgs[0].Join, net.JoinHostPort("localhost", port))
	}
	tc.cfgs[0].Logger = slog.New(waiting)
	n1 := tc.launch("n1")
	select {
	case <-waiting.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("n1 never reported waiting for the others")
	}
	if err := n1.Ready(); err == nil {
		t.Fatal("n1 is ready alone with --bootstrap-expect 3")
	}
	tc.StartAll()
	st := tc.Status("n3")
	if len(st.Nodes) != 3 {
		t.Fatalf("n3's status shows %d nodes: %+v", len(st.Nodes), st.Nodes)
	}
}

// logWatch is a slog handler that closes seen the first time msg is
// logged.
type logWatch struct {
	msg  string
	once sync.Once
	seen chan struct{}
}

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWatch) WithGroup(string) slog.Handler            { return w }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == w.msg {
		w.once.Do(func() { close(w.seen) })
	}
	return nil
}
