package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// Several consumers on one session: a queue hands each message to one of
// them, and the session's acknowledge, recover and commit act on all of
// them, as JMS has it.

// takeAll receives from each consumer until nothing comes for a while and
// returns, by message id, which consumers got it (by index).
func takeAll(t *testing.T, ks ...*client.Consumer) (got map[string][]int, msgs []*client.Message) {
	t.Helper()
	got = map[string][]int{}
	for quiet := 0; quiet < len(ks); {
		quiet = 0
		for i, k := range ks {
			m, err := k.ReceiveTimeout(300 * time.Millisecond)
			if err != nil {
				t.Fatalf("receive from consumer %d: %v", i, err)
			}
			if m == nil {
				quiet++
				continue
			}
			got[m.ID] = append(got[m.ID], i)
			msgs = append(msgs, m)
		}
	}
	return got, msgs
}

// onceEach fails unless every message of got came to exactly one consumer,
// and want of them came.
func onceEach(t *testing.T, what string, got map[string][]int, want int) {
	t.Helper()
	for id, ks := range got {
		if len(ks) != 1 {
			t.Errorf("%s: %s came to consumers %v; a queue hands a message to one consumer", what, id, ks)
		}
	}
	if len(got) != want {
		t.Errorf("%s: %d messages came; want %d", what, len(got), want)
	}
}

// The repro: six messages, one session, two consumers of the queue:
// six deliveries in all, each to one consumer; the session's acknowledge
// takes both consumers' messages.
func TestSession_TwoConsumersOfAQueueShareItsMessages(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	s := mustSession(t, dial(t, n), client.ClientAck)
	sendN(t, ctx, mustProducer(t, s, "tq"), "m", 6)
	k0, k1 := mustConsumer(t, ctx, s, "tq"), mustConsumer(t, ctx, s, "tq")
	got, _ := takeAll(t, k0, k1)
	onceEach(t, "two consumers of tq on one session", got, 6)
	checkQueue(t, a, "tq", 0, 6)
	if err := s.Acknowledge(ctx); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "tq", 0, 0)
}

// Many consumers on one session, of one queue, of its member by name and
// of another queue, get each message once; a recover gives all of them
// back marked, each again to one consumer; a commit of a transacted
// session acknowledges what all its consumers took.
func TestSession_ConsumersOfOneSessionRecoverAndCommitTogether(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "many", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	p := mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "many")
	sendN(t, ctx, p, "m", 40)
	sendN(t, ctx, mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "other"), "o", 10)

	s := mustSession(t, dial(t, n), client.ClientAck)
	var ks []*client.Consumer
	for i := range 8 {
		dest := "many"
		switch i % 4 {
		case 1:
			dest = "many#0" // the member by name, beside the plain name
		case 3:
			dest = "other"
		}
		ks = append(ks, mustConsumer(t, ctx, s, dest, client.WithPrefetch(3)))
	}
	got, _ := takeAll(t, ks...)
	onceEach(t, "eight consumers of one session", got, 50)
	if err := s.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	again, msgs := takeAll(t, ks...)
	onceEach(t, "after the session's recover", again, 50)
	for _, m := range msgs {
		if !m.Redelivered || m.DeliveryCount != 2 {
			t.Errorf("%s after recover: redelivered %v, delivery count %d; want marked, 2", m.ID, m.Redelivered, m.DeliveryCount)
		}
	}
	if err := s.Acknowledge(ctx); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "many", 0, 0)
	checkQueue(t, a, "other", 0, 0)
	// Closed, so that its consumers' credit takes none of what follows.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Transacted: a rollback gives back every consumer's messages, a
	// commit takes them all.
	sendN(t, ctx, p, "t", 12)
	tx := mustSession(t, dial(t, n), client.Transacted)
	tk := []*client.Consumer{mustConsumer(t, ctx, tx, "many"), mustConsumer(t, ctx, tx, "many"), mustConsumer(t, ctx, tx, "many#0")}
	got, _ = takeAll(t, tk...)
	onceEach(t, "three consumers of a transacted session", got, 12)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ = takeAll(t, tk...)
	onceEach(t, "after the rollback", got, 12)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "many", 0, 0)
}

// Closing one of a session's consumers gives back what it prefetched and
// never handed out, unmarked, to the session's other consumer; what it
// handed out stays the session's until the session acknowledges it.
func TestSession_ClosingOneConsumerLeavesTheOthers(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	s := mustSession(t, dial(t, n), client.ClientAck)
	k0 := mustConsumer(t, ctx, s, "close", client.WithPrefetch(10))
	sendN(t, ctx, mustProducer(t, s, "close"), "m", 10)
	seen := recvN(t, k0, 2)
	waitQueue(t, a, "close", 0, 10) // the other eight in k0's buffer
	k1 := mustConsumer(t, ctx, s, "close", client.WithPrefetch(10))
	expectNothing(t, k1, 300*time.Millisecond)
	if err := k0.Close(); err != nil {
		t.Fatal(err)
	}
	got, msgs := takeAll(t, k1)
	onceEach(t, "after the first consumer closed", got, 8)
	for _, m := range msgs {
		if m.Redelivered || m.DeliveryCount != 1 {
			t.Errorf("%s, prefetched by the closed consumer and never handed out: redelivered %v, delivery count %d; want unmarked, 1", m.ID, m.Redelivered, m.DeliveryCount)
		}
		if m.ID == seen[0].ID || m.ID == seen[1].ID {
			t.Errorf("%s, handed out by the closed consumer, came to the other one", m.ID)
		}
	}
	if err := s.Acknowledge(ctx); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "close", 0, 0)
}

// A shared subscription, durable or not, with several consumers on one
// session: each message of the subscription goes to one of them.
func TestSession_SharedSubscriptionsConsumersOnOneSession(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateTopic(ctx, "news", client.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, durable := range []bool{true, false} {
		sub := client.Subscription{Name: fmt.Sprintf("shared-%v", durable), Durable: durable, Shared: true}
		s := mustSession(t, dial(t, n), client.ClientAck)
		var ks []*client.Consumer
		for range 3 {
			k, err := s.Subscribe(ctx, "news", sub)
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, k)
		}
		pub, err := mustSession(t, dial(t, n), client.AutoAck).Publisher("news")
		if err != nil {
			t.Fatal(err)
		}
		sendN(t, ctx, pub, sub.Name, 9)
		got, _ := takeAll(t, ks...)
		onceEach(t, sub.Name+": three consumers on one session", got, 9)
		if err := s.Acknowledge(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// When the host of a member fails over with deliveries committed and never
// pushed, the new host pushes each to the consumer it was for: two
// consumers of one session re-attach, and no message comes to both.
func TestSession_TwoConsumersReattachAfterTheirHostFails(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "fo", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitHost("fo#0")
	front := tc.Others(host)[0]
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(front), client.AutoAck), "fo"), "m", 30)
	s := mustSession(t, tc.Dial(front), client.ClientAck)
	k0 := mustConsumer(t, ctx, s, "fo", client.WithPrefetch(5))
	k1 := mustConsumer(t, ctx, s, "fo", client.WithPrefetch(5))
	got := map[string][]int{}
	for i, k := range []*client.Consumer{k0, k1} {
		for _, m := range recvN(t, k, 2) {
			got[m.ID] = append(got[m.ID], i)
		}
	}
	tc.Crash(host)
	// Until every message came, or nothing came for well over a failover.
	for quiet := time.Now(); len(got) < 30 && time.Since(quiet) < 10*time.Second; {
		for i, k := range []*client.Consumer{k0, k1} {
			if m, err := k.ReceiveTimeout(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			} else if m != nil {
				got[m.ID] = append(got[m.ID], i)
				quiet = time.Now()
			}
		}
	}
	onceEach(t, "two consumers of one session through their host's crash", got, 30)
	if err := s.Acknowledge(ctx); err != nil {
		t.Fatal(err)
	}
	waitQueue(t, tc.Admin(front), "fo", 0, 0)
}
