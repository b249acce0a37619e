package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// A session recovers on a member whose leader is cut off from the other
// replicas just before: the Recover goes into the old leader's log, which
// can no longer commit it, and the leader steps down without an answer.
// The front-end sends the same attempt again to the new leader once it can
// reach one, so the client's Recover returns no error and the three
// messages the session held come back once each, marked redelivered, on
// their second delivery. Without the resend the client got "outcome
// unknown" for a failover it could do nothing about. Here the first try is
// never committed; that a member applies a repeated attempt once, when the
// first try was, is fsm's TestRecover_RepeatedAttemptChangesNothing.
func TestCluster_RecoverIsSentAgainWhenItsLeaderStepsDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for a leader to step down and a new one to be elected")
	}
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "rec", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("rec", 1)[0]
	s := mustSession(t, tc.Dial(host), client.ClientAck)
	sent := sendN(t, ctx, mustProducer(t, s, "rec"), "m", 3)
	k := mustConsumer(t, ctx, s, "rec")
	for i := range sent {
		m, err := k.ReceiveTimeout(5 * time.Second)
		if err != nil || m == nil {
			t.Fatalf("receive %d: %v, %v", i, m, err)
		}
	}

	tc.Isolate(host)
	recovered := make(chan error, 1)
	go func() { recovered <- s.Recover(stepCtx(t, 30*time.Second)) }()
	r, _ := tc.Node(host).groups.replica("rec#0")
	wait.For(t, 10*time.Second, "the cut-off leader to step down", func() bool { return !r.Leading() })
	select {
	case err := <-recovered:
		t.Fatalf("Recover returned (%v) while its member had no leader this node could reach", err)
	default:
	}
	tc.Rejoin(host)
	select {
	case err := <-recovered:
		if err != nil {
			t.Fatalf("Recover across the failover: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Recover did not return 15 s after the links were healed")
	}

	got := map[string]bool{}
	for len(got) < len(sent) {
		m, err := k.ReceiveTimeout(10 * time.Second)
		if err != nil || m == nil {
			t.Fatalf("after the recover, %d of %d messages came back (%v); receive: %v", len(got), len(sent), got, err)
		}
		if got[string(m.Body)] {
			t.Fatalf("%s came back twice", m.Body)
		}
		got[string(m.Body)] = true
		if !m.Redelivered || m.DeliveryCount != 2 {
			t.Errorf("%s came back with Redelivered %v, delivery count %d; want true, 2", m.Body, m.Redelivered, m.DeliveryCount)
		}
	}
	if want := fmt.Sprint(map[string]bool{"m0": true, "m1": true, "m2": true}); fmt.Sprint(got) != want {
		t.Errorf("redelivered %v, want %v", got, want)
	}
	expectNothing(t, k, 300*time.Millisecond)
}

// A consumer is created on a member whose leader is cut off from the other
// replicas just before: the session's OpenSession on the member goes into
// the old leader's log, which can no longer commit it, and the leader steps
// down without an answer. Opening a session twice changes nothing, so the
// front-end sends it again to the new leader, and the consumer is created
// and receives. Without the resend the client got "outcome unknown", and a
// client re-creating its consumers after a reconnect lost them.
func TestCluster_ConsumerCreatedWhileItsLeaderStepsDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for a leader to step down and a new one to be elected")
	}
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "cc", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("cc", 1)[0]
	conn := tc.Dial(host)
	sent := sendN(t, ctx, mustProducer(t, mustSession(t, conn, client.AutoAck), "cc"), "m", 3)
	s := mustSession(t, conn, client.AutoAck)

	tc.Isolate(host)
	type created struct {
		k   *client.Consumer
		err error
	}
	done := make(chan created, 1)
	go func() {
		k, err := s.Consumer(stepCtx(t, 30*time.Second), "cc")
		done <- created{k, err}
	}()
	r, _ := tc.Node(host).groups.replica("cc#0")
	wait.For(t, 10*time.Second, "the cut-off leader to step down", func() bool { return !r.Leading() })
	select {
	case c := <-done:
		t.Fatalf("creating the consumer returned (%v) while its member had no leader this node could reach", c.err)
	default:
	}
	tc.Rejoin(host)
	var k *client.Consumer
	select {
	case c := <-done:
		if c.err != nil {
			t.Fatalf("creating the consumer across the failover: %v", c.err)
		}
		k = c.k
	case <-time.After(15 * time.Second):
		t.Fatal("the consumer was not created 15 s after the links were healed")
	}
	sameSet(t, "received after the failover", bodiesOf(recvN(t, k, len(sent))), sent)
}
