package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/cairnmq/cairn/client"
)

// The client refresh rules (client package documentation), each checked by
// killing or cutting off the node under the client.

// exceptions records what a connection's exception listener is called with.
type exceptions struct {
	mu   sync.Mutex
	errs []error
}

func listen(c *client.Connection) *exceptions {
	e := &exceptions{}
	c.SetExceptionListener(func(err error) {
		e.mu.Lock()
		e.errs = append(e.errs, err)
		e.mu.Unlock()
	})
	return e
}

func (e *exceptions) list() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

// dialVia dials addrs only (the client learns the other nodes from the one
// it reaches) with the given options.
func dialVia(t *testing.T, addrs []string, opts client.Options) *client.Connection {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addrs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Rules 1, 4, 6 and 7: a ClientAck consumer under ReconnectAll whose
// front-end is killed goes on on another node. The exception listener hears
// ErrLostServer although the refresh succeeds; the first acknowledge after
// the refresh reports ErrLostServer, as does the ack of a message handed
// out before it; the messages held unacknowledged come again marked
// redelivered; an acknowledged one never comes again.
func TestRefresh_FrontEndKilled_ConsumerGoesOn(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	createQueues(t, ctx, tc.Admin("n1"), map[string]int{"rf": 1})
	host := tc.WaitSpread("rf", 1)[0]
	rest := tc.Others(host)
	front, other := rest[0], rest[1]
	sent := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(other), client.AutoAck), "rf"), "rf-", 10)

	conn := dialVia(t, []string{tc.Node(front).Addrs().Client}, client.Options{ReconnectPolicy: client.ReconnectAll})
	seen := listen(conn)
	s := mustSession(t, conn, client.ClientAck)
	k := mustConsumer(t, ctx, s, "rf")
	before := recvN(t, k, 2)
	// ClientAck acknowledges what was handed out: these two.
	if err := before[1].Ack(); err != nil {
		t.Fatal(err)
	}
	before = append(before, recvN(t, k, 3)...)
	acked, held := bodiesOf(before[:2]), bodiesOf(before[2:])

	tc.Crash(front)
	wait.For(t, 15*time.Second, "the connection to reconnect", func() bool { return conn.Reconnects() == 1 })
	if conn.Node() == front {
		t.Fatalf("reconnected to %s, the node that was killed", front)
	}
	if errs := seen.list(); len(errs) != 1 || !errors.Is(errs[0], client.ErrLostServer) {
		t.Fatalf("exception listener got %v; want one ErrLostServer", errs)
	}

	got := map[string]*client.Message{}
	first := true
	rctx := stepCtx(t, 20*time.Second)
	for len(got) < len(sent)-len(acked) {
		m, err := k.Receive(rctx)
		if err != nil {
			t.Fatalf("after the refresh, %d of %d messages received (%v): %v", len(got), len(sent)-len(acked), keys(got), err)
		}
		b := string(m.Body)
		if slices.Contains(acked, b) {
			t.Fatalf("%q was acknowledged before the refresh and came again", b)
		}
		got[b] = m
		if first {
			first = false
			if err := m.Ack(); !errors.Is(err, client.ErrLostServer) {
				t.Fatalf("first acknowledge after the refresh: %v; want ErrLostServer", err)
			}
			if err := before[4].Ack(); !errors.Is(err, client.ErrLostServer) {
				t.Fatalf("acknowledge of a message handed out before the refresh: %v; want ErrLostServer", err)
			}
		}
	}
	for _, b := range held {
		if m := got[b]; m == nil || !m.Redelivered || m.DeliveryCount < 2 {
			t.Errorf("%q, held unacknowledged across the refresh: %+v; want it again, redelivered", b, m)
		}
	}
	if err := s.Acknowledge(ctx); err != nil {
		t.Fatalf("acknowledge after the first: %v", err)
	}
	waitQueue(t, tc.Admin(other), "rf", 0, 0)
	if errs := seen.list(); len(errs) != 1 {
		t.Errorf("exception listener called %d times; want once: %v", len(errs), errs)
	}
}

// Rules 1, 2 and 3: several connections to one node, each with its own
// policy, lose it together and each does what its policy says, on its own.
// Closed sessions and consumers are not re-created. Then an operator
// destroys a connection: it is told so and does not reconnect.
func TestRefresh_Policies_EachConnectionOnItsOwn(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	createQueues(t, ctx, tc.Admin("n1"), map[string]int{"rp": 1})
	host := tc.WaitSpread("rp", 1)[0]
	front := tc.Others(host)[0]
	addr := []string{tc.Node(front).Addrs().Client}

	type subject struct {
		name     string
		opts     client.Options
		refresh  bool
		conn     *client.Connection
		seen     *exceptions
		consumer *client.Consumer
	}
	subjects := []*subject{
		{name: "none", opts: client.Options{ReconnectPolicy: client.ReconnectNone}},
		{name: "producer", opts: client.Options{}, refresh: true},
		{name: "producer with client id", opts: client.Options{ClientID: "rp-producer"}},
		{name: "all with client id", opts: client.Options{ClientID: "rp-all", ReconnectPolicy: client.ReconnectAll}, refresh: true},
		{name: "all", opts: client.Options{ReconnectPolicy: client.ReconnectAll}, refresh: true},
	}
	for _, sj := range subjects {
		sj.conn = dialVia(t, addr, sj.opts)
		sj.seen = listen(sj.conn)
		sj.consumer = mustConsumer(t, ctx, mustSession(t, sj.conn, client.AutoAck), "rp")
	}
	// Objects the application closed before the loss stay closed.
	all := subjects[4]
	closedSession := mustSession(t, all.conn, client.ClientAck)
	mustConsumer(t, ctx, closedSession, "rp")
	if err := closedSession.Close(); err != nil {
		t.Fatal(err)
	}
	closedConsumer := mustConsumer(t, ctx, mustSession(t, all.conn, client.AutoAck), "rp")
	if err := closedConsumer.Close(); err != nil {
		t.Fatal(err)
	}

	tc.Crash(front)
	for _, sj := range subjects {
		t.Run(sj.name, func(t *testing.T) {
			wait.For(t, 15*time.Second, "the exception listener", func() bool { return len(sj.seen.list()) > 0 })
			if err := sj.seen.list()[0]; !errors.Is(err, client.ErrLostServer) {
				t.Fatalf("exception listener got %v; want ErrLostServer", err)
			}
			if !sj.refresh {
				_, err := sj.conn.Session(client.AutoAck)
				if !errors.Is(err, client.ErrLostServer) {
					t.Fatalf("session on a connection that must not reconnect: %v; want ErrLostServer", err)
				}
				if sj.opts.ClientID != "" && !strings.Contains(err.Error(), "client id") {
					t.Errorf("error %q does not say the client id is why", err)
				}
				if n := sj.conn.Reconnects(); n != 0 {
					t.Fatalf("reconnected %d times", n)
				}
				return
			}
			wait.For(t, 15*time.Second, "a reconnect", func() bool { return sj.conn.Reconnects() == 1 })
			p := mustProducer(t, mustSession(t, sj.conn, client.AutoAck), "rp")
			body := "after the refresh of " + sj.name
			send(t, ctx, p, body)
			_, err := sj.consumer.ReceiveNoWait()
			wantConsumer := sj.opts.ReconnectPolicy == client.ReconnectAll
			if wantConsumer != (err == nil) {
				t.Fatalf("consumer after the refresh: %v; want it re-created: %v", err, wantConsumer)
			}
			if !wantConsumer && !errors.Is(err, client.ErrLostServer) {
				t.Fatalf("consumer under policy producer: %v; want ErrLostServer", err)
			}
		})
	}
	t.Run("closed objects are not re-created", func(t *testing.T) {
		st := connectionOf(t, tc.Admin(all.conn.Node()), all.conn.ID())
		// The first session and its consumer, the session of the closed
		// consumer, and the producer's session opened after the refresh.
		if st.Sessions != 3 || st.Consumers != 1 {
			t.Fatalf("connection after the refresh: %d sessions, %d consumers; want 3 and 1", st.Sessions, st.Consumers)
		}
	})
	t.Run("a destroyed connection does not reconnect", func(t *testing.T) {
		a := tc.Admin(tc.Others(front)[0])
		if err := a.DestroyConnection(ctx, all.conn.ID()); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 10*time.Second, "the exception listener", func() bool { return len(all.seen.list()) == 2 })
		if err := all.seen.list()[1]; !errors.Is(err, client.ErrConnectionDestroyed) || !errors.Is(err, client.ErrLostServer) {
			t.Fatalf("exception listener got %v; want ErrConnectionDestroyed", err)
		}
		if _, err := all.consumer.ReceiveNoWait(); !errors.Is(err, client.ErrConnectionDestroyed) {
			t.Fatalf("consumer of a destroyed connection: %v; want ErrConnectionDestroyed", err)
		}
		if n := all.conn.Reconnects(); n != 1 {
			t.Fatalf("%d reconnects; want the one before the destroy only", n)
		}
		if err := a.DestroyConnection(ctx, "n9-abcdef"); !errors.Is(err, client.ErrUnknownConnection) {
			t.Fatalf("destroy of an unknown connection: %v; want ErrUnknownConnection", err)
		}
	})
}

// connectionOf finds a connection in the cluster's list.
func connectionOf(t *testing.T, a *client.Admin, id string) client.ConnectionInfo {
	t.Helper()
	conns, unreachable, err := a.Connections(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("connection %s not listed (%d listed, unreachable %v)", id, len(conns), unreachable)
	return client.ConnectionInfo{}
}

// Rules 4, 7 and 8: while the connection reconnects (its only node is
// down), ReceiveNoWait fails at once, ReceiveTimeout(d) waits at most d,
// Receive and Send at most the reconnect blocking time, each with
// ErrLostServer, and a listener waits. A connection whose reconnect period
// runs out ends, and its exception listener hears it. Once the node is back
// the others go on; a listener is never called after its connection closed.
func TestRefresh_ReceiveWhileReconnecting(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 1)
	ctx := testCtx(t)
	createQueues(t, ctx, tc.Admin("n1"), map[string]int{"rw": 0})
	conn := dialVia(t, []string{tc.Node("n1").Addrs().Client}, client.Options{ReconnectPolicy: client.ReconnectAll, ReconnectBlockingTime: time.Second})
	k := mustConsumer(t, ctx, mustSession(t, conn, client.AutoAck), "rw")
	prod := mustProducer(t, mustSession(t, conn, client.AutoAck), "rw")
	// A connection that gives up after 2 s: its listener hears the loss,
	// then the end.
	short := dialVia(t, []string{tc.Node("n1").Addrs().Client}, client.Options{ReconnectPolicy: client.ReconnectAll, TotalReconnectPeriod: 2 * time.Second})
	shortSeen := listen(short)
	shortK := mustConsumer(t, ctx, mustSession(t, short, client.AutoAck), "rw")
	var heard atomic.Int64
	lk := mustConsumer(t, ctx, mustSession(t, conn, client.AutoAck), "rw")
	if err := lk.SetListener(func(*client.Message) { heard.Add(1) }); err != nil {
		t.Fatal(err)
	}

	tc.Stop("n1")
	wait.For(t, 10*time.Second, "the loss of n1", func() bool {
		_, err := k.ReceiveNoWait()
		return errors.Is(err, client.ErrLostServer)
	})
	within := func(what string, bound time.Duration, f func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if !errors.Is(err, client.ErrLostServer) {
				t.Fatalf("%s while reconnecting: %v; want ErrLostServer", what, err)
			}
		case <-time.After(bound):
			t.Fatalf("%s while reconnecting did not return within %v", what, bound)
		}
	}
	within("ReceiveTimeout(200ms)", 5*time.Second, func() error { _, err := k.ReceiveTimeout(200 * time.Millisecond); return err })
	// Bounded by the blocking time (1 s), not by d.
	within("ReceiveTimeout(1m)", 20*time.Second, func() error { _, err := k.ReceiveTimeout(time.Minute); return err })
	within("Receive", 20*time.Second, func() error { _, err := k.Receive(context.Background()); return err })
	within("Send", 20*time.Second, func() error {
		_, err := prod.Send(context.Background(), &client.Message{Body: []byte("while reconnecting")})
		if err != nil && !strings.Contains(err.Error(), "was not sent") {
			t.Errorf("send while reconnecting: %v; want it to say the message was not sent", err)
		}
		return err
	})
	wait.For(t, 20*time.Second, "the short connection to give up", func() bool { return len(shortSeen.list()) == 2 })
	if _, err := shortK.ReceiveNoWait(); !errors.Is(err, client.ErrLostServer) || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("consumer of a connection that gave up: %v; want ErrLostServer saying it gave up", err)
	}

	tc.Start("n1")
	wait.For(t, 30*time.Second, "a reconnect", func() bool { return conn.Reconnects() == 1 })
	p := mustProducer(t, mustSession(t, dialVia(t, []string{tc.Node("n1").Addrs().Client}, client.Options{}), client.AutoAck), "rw")
	// The two consumers share the queue: keep sending until each has had
	// messages, the listener's through its refreshed consumer.
	gotSync := 0
	wait.For(tc.t, 20*time.Second, "both consumers receiving after the reconnect", func() bool {
		send(t, ctx, p, "after")
		if m, err := k.ReceiveTimeout(50 * time.Millisecond); err == nil && m != nil {
			gotSync++
		}
		return gotSync > 0 && heard.Load() > 0
	})

	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	after := heard.Load()
	sendN(t, ctx, p, "closed-", 5)
	wait.Holds(t, 500*time.Millisecond, "no listener call after Close", func() bool { return heard.Load() == after })
}

// clientProxy puts a toxiproxy in front of a node's client address; cut
// stops every byte both ways without closing anything, as a pulled cable
// does.
type clientProxy struct{ p *toxiproxy.Proxy }

func newClientProxy(t *testing.T, upstream string) *clientProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "client-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &clientProxy{p}
}

func (cp *clientProxy) addr() string { return cp.p.Listen }

func (cp *clientProxy) cut(t *testing.T) {
	t.Helper()
	cp.cutOneWay(t, "upstream")
	cp.cutOneWay(t, "downstream")
}

// cutOneWay stops the bytes of one direction: upstream (client to node) or
// downstream (node to client).
func (cp *clientProxy) cutOneWay(t *testing.T, dir string) {
	t.Helper()
	spec := fmt.Sprintf(`{"name":"cut-%s","type":"timeout","stream":"%s","attributes":{"timeout":0}}`, dir, dir)
	if _, err := cp.p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		t.Fatal(err)
	}
}

// Rules 6 and 9: a consumer of a distributed queue cut off from its
// front-end (the node stays up) is re-pinned on another node, to the member
// the router there prefers: that node's own, not the one it had. The node
// it was cut from notices the silence and releases what the session held,
// which comes again, marked redelivered.
func TestRefresh_CutOff_DistributedConsumerRepinned(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	createQueues(t, ctx, tc.Admin("n1"), map[string]int{"rd": 3})
	hosts := tc.WaitSpread("rd", 3)
	front := "n1"
	proxy := newClientProxy(t, tc.Node(front).Addrs().Client)
	conn := dialVia(t, []string{proxy.addr()}, client.Options{ReconnectPolicy: client.ReconnectAll})
	s := mustSession(t, conn, client.ClientAck)
	k := mustConsumer(t, ctx, s, "rd", client.WithPrefetch(4))
	pinned := k.Member()
	if hosts[memberIndex(t, pinned)] != front {
		t.Fatalf("consumer through %s pinned to %s, hosted on %s; want the front-end's own member", front, pinned, hosts[memberIndex(t, pinned)])
	}
	p := mustProducer(t, mustSession(t, tc.Dial(front), client.AutoAck), pinned)
	// An election in the member's group on a loaded machine would end a
	// send without a dedup id in ErrDeliveryUnknown; this one is resent.
	p.SetIdempotent(true)
	sent := sendN(t, ctx, p, "rd-", 6)
	held := recvN(t, k, 2)
	sameSet(t, "held", bodiesOf(held), sent[:2])

	proxy.cut(t)
	wait.For(t, 15*time.Second, "a reconnect", func() bool { return conn.Reconnects() == 1 })
	if conn.Node() == front {
		t.Fatalf("reconnected to %s, the node it was cut off from", front)
	}
	repinned := k.Member()
	if repinned == pinned || hosts[memberIndex(t, repinned)] != conn.Node() {
		t.Fatalf("consumer re-pinned to %s (hosted on %s) through %s; want %s's own member, not %s", repinned, hosts[memberIndex(t, repinned)], conn.Node(), conn.Node(), pinned)
	}
	// The messages of the old member, held ones included, wait there: the
	// cut-off node released the session, so another consumer of that
	// member gets all of them, the held ones marked redelivered.
	s2 := mustSession(t, tc.Dial(front), client.ClientAck)
	k2 := mustConsumer(t, ctx, s2, pinned)
	rctx := stepCtx(t, 20*time.Second)
	got := map[string]*client.Message{}
	for len(got) < len(sent) {
		m, err := k2.Receive(rctx)
		if err != nil {
			t.Fatalf("%d of %d messages of %s received again (%v): %v", len(got), len(sent), pinned, keys(got), err)
		}
		got[string(m.Body)] = m
	}
	for _, b := range bodiesOf(held) {
		if !got[b].Redelivered {
			t.Errorf("%q was held across the cut and came again unmarked", b)
		}
	}
	if err := s2.Acknowledge(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range held {
		if err := m.Ack(); !errors.Is(err, client.ErrLostServer) {
			t.Fatalf("ack of %q, handed out before the refresh: %v; want ErrLostServer", m.Body, err)
		}
	}
}

func memberIndex(t *testing.T, member string) int {
	t.Helper()
	var name string
	var i int
	if _, err := fmt.Sscanf(strings.Replace(member, "#", " ", 1), "%s %d", &name, &i); err != nil {
		t.Fatalf("member %q: %v", member, err)
	}
	return i
}

// Rule 10: sends in flight when the front-end dies. With dedup ids every
// send ends with a definite answer after the refresh, and no message is
// stored twice: the resend goes, through another node, to the member its
// dedup id names. Without, a send cut off mid-request says
// ErrDeliveryUnknown, never a false failure or success.
func TestRefresh_SendsInFlightWhenTheFrontEndDies(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	createQueues(t, ctx, tc.Admin("n1"), map[string]int{"rs": 3})
	tc.WaitSpread("rs", 3)
	front := "n1"
	type result struct {
		idempotent bool
		body       string
		receipt    client.Receipt
		err        error
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, idempotent := range []bool{true, true, false, false} {
		conn := dialVia(t, []string{tc.Node(front).Addrs().Client}, client.Options{})
		p := mustProducer(t, mustSession(t, conn, client.AutoAck), "rs")
		p.SetIdempotent(idempotent)
		wg.Go(func() {
			for n := 0; n < 2000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("p%d-%d", i, n)
				sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				r, err := p.Send(sctx, &client.Message{Body: []byte(body)})
				cancel()
				mu.Lock()
				results = append(results, result{idempotent, body, r, err})
				mu.Unlock()
			}
		})
	}
	wait.For(t, 10*time.Second, "sends under way", func() bool { mu.Lock(); defer mu.Unlock(); return len(results) > 40 })
	tc.Crash(front)
	// Sends go on through the refreshed connections, then stop.
	sentAfter := func() int { mu.Lock(); defer mu.Unlock(); return len(results) }
	mark := sentAfter()
	wait.For(t, 30*time.Second, "sends after the refresh", func() bool { return sentAfter() > mark+40 })
	close(stop)
	wg.Wait()

	okBodies := map[string]bool{}
	unknown := map[string]bool{}
	for _, r := range results {
		switch {
		case r.err == nil:
			okBodies[r.body] = true
		case r.idempotent:
			t.Errorf("idempotent send %q: %v; want a definite answer", r.body, r.err)
		case errors.Is(r.err, client.ErrDeliveryUnknown):
			unknown[r.body] = true
		default:
			t.Errorf("send %q: %v; want ok or ErrDeliveryUnknown", r.body, r.err)
		}
	}
	t.Logf("%d sends: %d ok, %d unknown", len(results), len(okBodies), len(unknown))

	// Every ok message is there once; an unknown one at most once.
	s := mustSession(t, tc.Dial(tc.Others(front)[0]), client.AutoAck)
	got := bodiesOf(drainUntil(t, s, "rs", 3, func(got []*client.Message) bool {
		n := 0
		for _, m := range got {
			if okBodies[string(m.Body)] {
				n++
			}
		}
		return n >= len(okBodies)
	}))
	count := map[string]int{}
	for _, b := range got {
		count[b]++
	}
	for b := range okBodies {
		if count[b] != 1 {
			t.Errorf("%q was sent ok and is stored %d times", b, count[b])
		}
	}
	for b, n := range count {
		if !okBodies[b] && !unknown[b] {
			t.Errorf("%q is stored (%d times) but its send failed", b, n)
		}
		if n > 1 {
			t.Errorf("%q is stored %d times", b, n)
		}
	}
}
