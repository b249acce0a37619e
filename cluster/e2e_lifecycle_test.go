package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A Consumer call whose context ends before the reply: the client forgets
// the consumer and closes it, so the server never attaches it and no
// message is delivered where nobody can receive it.
func TestConsumer_AbandonedCreationHoldsNoMessages(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	p := mustProducer(t, s, "zq")
	sendN(t, ctx, p, "m", 3)

	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Consumer(dead, "zq"); !errors.Is(err, context.Canceled) {
		t.Fatalf("consumer with a canceled context: %v", err)
	}
	k := mustConsumer(t, ctx, s, "zq")
	got := 0
	for {
		m, err := k.ReceiveTimeout(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			break
		}
		got++
	}
	if got < 3 {
		q := showQueue(t, a, "zq")
		t.Fatalf("the live consumer got %d of 3 messages; queue pending %d delivered %d (the rest held by the abandoned consumer)", got, q.Pending, q.Delivered)
	}
}

// JMS lets a message listener close its own consumer; Consumer.Close waits
// for the listener goroutine, which is the caller.
func TestListener_ClosingItsOwnConsumerReturns(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	send(t, ctx, mustProducer(t, s, "lq"), "one")
	k := mustConsumer(t, ctx, s, "lq")
	closed := make(chan error, 1)
	if err := k.SetListener(func(*client.Message) { closed <- k.Close() }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close from listener: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Consumer.Close called from its own listener has not returned after 5 s (deadlock)")
	}
}

// CreateConsumer runs on its own goroutine; a CloseSession that arrives
// meanwhile releases s.members before attachConsumer adds to it (unlocked
// read in closeSession, locked write in attachConsumer), and the session the
// late OpenSession created on the member is never released.
func TestSession_CloseDuringConsumerCreationReleasesIt(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	r := openRaw(t, ctx, n)
	if err := r.call(&clientpb.ClientFrame{RequestId: 1, Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.call(&clientpb.ClientFrame{RequestId: 2, Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_CLIENT}}}); err != nil {
		t.Fatal(err)
	}
	r.send(&clientpb.ClientFrame{RequestId: 3, Op: &clientpb.ClientFrame_CreateConsumer{CreateConsumer: &clientpb.CreateConsumer{Session: 1, Consumer: 1, Destination: "leak"}}})
	// Let attachConsumer pass its session check; the queue's creation keeps
	// it busy well beyond this.
	time.Sleep(2 * time.Millisecond)
	r.send(&clientpb.ClientFrame{RequestId: 4, Op: &clientpb.ClientFrame_CloseSession{CloseSession: &clientpb.CloseSession{Session: 1}}})
	if _, err := r.reply(4, nil); err != nil {
		t.Fatalf("close session: %v", err)
	}
	_, err3 := r.reply(3, nil)
	t.Logf("create consumer answered: %v", err3)
	var rep interface{ Stats() fsmStats }
	wait.For(t, 10*time.Second, "replica leak#0", func() bool {
		r, ok := n.groups.replica("leak#0")
		if ok {
			rep = r
		}
		return ok
	})
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if rep.Stats().Sessions == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("member leak#0 still holds %d session(s) after the client closed its only session", rep.Stats().Sessions)
}

type fsmStats = fsm.Stats

// A ClientAck session that consumed from two queues, one of which is then
// deleted: every later acknowledge of the session fails, because the
// deleted member's replica answers ErrStopped (mapped to ErrUnavailable) and
// the client puts every ref of the failed ack, including the ones the live
// member did acknowledge, back for the next ack.
func TestDelete_AcksOfOtherQueuesStillWork(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	sendN(t, ctx, mustProducer(t, s, "qa"), "a", 2)
	send(t, ctx, mustProducer(t, s, "qb"), "b")
	ka := mustConsumer(t, ctx, s, "qa", client.WithPrefetch(1))
	kb := mustConsumer(t, ctx, s, "qb")
	recv(t, ka)
	recv(t, kb)
	if err := a.DeleteQueue(ctx, "qb"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "qb gone", func() bool { _, ok := n.groups.replica("qb#0"); return !ok })
	m2 := recv(t, ka)
	err := m2.Ack()
	q := showQueue(t, a, "qa")
	t.Logf("first ack after the delete: %v; qa now pending %d delivered %d", err, q.Pending, q.Delivered)
	// Nothing new was handed out; a second acknowledge should have nothing
	// left to fail on.
	err = s.Acknowledge(ctx)
	if err != nil {
		t.Fatalf("acknowledge of a session whose other queue was deleted keeps failing: %v", err)
	}
}
