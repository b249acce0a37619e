package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// Expiry, on a node whose clock the test moves (Config.Clock); the expiry
// loop runs every 20 ms (TestConfig).

func TestExpiry_ProducerTTLRemovesPendingAndDelivered(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	n := startNode(t, TestConfig(t, t.TempDir(), withClock(clock)))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	p := mustProducer(t, s, "exp")
	if err := p.SetTimeToLive(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	sendAt := clock.Now()
	sendN(t, ctx, p, "short", 3)
	send(t, ctx, mustProducer(t, s, "exp"), "forever")

	k := mustConsumer(t, ctx, s, "exp", client.WithLimit(1))
	held := recv(t, k)
	if string(held.Body) != "short0" {
		t.Fatalf("got %q", held.Body)
	}
	if want := sendAt.Add(10 * time.Second); held.Expiration.Before(want.Add(-time.Millisecond)) || held.Expiration.After(want.Add(time.Second)) {
		t.Fatalf("expiration %v; want about %v", held.Expiration, want)
	}
	checkQueue(t, a, "exp", 3, 1)

	clock.Advance(9 * time.Second)
	// Not yet: an expiry round now changes nothing.
	r, ok := n.groups.replica("exp#0")
	if !ok {
		t.Fatal("no replica of exp#0")
	}
	if removed := r.ExpireNow(); removed != 0 {
		t.Fatalf("%d messages expired before their time", removed)
	}
	checkQueue(t, a, "exp", 3, 1)

	clock.Advance(2 * time.Second)
	// Both the pending ones and the delivered, unacknowledged one go.
	waitQueue(t, a, "exp", 1, 0)
	if err := held.Ack(); !errors.Is(err, client.ErrLostServer) {
		t.Fatalf("ack of an expired delivery: %v; want ErrLostServer", err)
	}

	c2 := dial(t, n)
	k2 := mustConsumer(t, ctx, mustSession(t, c2, client.ClientAck), "exp")
	m := recv(t, k2)
	if string(m.Body) != "forever" || m.Redelivered || !m.Expiration.IsZero() {
		t.Fatalf("got %q redelivered %v expiration %v", m.Body, m.Redelivered, m.Expiration)
	}
	expectNothing(t, k2, 200*time.Millisecond)
}

func TestExpiry_QueueTTLAppliesToItsMessages(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	n := startNode(t, TestConfig(t, t.TempDir(), withClock(clock)))
	ctx := testCtx(t)
	a := admin(t, n)

	q, err := a.CreateQueue(ctx, "qttl", client.QueueOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if q.TTLMillis != 5000 {
		t.Fatalf("ttl %d ms", q.TTLMillis)
	}
	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	sendN(t, ctx, mustProducer(t, s, "qttl"), "dflt", 3)
	// A producer's own time to live overrides the queue's.
	long := mustProducer(t, s, "qttl")
	if err := long.SetTimeToLive(time.Hour); err != nil {
		t.Fatal(err)
	}
	send(t, ctx, long, "long")
	k := mustConsumer(t, ctx, s, "qttl", client.WithLimit(1))
	held := recv(t, k)
	if string(held.Body) != "dflt0" || held.Expiration.IsZero() {
		t.Fatalf("got %q expiration %v", held.Body, held.Expiration)
	}
	checkQueue(t, a, "qttl", 3, 1)

	clock.Advance(6 * time.Second)
	waitQueue(t, a, "qttl", 1, 0)

	// A message sent after the jump lives its 5 s from the new time.
	send(t, ctx, mustProducer(t, s, "qttl"), "fresh")
	checkQueue(t, a, "qttl", 2, 0)

	c2 := dial(t, n)
	k2 := mustConsumer(t, ctx, mustSession(t, c2, client.ClientAck), "qttl")
	got := recvN(t, k2, 2)
	sameSet(t, "survivors", bodiesOf(got), []string{"long", "fresh"})
	expectNothing(t, k2, 200*time.Millisecond)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}

	clock.Advance(6 * time.Second)
	waitQueue(t, a, "qttl", 1, 0) // "fresh" gone, "long" stays
}

func TestExpiry_ExpiredMessagesAreNeverReceived(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	n := startNode(t, TestConfig(t, t.TempDir(), withClock(clock)))
	ctx := testCtx(t)

	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	p := mustProducer(t, s, "never")
	if err := p.SetTimeToLive(time.Second); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, p, "m", 5)
	// Expired at once, before the expiry loop may have removed them: the
	// dispatcher must not hand them out either.
	clock.Advance(2 * time.Second)
	k := mustConsumer(t, ctx, s, "never")
	expectNothing(t, k, 300*time.Millisecond)
	send(t, ctx, mustProducer(t, s, "never"), "live")
	if m := recv(t, k); string(m.Body) != "live" {
		t.Fatalf("got %q", m.Body)
	}
}

// A message prefetched by the client and expired (and removed) on the server
// before the application asks for it must not be handed out. This uses the
// real clock: the client judges expiry by its own.
func TestExpiry_PrefetchedExpiredMessageIsNotHandedOut(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	p := mustProducer(t, s, "pref")
	if err := p.SetTimeToLive(time.Second); err != nil {
		t.Fatal(err)
	}
	send(t, ctx, p, "stale")
	k := mustConsumer(t, ctx, s, "pref")
	waitQueue(t, a, "pref", 0, 1) // prefetched by the consumer
	waitQueue(t, a, "pref", 0, 0) // expired and removed on the server
	m, err := k.ReceiveNoWait()
	if err != nil {
		t.Fatal(err)
	}
	if m != nil {
		t.Fatalf("a prefetched message that expired (expiration %v, now %v) and was removed on the server is still handed out by ReceiveNoWait", m.Expiration, time.Now())
	}
}
