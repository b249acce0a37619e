package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/test/wait"
)

// drain receives from k until it has want messages or d passes, failing on
// a message received twice; it returns the bodies.
func drain(t *testing.T, k *client.Consumer, want int, d time.Duration) map[string]*client.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	got := map[string]*client.Message{}
	for len(got) < want {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatalf("%d of %d messages received on %s: %v", len(got), want, k.Member(), err)
		}
		if got[string(m.Body)] != nil {
			t.Fatalf("%q received twice", m.Body)
		}
		got[string(m.Body)] = m
	}
	return got
}

// A message published from any node reaches every subscription of the
// topic once: a durable one, a shared one split between two consumers on
// other nodes, a non-durable one, and one whose selector takes half. Each
// consumer is pinned to one member and gets what was published to the
// others too. The rules of kinds and of unshared durable subscriptions
// hold, and a non-durable subscription goes with its consumer.
func TestCluster_TopicFansOutToEverySubscription(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	a := tc.Admin("n1")
	if _, err := a.CreateTopic(ctx, "news", client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	c1 := tc.Dial("n1", withClientID("c1"))
	audit, err := mustSession(t, c1, client.AutoAck).Subscribe(ctx, "news", client.Subscription{Name: "audit", Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	var workers []*client.Consumer
	for _, id := range []string{"n2", "n3"} {
		w, err := mustSession(t, tc.Dial(id), client.AutoAck).Subscribe(ctx, "news", client.Subscription{Name: "workers", Durable: true, Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	passing, err := mustSession(t, tc.Dial("n3"), client.AutoAck).Subscribe(ctx, "news", client.Subscription{})
	if err != nil {
		t.Fatal(err)
	}
	big, err := mustSession(t, tc.Dial("n2", withClientID("c2")), client.AutoAck).Subscribe(ctx, "news",
		client.Subscription{Name: "big", Durable: true}, client.WithSelector("n >= 5"))
	if err != nil {
		t.Fatal(err)
	}

	for _, id := range tc.IDs() {
		p, err := mustSession(t, tc.Dial(id), client.AutoAck).Publisher("news")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if _, err := p.Send(ctx, &client.Message{Body: []byte(fmt.Sprintf("%s-%d", id, i)), Properties: map[string]any{"n": i}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const timeout = 20 * time.Second
	got := drain(t, audit, 30, timeout)
	for b, m := range got {
		if m.Redelivered || m.Destination != "news" {
			t.Fatalf("audit got %s redelivered %v from %q", b, m.Redelivered, m.Destination)
		}
	}
	drain(t, passing, 30, timeout)
	if n := len(drain(t, big, 15, timeout)); n != 15 {
		t.Fatalf("the selecting subscription got %d", n)
	}
	expectNothing(t, big, 300*time.Millisecond)
	split := map[string]bool{}
	wait.For(t, timeout, "the shared subscription's two consumers to share 30 messages", func() bool {
		for _, w := range workers {
			for {
				m, err := w.ReceiveNoWait()
				if err != nil || m == nil {
					break
				}
				if split[string(m.Body)] {
					t.Fatalf("%q reached both workers", m.Body)
				}
				split[string(m.Body)] = true
			}
		}
		return len(split) == 30
	})

	info, err := a.ShowTopic(ctx, "news")
	if err != nil || len(info.Subscriptions) != 4 || len(info.Members) != 3 {
		t.Fatalf("topic show: %+v, %v; want 3 members and 4 subscriptions", info, err)
	}

	// A client id is the cluster's: another connection with c1 is refused,
	// whichever node it connects to. An unshared durable subscription has
	// one consumer at a time; it is not deleted while one uses it.
	c, err := client.Dial(ctx, []string{tc.Node("n3").Addrs().Client}, client.Options{ClientID: "c1"})
	if err == nil {
		c.Close()
	}
	wantErr(t, "a second connection with client id c1, on another node", err, client.ErrClientIDInUse)
	_, err = mustSession(t, c1, client.AutoAck).Subscribe(ctx, "news", client.Subscription{Name: "audit", Durable: true})
	wantErr(t, "a second consumer of an unshared durable subscription", err, client.ErrSubscriptionInUse)
	wantErr(t, "deleting a subscription in use", a.DeleteSubscription(ctx, "news", "audit", "c1"), client.ErrSubscriptionInUse)
	if err := audit.Close(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, timeout, "the unused subscription deleted", func() bool { return a.DeleteSubscription(ctx, "news", "audit", "c1") == nil })

	// Kinds: a send to a topic, a publish to a queue, a subscription to a
	// queue and a plain consumer of a topic are refused.
	s := mustSession(t, tc.Dial("n1"), client.AutoAck)
	_, err = mustProducer(t, s, "news").Send(ctx, &client.Message{Body: []byte("x")})
	wantErr(t, "a send to a topic", err, client.ErrDestinationKind)
	if _, err := a.CreateQueue(ctx, "jobs", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	pq, _ := s.Publisher("jobs")
	_, err = pq.Send(ctx, &client.Message{Body: []byte("x")})
	wantErr(t, "a publish to a queue", err, client.ErrDestinationKind)
	_, err = s.Subscribe(ctx, "jobs", client.Subscription{})
	wantErr(t, "a subscription to a queue", err, client.ErrDestinationKind)
	_, err = s.Consumer(ctx, "news")
	wantErr(t, "a queue's consumer of a topic", err, client.ErrDestinationKind)
	_, err = s.Subscribe(ctx, "news", client.Subscription{Name: "x", Durable: true})
	wantErr(t, "an unshared durable subscription without a client id", err, client.ErrInvalidArgument)

	// The non-durable subscription goes with its consumer.
	if err := passing.Close(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, timeout, "the non-durable subscription deleted", func() bool {
		info, err := a.ShowTopic(ctx, "news")
		return err == nil && len(info.Subscriptions) == 2
	})
}

// publishN publishes n messages prefix0.. to topic from node id.
func publishN(t *testing.T, tc *TestCluster, id, topic, prefix string, n int) []string {
	t.Helper()
	p, err := mustSession(t, tc.Dial(id), client.AutoAck).Publisher(topic)
	if err != nil {
		t.Fatal(err)
	}
	return sendN(t, testCtx(t), p, prefix, n)
}

// A durable subscriber whose front-end dies carries on after the refresh
// where it was: what it acknowledged never comes again, what it held comes
// again marked redelivered, and the first acknowledge says ErrLostServer,
// as for a queue's consumer.
func TestRefresh_DurableSubscriberGoesOn(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateTopic(ctx, "rt", client.TopicOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("rt", 1)[0]
	rest := tc.Others(host)
	front, other := rest[0], rest[1]
	conn := dialVia(t, []string{tc.Node(front).Addrs().Client}, client.Options{ReconnectPolicy: client.ReconnectAll, ClientID: "d1"})
	s := mustSession(t, conn, client.ClientAck)
	k, err := s.Subscribe(ctx, "rt", client.Subscription{Name: "audit", Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	sent := publishN(t, tc, other, "rt", "rt-", 10)
	before := recvN(t, k, 2)
	if err := before[1].Ack(); err != nil {
		t.Fatal(err)
	}
	before = append(before, recvN(t, k, 3)...)
	acked, held := bodiesOf(before[:2]), bodiesOf(before[2:])

	tc.Crash(front)
	wait.For(t, 15*time.Second, "the connection to reconnect", func() bool { return conn.Reconnects() == 1 })
	got := map[string]*client.Message{}
	rctx := stepCtx(t, 20*time.Second)
	for first := true; len(got) < len(sent)-len(acked); first = false {
		m, err := k.Receive(rctx)
		if err != nil {
			t.Fatalf("after the refresh, %d of %d messages received (%v): %v", len(got), len(sent)-len(acked), keys(got), err)
		}
		b := string(m.Body)
		if slices.Contains(acked, b) || got[b] != nil {
			t.Fatalf("%q came again after the refresh (acknowledged before: %v)", b, slices.Contains(acked, b))
		}
		got[b] = m
		if err := m.Ack(); first && !errors.Is(err, client.ErrLostServer) {
			t.Fatalf("first acknowledge after the refresh: %v; want ErrLostServer", err)
		}
	}
	for _, b := range held {
		if m := got[b]; m == nil || !m.Redelivered || m.DeliveryCount < 2 {
			t.Errorf("%q, held unacknowledged across the refresh: %+v; want it again, redelivered", b, m)
		}
	}
}

// A non-durable subscriber whose front-end dies is subscribed anew after
// the refresh: it may miss what was published in between, and it never
// gets a message it had before, marked or not (WebLogic's distributed
// topics may deliver such a copy unmarked).
func TestRefresh_NonDurableSubscriberGetsNoCopy(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateTopic(ctx, "nd", client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	conn := dialVia(t, []string{tc.Node("n1").Addrs().Client}, client.Options{ReconnectPolicy: client.ReconnectAll})
	k, err := mustSession(t, conn, client.ClientAck).Subscribe(ctx, "nd", client.Subscription{})
	if err != nil {
		t.Fatal(err)
	}
	before := publishN(t, tc, "n2", "nd", "before-", 10)
	had := drain(t, k, 10, 20*time.Second) // held, none acknowledged
	sameSet(t, "before the refresh", keys(had), before)

	tc.Crash("n1")
	wait.For(t, 15*time.Second, "the connection to reconnect", func() bool { return conn.Reconnects() == 1 })
	// Published until the new subscription has one: the first after it
	// comes; none of the earlier ones may.
	after := map[string]bool{}
	p, err := mustSession(t, tc.Dial("n3"), client.AutoAck).Publisher("nd")
	if err != nil {
		t.Fatal(err)
	}
	rctx := stepCtx(t, 20*time.Second)
	for i := 0; ; i++ {
		b := fmt.Sprint("after-", i)
		after[b] = true
		send(t, ctx, p, b)
		m, err := k.ReceiveTimeout(200 * time.Millisecond)
		if err != nil {
			t.Fatalf("receiving after the refresh: %v", err)
		}
		if rctx.Err() != nil {
			t.Fatal("nothing received after the refresh")
		}
		if m == nil {
			continue
		}
		if !after[string(m.Body)] || m.Redelivered {
			t.Fatalf("after the refresh the subscriber got %q (redelivered %v): a message it had before, or not one published after", m.Body, m.Redelivered)
		}
		break
	}
	expectNothingBut(t, k, after, time.Second)
}

// expectNothingBut receives for d and fails on a message not in allowed.
func expectNothingBut(t *testing.T, k *client.Consumer, allowed map[string]bool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		m, err := k.ReceiveTimeout(time.Until(deadline))
		if err != nil || m == nil {
			return
		}
		if !allowed[string(m.Body)] || m.Redelivered {
			t.Fatalf("got %q (redelivered %v)", m.Body, m.Redelivered)
		}
	}
}

// Request/reply as JMS does it: a requester makes a temporary queue and
// sends requests carrying it as ReplyTo with a correlation id; a responder
// on another node answers there. Only the requester's connection consumes
// from it; it goes when that connection closes, and when its node dies.
func TestCluster_TemporaryQueuesForRequestReply(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	requester := mustSession(t, tc.Dial("n1"), client.AutoAck)
	replies, err := requester.CreateTemporaryQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mustProducer(t, requester, "requests").Send(ctx, &client.Message{Body: []byte("ping"), ReplyTo: replies, CorrelationID: "c-1"}); err != nil {
		t.Fatal(err)
	}
	responder := mustSession(t, tc.Dial("n2"), client.AutoAck)
	req := recv(t, mustConsumer(t, ctx, responder, "requests"))
	if req.ReplyTo != replies || req.CorrelationID != "c-1" {
		t.Fatalf("request carries ReplyTo %q, correlation id %q", req.ReplyTo, req.CorrelationID)
	}
	if _, err := mustProducer(t, responder, req.ReplyTo).Send(ctx, &client.Message{Body: []byte("pong"), CorrelationID: req.CorrelationID}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, mustConsumer(t, ctx, requester, replies)); string(m.Body) != "pong" || m.CorrelationID != "c-1" {
		t.Fatalf("reply %q with correlation id %q", m.Body, m.CorrelationID)
	}
	_, err = responder.Consumer(ctx, replies)
	wantErr(t, "another connection's consumer of a temporary queue", err, client.ErrInvalidArgument)

	a := tc.Admin("n3")
	gone := func(name string) func() bool {
		return func() bool {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // beyond the test's ctx
			defer cancel()
			_, err := a.ShowQueue(sctx, name)
			return errors.Is(err, client.ErrUnknownDestination)
		}
	}
	c2 := tc.Dial("n2")
	second, err := mustSession(t, c2, client.AutoAck).CreateTemporaryQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the temporary queue of a closed connection deleted", gone(second))
	// Its name is not made again, as an ordinary queue, by a consumer.
	_, err = mustSession(t, tc.Dial("n3"), client.AutoAck).Consumer(ctx, second)
	wantErr(t, "a consumer of a temporary queue that went", err, client.ErrInvalidName)
	_, err = a.CreateQueue(ctx, "tmp.mine", client.QueueOptions{})
	wantErr(t, "a queue named like a temporary one", err, client.ErrInvalidName)
	// A crash deletes nothing by itself: the meta leader does, once the
	// node run has looked gone for 10 s (each of its rounds may first wait
	// out placement's calls to the dead node).
	tc.Crash("n1")
	wait.For(t, 60*time.Second, "the temporary queue of a dead node's connection deleted", gone(replies))
}

// A transacted session publishes: the subscriptions get nothing until the
// commit, then every message once; a rolled-back publish reaches nobody;
// and one transaction may consume from a queue and publish what it made
// of it, on members hosted by different nodes.
func TestCluster_TransactedPublish(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := tc.Admin("n1")
	if _, err := a.CreateTopic(ctx, "prices", client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	createQueues(t, ctx, a, map[string]int{"quotes": 1})
	sub, err := mustSession(t, tc.Dial("n2"), client.AutoAck).Subscribe(ctx, "prices", client.Subscription{Name: "desk", Durable: true, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	s := mustSession(t, tc.Dial("n3"), client.Transacted)
	p, err := s.Publisher("prices")
	if err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, p, "rolled-back-", 3)
	if err := s.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, p, "committed-", 3)
	if m, _ := sub.ReceiveTimeout(300 * time.Millisecond); m != nil {
		t.Fatalf("%q reached a subscription before its transaction committed", m.Body)
	}
	if err := s.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for body := range drain(t, sub, 3, 20*time.Second) {
		if !strings.HasPrefix(body, "committed-") {
			t.Fatalf("the subscription got %q", body)
		}
	}

	// Consume a quote and publish a price in one transaction.
	send(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), "quotes"), "q1")
	k := mustConsumer(t, ctx, s, "quotes")
	if m := recv(t, k); string(m.Body) != "q1" {
		t.Fatalf("got %q", m.Body)
	}
	sendN(t, ctx, p, "from-q1-", 1)
	if err := s.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, sub, 1, 20*time.Second); got["from-q1-0"] == nil {
		t.Fatalf("the subscription got %v", got)
	}
	checkQueue(t, a, "quotes", 0, 0)
	if m, _ := sub.ReceiveTimeout(300 * time.Millisecond); m != nil {
		t.Fatalf("%q came after everything committed had", m.Body)
	}
}
