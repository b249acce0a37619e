package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A consumer closed with messages it prefetched and never handed to the
// application gives them back unseen: however often that happens, they are
// neither counted nor marked, and never reach --max-deliveries.
func TestUnseen_PrefetchedMessagesOfAClosedConsumerAreNotCounted(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "prefetched", client.QueueOptions{MaxDeliveries: 2}); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "prefetched"), "m", 10)
	conn := dial(t, n)
	for round := range 3 {
		s := mustSession(t, conn, client.AutoAck)
		k := mustConsumer(t, ctx, s, "prefetched", client.WithPrefetch(10))
		if m := recv(t, k); m.Redelivered || m.DeliveryCount != 1 {
			t.Fatalf("round %d: %s came redelivered=%v count %d; want its first delivery", round, m.Body, m.Redelivered, m.DeliveryCount)
		}
		// Everything left is in the consumer's buffer when it closes.
		wait.For(t, 10*time.Second, "every message delivered", func() bool { return showQueue(t, a, "prefetched").Pending == 0 })
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	waitQueue(t, a, "prefetched", 7, 0)
	k := mustConsumer(t, ctx, mustSession(t, conn, client.AutoAck), "prefetched")
	for _, m := range recvN(t, k, 7) {
		if m.Redelivered || m.DeliveryCount != 1 {
			t.Fatalf("%s came redelivered=%v count %d; want its first delivery", m.Body, m.Redelivered, m.DeliveryCount)
		}
	}
	if q := showQueue(t, a, "prefetched"); q.DeadLettered != 0 {
		t.Fatalf("%d messages dead-lettered that no application received twice", q.DeadLettered)
	}
}

// Deliveries still queued for a client when its connection ends never
// reached it: they come back unseen, and those the node wrote to the
// stream come back marked redelivered.
func TestUnseen_DeliveriesNeverWrittenToAClientAreNotCounted(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	const total = 300
	p := mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "unwritten")
	for range total {
		if _, err := p.Send(ctx, &client.Message{Body: make([]byte, 40_000)}); err != nil {
			t.Fatal(err)
		}
	}

	// A client that reads one frame of deliveries and then no more: its
	// stream's window (4 MiB, fixed, as the client library's) takes a few
	// frames more, and the rest of the 12 MB waits in the node's outbox.
	sctx, cancel := context.WithCancel(ctx)
	r := openRaw(t, sctx, n, transport.DialOptions()...)
	for _, op := range []any{
		&clientpb.Hello{},
		&clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_CLIENT},
	} {
		if err := r.call(r.next(op)); err != nil {
			t.Fatal(err)
		}
	}
	var read []*clientpb.Delivery
	create := r.next(&clientpb.CreateConsumer{Session: 1, Consumer: 1, Destination: "unwritten", Prefetch: total})
	r.send(create)
	if _, err := r.reply(create.RequestId, &read); err != nil {
		t.Fatal(err)
	}
	for len(read) == 0 {
		f, err := r.st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, f.GetDeliveries().GetMessages()...)
	}
	waitQueue(t, a, "unwritten", 0, total)
	cancel()
	waitQueue(t, a, "unwritten", total, 0)

	got := map[string]bool{}
	for _, d := range read {
		got[d.Id] = true
	}
	k := mustConsumer(t, ctx, mustSession(t, dial(t, n), client.AutoAck), "unwritten")
	unseen := 0
	for _, m := range recvN(t, k, total) {
		switch {
		case got[m.ID] && (!m.Redelivered || m.DeliveryCount != 2):
			t.Fatalf("%s, which the client read, came back redelivered=%v count %d; want marked, count 2", m.ID, m.Redelivered, m.DeliveryCount)
		case !m.Redelivered && m.DeliveryCount == 1:
			unseen++
		case m.Redelivered && m.DeliveryCount == 2:
		default:
			t.Fatalf("%s came back redelivered=%v count %d", m.ID, m.Redelivered, m.DeliveryCount)
		}
	}
	if unseen == 0 {
		t.Fatalf("no message of %d came back unseen; %d were read, the stream's window holds some 100 more", total, len(read))
	}
	t.Logf("%d read by the client, %d never written to the stream and back unseen, of %d", len(read), unseen, total)
}

// Credit past a consumer's prefetch is ignored: the node takes credit only
// for messages it pushed, so it never delivers to a consumer more messages
// than its prefetch ahead of those the consumer made room for again.
func TestCredit_PastThePrefetchIsIgnored(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	p := mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "credit")
	sendN(t, ctx, p, "first", 1)

	r := openRaw(t, ctx, n)
	call := func(op any) {
		t.Helper()
		if err := r.call(r.next(op)); err != nil {
			t.Fatal(err)
		}
	}
	// Frames are served in order: a credit is taken once the request after
	// it is answered.
	credit := func(n uint32) {
		t.Helper()
		r.send(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_Credit{Credit: &clientpb.Credit{Consumer: 1, Messages: n}}})
		call(&clientpb.OpenSession{Session: 100 + r.id, AckMode: clientpb.AckMode_ACK_MODE_AUTO})
	}
	delivered := func(want uint64) {
		t.Helper()
		wait.For(t, 10*time.Second, fmt.Sprintf("%d delivered", want), func() bool { return showQueue(t, a, "credit").Delivered == want })
		wait.Holds(t, 300*time.Millisecond, fmt.Sprintf("%d delivered, no more", want), func() bool { return showQueue(t, a, "credit").Delivered == want })
	}
	call(&clientpb.Hello{})
	call(&clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_CLIENT})
	call(&clientpb.CreateConsumer{Session: 1, Consumer: 1, Destination: "credit", Prefetch: 10})
	delivered(1)
	// Room for one made again: one more, though a million were asked for
	// before the rest were sent.
	credit(1_000_000)
	sendN(t, ctx, p, "m", 100)
	delivered(11)
	// Room made again for five: five more.
	credit(5)
	delivered(16)
	// The consumer holds ten it was pushed since: room for ten at most.
	credit(1_000_000)
	delivered(26)
}
