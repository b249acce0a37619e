package cluster

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// Acknowledge modes, recover, redelivery and exclusive delivery, through the
// real client library on one real node.

func TestAutoAck_ReceivedMessageIsGoneAfterClose(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	sendN(t, ctx, mustProducer(t, s, "auto"), "m", 3)
	k := mustConsumer(t, ctx, s, "auto")
	m := recv(t, k)
	if string(m.Body) != "m0" || m.Redelivered || m.DeliveryCount != 1 {
		t.Fatalf("first message: %q redelivered %v count %d", m.Body, m.Redelivered, m.DeliveryCount)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	// m0 was acknowledged; the two prefetched ones are pending again.
	checkQueue(t, a, "auto", 2, 0)

	c2 := dial(t, n)
	k2 := mustConsumer(t, ctx, mustSession(t, c2, client.AutoAck), "auto")
	got := recvN(t, k2, 2)
	sameSet(t, "after close", bodiesOf(got), []string{"m1", "m2"})
	expectNothing(t, k2, 200*time.Millisecond)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "auto", 0, 0)
}

func TestClientAck_AckAcknowledgesEveryMessageHandedOutSoFar(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	sendN(t, ctx, mustProducer(t, s, "cack"), "m", 4)
	k := mustConsumer(t, ctx, s, "cack", client.WithLimit(3))
	got := recvN(t, k, 3)
	checkQueue(t, a, "cack", 1, 3)
	// Acking the earliest message acks the two handed out after it too.
	if err := got[0].Ack(); err != nil {
		t.Fatalf("ack: %v", err)
	}
	checkQueue(t, a, "cack", 1, 0)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c2 := dial(t, n)
	k2 := mustConsumer(t, ctx, mustSession(t, c2, client.ClientAck), "cack")
	m := recv(t, k2)
	if string(m.Body) != "m3" || m.Redelivered || m.DeliveryCount != 1 {
		t.Fatalf("after ack: got %q redelivered %v count %d; want m3, first delivery", m.Body, m.Redelivered, m.DeliveryCount)
	}
	expectNothing(t, k2, 200*time.Millisecond)
}

func TestIndividualAck_AckAcknowledgesOnlyThatMessage(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.IndividualAck)
	sendN(t, ctx, mustProducer(t, s, "iack"), "m", 3)
	k := mustConsumer(t, ctx, s, "iack", client.WithLimit(3))
	got := recvN(t, k, 3)
	if err := got[1].Ack(); err != nil {
		t.Fatalf("ack: %v", err)
	}
	checkQueue(t, a, "iack", 0, 2)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "iack", 2, 0)

	c2 := dial(t, n)
	k2 := mustConsumer(t, ctx, mustSession(t, c2, client.IndividualAck), "iack")
	again := recvN(t, k2, 2)
	sameSet(t, "redelivered", bodiesOf(again), []string{"m0", "m2"})
	for _, m := range again {
		if !m.Redelivered || m.DeliveryCount != 2 {
			t.Fatalf("%q: redelivered %v count %d; want true, 2", m.Body, m.Redelivered, m.DeliveryCount)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, k2, 200*time.Millisecond)
	checkQueue(t, a, "iack", 0, 0)
}

func TestDupsOK_MessagesAreAcknowledgedEventually(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.DupsOK)
	want := sendN(t, ctx, mustProducer(t, s, "dups"), "m", 10)
	k := mustConsumer(t, ctx, s, "dups")
	got := recvN(t, k, 10)
	sameSet(t, "received", bodiesOf(got), want)
	// The connection stays open: the lazy acknowledgements alone empty it.
	waitQueue(t, a, "dups", 0, 0)
}

// Seed 000: recover returns every unacknowledged delivery of the session,
// including prefetched ones never handed out, marked redelivered.
func TestRecover_MarksUnackedRedelivered(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	sendN(t, ctx, mustProducer(t, s, "rec"), "m", 5)
	k := mustConsumer(t, ctx, s, "rec")
	m0 := recv(t, k)
	if err := m0.Ack(); err != nil {
		t.Fatal(err)
	}
	recvN(t, k, 2) // m1, m2 handed out, unacked
	// m3 and m4 are prefetched, not handed out.
	waitQueue(t, a, "rec", 0, 4)

	if err := s.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	again := recvN(t, k, 4)
	sameSet(t, "after recover", bodiesOf(again), []string{"m1", "m2", "m3", "m4"})
	for _, m := range again {
		if !m.Redelivered || m.DeliveryCount != 2 {
			t.Fatalf("%q after recover: redelivered %v count %d; want true, 2", m.Body, m.Redelivered, m.DeliveryCount)
		}
	}
	// Neither the acked m0 nor a stale prefetched copy comes again.
	expectNothing(t, k, 300*time.Millisecond)
	checkQueue(t, a, "rec", 0, 4)
	if err := again[3].Ack(); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "rec", 0, 0)
}

func TestRecover_AcknowledgedMessagesNeverComeAgain(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c := dial(t, n)
	s := mustSession(t, c, client.IndividualAck)
	sendN(t, ctx, mustProducer(t, s, "rec2"), "m", 4)
	k := mustConsumer(t, ctx, s, "rec2")
	got := recvN(t, k, 4)
	for _, m := range []*client.Message{got[0], got[2]} {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 {
		if err := s.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		again := recvN(t, k, 2)
		sameSet(t, "after recover", bodiesOf(again), []string{"m1", "m3"})
		for _, m := range again {
			if !m.Redelivered || m.DeliveryCount != round+2 {
				t.Fatalf("round %d: %q redelivered %v count %d; want true, %d", round, m.Body, m.Redelivered, m.DeliveryCount, round+2)
			}
		}
		expectNothing(t, k, 200*time.Millisecond)
	}
}

func TestRecover_IndividualAckOfMessageFromBeforeRecoverIsLostServer(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.IndividualAck)
	sendN(t, ctx, mustProducer(t, s, "rec3"), "m", 2)
	k := mustConsumer(t, ctx, s, "rec3")
	old := recvN(t, k, 2)
	if err := s.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	again := recvN(t, k, 2)
	checkQueue(t, a, "rec3", 0, 2)

	err := old[0].Ack()
	// The stale ack must not acknowledge the redelivered copy.
	checkQueue(t, a, "rec3", 0, 2)
	if !errors.Is(err, client.ErrLostServer) {
		t.Fatalf("IndividualAck Message.Ack of a message handed out before Session.Recover returns %v, want ErrLostServer", err)
	}
	for _, m := range again {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	checkQueue(t, a, "rec3", 0, 0)
}

func TestDelivery_HeldMessageIsNotGivenToAnotherConnection(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c1 := dial(t, n)
	s1 := mustSession(t, c1, client.ClientAck)
	send(t, ctx, mustProducer(t, s1, "excl"), "only")
	k1 := mustConsumer(t, ctx, s1, "excl")
	held := recv(t, k1)
	if string(held.Body) != "only" {
		t.Fatalf("got %q", held.Body)
	}

	c2 := dial(t, n)
	k2 := mustConsumer(t, ctx, mustSession(t, c2, client.ClientAck), "excl")
	expectNothing(t, k2, 300*time.Millisecond)

	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	m := recv(t, k2)
	if string(m.Body) != "only" || m.ID != held.ID || !m.Redelivered || m.DeliveryCount != 2 {
		t.Fatalf("after the holder closed: %q id %s redelivered %v count %d; want the same message, redelivered, count 2", m.Body, m.ID, m.Redelivered, m.DeliveryCount)
	}
}

func TestClose_ReturnsUnackedToPendingAndShowQueueCounts(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	sendN(t, ctx, mustProducer(t, s, "cnt"), "m", 3)
	q := checkQueue(t, a, "cnt", 3, 0)
	if len(q.Members) != 1 || q.Members[0].Name != "cnt#0" || q.Members[0].Pending != 3 || q.Members[0].Host != n.ID() {
		t.Fatalf("members: %+v", q.Members)
	}
	k := mustConsumer(t, ctx, s, "cnt", client.WithLimit(2))
	first := recvN(t, k, 2)
	q = checkQueue(t, a, "cnt", 1, 2)
	if q.Members[0].Consumers != 1 {
		t.Fatalf("consumers: %d", q.Members[0].Consumers)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	q = checkQueue(t, a, "cnt", 3, 0)
	if q.Members[0].Consumers != 0 {
		t.Fatalf("consumers after close: %d", q.Members[0].Consumers)
	}

	c2 := dial(t, n)
	k2 := mustConsumer(t, ctx, mustSession(t, c2, client.ClientAck), "cnt")
	all := recvN(t, k2, 3)
	checkQueue(t, a, "cnt", 0, 3)
	heldBefore := map[string]bool{string(first[0].Body): true, string(first[1].Body): true}
	for _, m := range all {
		want := heldBefore[string(m.Body)]
		if m.Redelivered != want || (want && m.DeliveryCount != 2) || (!want && m.DeliveryCount != 1) {
			t.Fatalf("%q: redelivered %v count %d; held before close: %v", m.Body, m.Redelivered, m.DeliveryCount, want)
		}
	}
	if err := all[2].Ack(); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, "cnt", 0, 0)
}

func TestPriority_HigherFirstThenSendOrder(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	p := mustProducer(t, s, "prio")
	if err := p.SetPriority(4); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, p, "low", 3)
	if err := p.SetPriority(9); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, p, "high", 3)
	if err := p.SetPriority(0); err != nil {
		t.Fatal(err)
	}
	send(t, ctx, p, "lowest")
	if err := p.SetPriority(10); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("priority 10: %v", err)
	}

	k := mustConsumer(t, ctx, s, "prio")
	got := recvN(t, k, 7)
	want := []string{"high0", "high1", "high2", "low0", "low1", "low2", "lowest"}
	wantPrio := []int{9, 9, 9, 4, 4, 4, 0}
	for i, m := range got {
		if string(m.Body) != want[i] || m.Priority != wantPrio[i] {
			t.Fatalf("order: got %v; want %v (message %d priority %d)", bodiesOf(got), want, i, m.Priority)
		}
	}
}

func TestReceiveNoWait_EmptyQueueReturnsNilAtOnce(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	k := mustConsumer(t, ctx, s, "nowait")
	start := time.Now()
	m, err := k.ReceiveNoWait()
	if err != nil || m != nil {
		t.Fatalf("empty queue: %v %v", m, err)
	}
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Fatalf("ReceiveNoWait took %v", d)
	}
	send(t, ctx, mustProducer(t, s, "nowait"), "x")
	var got *client.Message
	wait.For(t, 10*time.Second, "ReceiveNoWait to return the sent message", func() bool {
		got, err = k.ReceiveNoWait()
		if err != nil {
			t.Fatal(err)
		}
		return got != nil
	})
	if string(got.Body) != "x" {
		t.Fatalf("got %q", got.Body)
	}
}

func TestReceiveTimeout_ReturnsNilAfterTheTimeout(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c := dial(t, n)
	k := mustConsumer(t, ctx, mustSession(t, c, client.AutoAck), "timeout")
	const d = 300 * time.Millisecond
	start := time.Now()
	m, err := k.ReceiveTimeout(d)
	elapsed := time.Since(start)
	if err != nil || m != nil {
		t.Fatalf("empty queue: %v %v", m, err)
	}
	if elapsed < d || elapsed > d+time.Second {
		t.Fatalf("ReceiveTimeout(%v) returned after %v", d, elapsed)
	}
}

func TestReceive_ContextEndReturnsContextError(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c := dial(t, n)
	k := mustConsumer(t, ctx, mustSession(t, c, client.AutoAck), "rctx")
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if m, err := k.Receive(rctx); m != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty queue past its deadline: %v %v", m, err)
	}
}

func TestListener_GetsEveryMessage(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	want := sendN(t, ctx, mustProducer(t, s, "lsn"), "m", 20)
	k := mustConsumer(t, ctx, s, "lsn", client.WithPrefetch(4))
	got := make(chan *client.Message, 100)
	if err := k.SetListener(func(m *client.Message) { got <- m }); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Receive(ctx); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Receive on a consumer with a listener: %v", err)
	}
	var bodies []string
	timeout := time.After(10 * time.Second)
	for len(bodies) < len(want) {
		select {
		case m := <-got:
			if m.Redelivered {
				t.Fatalf("%q redelivered", m.Body)
			}
			bodies = append(bodies, string(m.Body))
		case <-timeout:
			t.Fatalf("listener got %v", bodies)
		}
	}
	for i := range want {
		if bodies[i] != want[i] {
			t.Fatalf("listener order: %v", bodies)
		}
	}
	waitQueue(t, a, "lsn", 0, 0)
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		t.Fatalf("extra message %q", m.Body)
	default:
	}
}

func TestMemberAddress_SendAndConsumeOneMember(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	if _, err := a.CreateQueue(ctx, "dd", client.QueueOptions{Members: 2}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	p1 := mustProducer(t, s, "dd#1")
	for range 2 {
		r := send(t, ctx, p1, "to1")
		if r.Member != "dd#1" {
			t.Fatalf("receipt member %q; want dd#1", r.Member)
		}
	}
	p0 := mustProducer(t, s, "dd#0")
	for range 3 {
		if r := send(t, ctx, p0, "to0"); r.Member != "dd#0" {
			t.Fatalf("receipt member %q; want dd#0", r.Member)
		}
	}
	q := checkQueue(t, a, "dd", 5, 0)
	if len(q.Members) != 2 || q.Members[0].Name != "dd#0" || q.Members[0].Pending != 3 || q.Members[1].Name != "dd#1" || q.Members[1].Pending != 2 {
		t.Fatalf("members: %+v", q.Members)
	}
	// Showing a member shows its destination.
	if q1 := showQueue(t, a, "dd#1"); q1.Name != "dd" || q1.Pending != 5 {
		t.Fatalf("show dd#1: %+v", q1)
	}

	k := mustConsumer(t, ctx, s, "dd#1")
	if k.Member() != "dd#1" {
		t.Fatalf("consumer pinned to %q", k.Member())
	}
	for _, m := range recvN(t, k, 2) {
		if string(m.Body) != "to1" || m.Member != "dd#1" || m.Destination != "dd" {
			t.Fatalf("got %q from %q (destination %q)", m.Body, m.Member, m.Destination)
		}
	}
	expectNothing(t, k, 200*time.Millisecond)
	q = checkQueue(t, a, "dd", 3, 2)
	if q.Members[0].Pending != 3 || q.Members[1].Delivered != 2 {
		t.Fatalf("members after consuming dd#1: %+v", q.Members)
	}

	// A member that does not exist: a clear error, and nothing changes.
	before := queueNames(t, a)
	_, err := mustProducer(t, s, "dd#5").Send(ctx, &client.Message{Body: []byte("x")})
	wantErr(t, "send to dd#5", err, client.ErrUnknownDestination)
	_, err = s.Consumer(ctx, "dd#5")
	wantErr(t, "consumer of dd#5", err, client.ErrUnknownDestination)
	_, err = a.ShowQueue(ctx, "dd#5")
	wantErr(t, "show dd#5", err, client.ErrUnknownDestination)
	q = checkQueue(t, a, "dd", 3, 2)
	if q.Members[0].Pending != 3 || q.Members[1].Pending != 0 || len(q.Members) != 2 {
		t.Fatalf("members after dd#5: %+v", q.Members)
	}
	sameSet(t, "queues after dd#5", queueNames(t, a), before)
	assertServes(t, n, "alive")
}

func TestDedup_SameDedupIDStoresOneMessage(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	p := mustProducer(t, s, "dedup")
	r1, err := p.Send(ctx, &client.Message{Body: []byte("one"), DedupID: "order-17"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := p.Send(ctx, &client.Message{Body: []byte("two"), DedupID: "order-17"})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Duplicate || !r2.Duplicate || r2.ID != r1.ID {
		t.Fatalf("receipts: %+v %+v; want the second a duplicate with the first's id", r1, r2)
	}
	// Within one batch too; another dedup id is another message.
	rs, err := p.SendBatch(ctx, []*client.Message{
		{Body: []byte("three"), DedupID: "order-18"},
		{Body: []byte("four"), DedupID: "order-18"},
		{Body: []byte("five"), DedupID: "order-17"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Duplicate || !rs[1].Duplicate || rs[1].ID != rs[0].ID || !rs[2].Duplicate || rs[2].ID != r1.ID {
		t.Fatalf("batch receipts: %+v", rs)
	}
	checkQueue(t, a, "dedup", 2, 0)
	k := mustConsumer(t, ctx, s, "dedup")
	got := recvN(t, k, 2)
	if string(got[0].Body) != "one" || got[0].ID != r1.ID || string(got[1].Body) != "three" {
		t.Fatalf("got %v", bodiesOf(got))
	}
	expectNothing(t, k, 200*time.Millisecond)
}

// A queue's dedup window is set at creation: an id is remembered for the
// window (by the leader's clock) and no longer, and for at most the given
// number of ids. Windows too small for resends and moves are refused.
func TestDedup_WindowAndSizeAreSetPerQueue(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	n := startNode(t, TestConfig(t, t.TempDir(), withClock(clock)))
	ctx := testCtx(t)
	a := admin(t, n)
	for _, o := range []client.QueueOptions{{DedupWindow: time.Second}, {DedupMaxIDs: 10}} {
		if _, err := a.CreateQueue(ctx, "tiny", o); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("create with %+v: %v; want invalid argument", o, err)
		}
	}
	q, err := a.CreateQueue(ctx, "dw", client.QueueOptions{DedupWindow: time.Minute, DedupMaxIDs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if q.DedupWindowMillis != 60_000 || q.DedupMaxIDs != 1000 {
		t.Fatalf("queue dedup settings %d ms, %d ids; want 60000, 1000", q.DedupWindowMillis, q.DedupMaxIDs)
	}
	p := mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "dw")
	dup := func(id string) bool {
		t.Helper()
		r, err := p.Send(ctx, &client.Message{Body: []byte(id), DedupID: id})
		if err != nil {
			t.Fatal(err)
		}
		return r.Duplicate
	}
	if dup("a") || !dup("a") {
		t.Fatal("a second send of dedup id a within the window was stored")
	}
	clock.Advance(61 * time.Second)
	if dup("a") {
		t.Fatal("dedup id a still remembered after the 1 minute window")
	}
	// A thousand newer ids push a out.
	batch := make([]*client.Message, 1000)
	for i := range batch {
		batch[i] = &client.Message{Body: []byte("b"), DedupID: "b" + strconv.Itoa(i)}
	}
	if _, err := p.SendBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if dup("a") {
		t.Fatal("dedup id a still remembered beyond the 1000 newest")
	}
	if !dup("b999") {
		t.Fatal("a recent id was forgotten")
	}
	checkQueue(t, a, "dw", 1003, 0)
}

func TestClientID_SecondConnectionWithSameIDIsRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c1 := dial(t, n, withClientID("app-1"))
	if c1.ClientID() != "app-1" {
		t.Fatalf("client id %q", c1.ClientID())
	}
	c2, err := client.Dial(ctx, []string{n.Addrs().Client}, client.Options{ClientID: "app-1"})
	if err == nil {
		c2.Close()
		t.Fatal("a second connection with client id app-1 was accepted")
	}
	// Another id, and no id, are fine meanwhile; the first connection works.
	dial(t, n, withClientID("app-2"))
	dial(t, n)
	s := mustSession(t, c1, client.AutoAck)
	send(t, ctx, mustProducer(t, s, "cid"), "x")
	if m := recv(t, mustConsumer(t, ctx, s, "cid")); string(m.Body) != "x" {
		t.Fatalf("got %q", m.Body)
	}
	if !errors.Is(err, client.ErrClientIDInUse) {
		t.Fatalf("Dial with a client id in use fails with %q, which does not match ErrClientIDInUse", err)
	}
}

func TestClientID_ReusableAfterFirstConnectionCloses(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	c1 := dial(t, n, withClientID("app-1"))
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns once the server has ended the connection: the id is free.
	c2 := dial(t, n, withClientID("app-1"))
	s := mustSession(t, c2, client.AutoAck)
	send(t, ctx, mustProducer(t, s, "cid"), "x")
	if m := recv(t, mustConsumer(t, ctx, s, "cid")); string(m.Body) != "x" {
		t.Fatalf("got %q", m.Body)
	}
}

// Promise 6: no message stays stranded on a member without consumers while
// another member of the same destination has one.
func TestDistributed_PlainNameSendsReachTheOnlyConsumer(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	if _, err := a.CreateQueue(ctx, "spread", client.QueueOptions{Members: 2}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	k := mustConsumer(t, ctx, s, "spread")
	want := sendN(t, ctx, mustProducer(t, s, "spread"), "m", 10)
	var got []string
	for len(got) < len(want) {
		m, err := k.ReceiveTimeout(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			q := showQueue(t, a, "spread")
			t.Fatalf("promise 6: the only consumer of spread (pinned to %s) got %d of %d messages sent to the plain name; members %+v", k.Member(), len(got), len(want), q.Members)
		}
		got = append(got, string(m.Body))
	}
	sameSet(t, "received", got, want)
}

func TestPurge_RemovesPendingOnly(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	sendN(t, ctx, mustProducer(t, s, "pur"), "m", 4)
	k := mustConsumer(t, ctx, s, "pur", client.WithLimit(1))
	held := recv(t, k)
	checkQueue(t, a, "pur", 3, 1)

	purged, err := a.PurgeQueue(ctx, "pur")
	if err != nil || purged != 3 {
		t.Fatalf("purge: %d %v; want 3", purged, err)
	}
	checkQueue(t, a, "pur", 0, 1)
	if err := held.Ack(); err != nil {
		t.Fatalf("ack of the delivered message after purge: %v", err)
	}
	checkQueue(t, a, "pur", 0, 0)

	_, err = a.PurgeQueue(ctx, "no-such-queue")
	wantErr(t, "purge unknown", err, client.ErrUnknownDestination)
	assertServes(t, n, "pur")
}

func TestDelete_BlockedReceiveGetsDestinationDeleted(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	if _, err := a.CreateQueue(ctx, "del", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	send(t, ctx, mustProducer(t, s, "del"), "doomed")
	k := mustConsumer(t, ctx, s, "del")
	if m := recv(t, k); string(m.Body) != "doomed" {
		t.Fatalf("got %q", m.Body)
	}
	errc := make(chan error, 1)
	go func() {
		m, err := k.Receive(ctx)
		if m != nil {
			err = errors.New("got a message: " + string(m.Body))
		}
		errc <- err
	}()
	if err := a.DeleteQueue(ctx, "del"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	select {
	case err := <-errc:
		wantErr(t, "blocked receive", err, client.ErrDestinationDeleted)
	case <-time.After(10 * time.Second):
		t.Fatal("blocked Receive did not return after the delete")
	}
	_, err := a.ShowQueue(ctx, "del")
	wantErr(t, "show after delete", err, client.ErrUnknownDestination)
	err = a.DeleteQueue(ctx, "del")
	wantErr(t, "second delete", err, client.ErrUnknownDestination)
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("queues after delete: %v", names)
	}

	// The name can be used again, and the new queue is empty.
	c2 := dial(t, n)
	s2 := mustSession(t, c2, client.ClientAck)
	send(t, ctx, mustProducer(t, s2, "del"), "reborn")
	checkQueue(t, a, "del", 1, 0)
	k2 := mustConsumer(t, ctx, s2, "del")
	if m := recv(t, k2); string(m.Body) != "reborn" || m.Redelivered {
		t.Fatalf("got %q redelivered %v", m.Body, m.Redelivered)
	}
	expectNothing(t, k2, 200*time.Millisecond)
}
