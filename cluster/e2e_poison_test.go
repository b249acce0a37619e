package cluster

import (
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// A message delivered max-deliveries times and given back once more moves,
// once, to NAME.DLQ with its id, body, properties and delivery count; the
// queue counts it dead-lettered and never delivers it again.
func TestPoison_MaxDeliveriesMovesTheMessageToTheDLQ(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "pq", client.QueueOptions{MaxDeliveries: 2}); err != nil {
		t.Fatal(err)
	}
	s := mustSession(t, dial(t, n), client.ClientAck)
	sent := &client.Message{Body: []byte("poison"), Properties: map[string]any{"order": "42"}}
	if _, err := mustProducer(t, s, "pq").Send(ctx, sent); err != nil {
		t.Fatal(err)
	}
	k := mustConsumer(t, ctx, s, "pq")
	for want := 1; want <= 2; want++ {
		m := recv(t, k)
		if m.DeliveryCount != want {
			t.Fatalf("delivery %d: count %d", want, m.DeliveryCount)
		}
		if err := s.Recover(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, k, 300*time.Millisecond)
	wait.For(t, 10*time.Second, "pq.DLQ holding the dead message and pq counting it", func() bool {
		dlq, err := a.ShowQueue(ctx, "pq.DLQ")
		return err == nil && dlq.Pending == 1 && showQueue(t, a, "pq").DeadLettered == 1
	})
	q := checkQueue(t, a, "pq", 0, 0)
	if q.MaxDeliveries != 2 || q.DeadLetterQueue != "pq.DLQ" {
		t.Errorf("queue settings %+v; want max_deliveries 2, dead_letter_queue pq.DLQ", q)
	}

	dk := mustConsumer(t, ctx, mustSession(t, dial(t, n), client.AutoAck), "pq.DLQ")
	m := recv(t, dk)
	if m.ID != sent.ID || string(m.Body) != "poison" || m.Properties["order"] != "42" {
		t.Errorf("dead-lettered message %s %q %v; want %s %q with order=42", m.ID, m.Body, m.Properties, sent.ID, "poison")
	}
	if !m.Redelivered || m.DeliveryCount != 3 {
		t.Errorf("dead-lettered message: redelivered %v count %d; want true, 3 (two deliveries on pq, one here)", m.Redelivered, m.DeliveryCount)
	}
	expectNothing(t, dk, 300*time.Millisecond)
}

// A message given back waits out the redelivery delay, by the leader's
// clock, growing by the backoff with each delivery up to the cap; while it
// waits the queue counts it delayed.
func TestPoison_RedeliveryDelayGrowsWithBackoffUpToTheCap(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	n := startNode(t, TestConfig(t, t.TempDir(), withClock(clock)))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "dq", client.QueueOptions{RedeliveryDelay: 10 * time.Second, RedeliveryBackoff: 2, RedeliveryMaxDelay: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	s := mustSession(t, dial(t, n), client.ClientAck)
	send(t, ctx, mustProducer(t, s, "dq"), "slow")
	k := mustConsumer(t, ctx, s, "dq")
	if m := recv(t, k); m.DeliveryCount != 1 {
		t.Fatalf("first delivery count %d", m.DeliveryCount)
	}
	for i, delay := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second} {
		if err := s.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if q := showQueue(t, a, "dq"); q.Delayed != 1 || q.Pending != 0 {
			t.Fatalf("after recover %d: delayed %d pending %d; want 1, 0", i+1, q.Delayed, q.Pending)
		}
		clock.Advance(delay - time.Second)
		expectNothing(t, k, 200*time.Millisecond)
		clock.Advance(time.Second)
		m := recv(t, k)
		if !m.Redelivered || m.DeliveryCount != i+2 {
			t.Fatalf("after a delay of %v: redelivered %v count %d; want true, %d", delay, m.Redelivered, m.DeliveryCount, i+2)
		}
	}
}

// The redelivery delay and the delivery count are replicated: when the
// host dies, the new one neither releases a delayed message early nor
// forgets how often it was delivered.
func TestPoison_DelayedMessageSurvivesFailoverWithItsCount(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	tc := NewTestCluster(t, 3, withClock(clock))
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "fq", client.QueueOptions{Members: 1, RedeliveryDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("fq", 1)[0]
	other := tc.Others(host)[0]
	s := mustSession(t, tc.Dial(other), client.ClientAck)
	send(t, ctx, mustProducer(t, s, "fq"), "m")
	k := mustConsumer(t, ctx, s, "fq")
	recv(t, k)
	if err := s.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil { // the message is for k2 when it wakes
		t.Fatal(err)
	}
	tc.Crash(host)
	newHost := tc.WaitHost("fq#0")
	a := tc.Admin(other)
	wait.For(tc.t, 10*time.Second, "the new host "+newHost+" counting the message delayed", func() bool {
		q, err := a.ShowQueue(ctx, "fq")
		return err == nil && q.Members[0].Host == newHost && q.Delayed == 1
	})
	k2 := mustConsumer(t, ctx, mustSession(t, tc.Dial(newHost), client.AutoAck), "fq")
	clock.Advance(time.Minute - time.Second)
	expectNothing(t, k2, 300*time.Millisecond)
	clock.Advance(time.Second)
	if m := recv(t, k2); !m.Redelivered || m.DeliveryCount != 2 {
		t.Fatalf("after failover: redelivered %v count %d; want true, 2", m.Redelivered, m.DeliveryCount)
	}
}
