package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Helpers of the end-to-end tests (e2e_*_test.go): one real node per test,
// driven through the real client library over real gRPC.

// testClock is a node clock that a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Options for TestConfig.
func withClock(c *testClock) func(*Config) { return func(cfg *Config) { cfg.Clock = c.Now } }
func withMaxMessageBytes(n int) func(*Config) {
	return func(cfg *Config) { cfg.MaxMessageBytes = n }
}
func withNoAutoCreate() func(*Config) { return func(cfg *Config) { cfg.AutoCreate = false } }
func withSnapshotThreshold(n uint64) func(*Config) {
	return func(cfg *Config) { cfg.SnapshotThreshold = n }
}

// Options for dial.
func withClientID(id string) func(*client.Options) {
	return func(o *client.Options) { o.ClientID = id }
}

func mustSession(t *testing.T, c *client.Connection, mode client.AckMode) *client.Session {
	t.Helper()
	s, err := c.Session(mode)
	if err != nil {
		t.Fatalf("open session: %v", err)
	}
	return s
}

func mustProducer(t *testing.T, s *client.Session, dest string) *client.Producer {
	t.Helper()
	p, err := s.Producer(dest)
	if err != nil {
		t.Fatalf("producer of %s: %v", dest, err)
	}
	return p
}

func mustConsumer(t *testing.T, ctx context.Context, s *client.Session, dest string, opts ...client.ConsumerOption) *client.Consumer {
	t.Helper()
	k, err := s.Consumer(ctx, dest, opts...)
	if err != nil {
		t.Fatalf("consumer of %s: %v", dest, err)
	}
	return k
}

// send sends one message with the given body.
func send(t *testing.T, ctx context.Context, p *client.Producer, body string) client.Receipt {
	t.Helper()
	r, err := p.Send(ctx, &client.Message{Body: []byte(body)})
	if err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
	return r
}

// sendN sends prefix0 .. prefix(n-1) and returns the bodies in send order.
func sendN(t *testing.T, ctx context.Context, p *client.Producer, prefix string, n int) []string {
	t.Helper()
	bodies := make([]string, n)
	for i := range n {
		bodies[i] = fmt.Sprint(prefix, i)
		send(t, ctx, p, bodies[i])
	}
	return bodies
}

// recv waits (up to 10 s) for the next message.
func recv(t *testing.T, k *client.Consumer) *client.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := k.Receive(ctx)
	if err != nil {
		t.Fatalf("receive from %s: %v", k.Destination(), err)
	}
	return m
}

// recvN receives n messages.
func recvN(t *testing.T, k *client.Consumer, n int) []*client.Message {
	t.Helper()
	out := make([]*client.Message, n)
	for i := range n {
		out[i] = recv(t, k)
	}
	return out
}

// expectNothing checks that no message arrives within d.
func expectNothing(t *testing.T, k *client.Consumer, d time.Duration) {
	t.Helper()
	m, err := k.ReceiveTimeout(d)
	if err != nil {
		t.Fatalf("receive timeout: %v", err)
	}
	if m != nil {
		t.Fatalf("got message %q (id %s, redelivered %v, count %d); want none", m.Body, m.ID, m.Redelivered, m.DeliveryCount)
	}
}

func bodiesOf(ms []*client.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	return out
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	return c
}

func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("%s: got %v, want %v", what, sorted(got), sorted(want))
	}
}

func showQueue(t *testing.T, a *client.Admin, name string) client.QueueInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := a.ShowQueue(ctx, name)
	if err != nil {
		t.Fatalf("show queue %s: %v", name, err)
	}
	return q
}

// checkQueue checks a queue's counts now: for steps after which the API
// promises the server state is settled (a send, an ack, a Close returned).
func checkQueue(t *testing.T, a *client.Admin, name string, pending, delivered uint64) client.QueueInfo {
	t.Helper()
	q := showQueue(t, a, name)
	if q.Pending != pending || q.Delivered != delivered {
		t.Fatalf("queue %s: pending %d delivered %d; want pending %d delivered %d", name, q.Pending, q.Delivered, pending, delivered)
	}
	return q
}

// waitQueue waits until a queue's counts are the given ones.
func waitQueue(t *testing.T, a *client.Admin, name string, pending, delivered uint64) {
	t.Helper()
	var last client.QueueInfo
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, err := a.ShowQueue(ctx, name)
		if err == nil && q.Pending == pending && q.Delivered == delivered {
			return
		}
		last = q
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: pending %d delivered %d (err %v); want pending %d delivered %d", name, last.Pending, last.Delivered, err, pending, delivered)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func queueNames(t *testing.T, a *client.Admin) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qs, err := a.ListQueues(ctx)
	if err != nil {
		t.Fatalf("list queues: %v", err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	sort.Strings(names)
	return names
}

// wantErr checks that err matches target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v; want one matching %v", what, err, target)
	}
}

// assertServes proves the node still serves: a fresh connection creates
// (or reuses) the queue, sends to it and receives and acknowledges it.
func assertServes(t *testing.T, n *Node, queue string) {
	t.Helper()
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, queue, client.QueueOptions{}); err != nil && !errors.Is(err, client.ErrDestinationExists) {
		t.Fatalf("create %s: %v", queue, err)
	}
	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	body := "alive-" + client.NewMessageID()
	send(t, ctx, mustProducer(t, s, queue), body)
	k := mustConsumer(t, ctx, s, queue)
	for {
		m := recv(t, k)
		if string(m.Body) != body {
			continue
		}
		if err := m.Ack(); err != nil {
			t.Fatalf("ack on %s: %v", queue, err)
		}
		break
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// rawClient is the generated gRPC client on the node's client port, for
// requests the client library would never send.
func rawClient(t *testing.T, n *Node, opts ...grpc.DialOption) clientpb.ClientServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(n.Addrs().Client, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return clientpb.NewClientServiceClient(cc)
}
