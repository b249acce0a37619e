package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/destination"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// Distributed destinations: how a send to a queue's members behaves when a
// member's host is cut off or dies.

// A send to a plain queue name whose chosen member is known not to take it
// (its host cut off: the forward cannot be opened, no leader can be found,
// gossip holds the host dead) is given to another member, transparently.
//
// The queue has two members of one replica each, on two of the three
// nodes; the third, F, hosts neither and is the front-end. The member
// hosted on X starts empty and the other holds messages, so F's router
// prefers X's member (the least pending, neither has consumers). Then X is
// cut off and F sends 20 messages to the plain name: the first goes to X's
// member first (F still knows X as its host and gossip still holds X
// alive), and without the retry it would fail after the routing window.
// Every send succeeds, on the other member.
func TestDD_PartitionedMemberSendsGoElsewhere(t *testing.T) {
	t.Parallel()
	const queue, warm, n = "ddp", 10, 20
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, queue, client.QueueOptions{Members: 2, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	hosts := []string{tc.WaitHost(queue + "#0"), tc.WaitHost(queue + "#1")}
	if hosts[0] == hosts[1] {
		t.Fatalf("both members of %s hosted on %s", queue, hosts[0])
	}
	f := tc.Others(hosts...)[0]
	front := tc.Node(f)
	d, ok := front.meta.Destination(queue)
	if !ok || len(d.Members) != 2 {
		t.Fatalf("%s as %s sees it: %+v", queue, f, d)
	}
	for i, m := range d.Members {
		if len(m.Replicas) != 1 || m.Replicas[0] != hosts[i] {
			t.Fatalf("member %d placed on %v; want only %s", i, m.Replicas, hosts[i])
		}
	}
	xi, oi := 0, 1 // X's member, the other member
	x, o := hosts[xi], hosts[oi]
	xm, om := fmt.Sprintf("%s#%d", queue, xi), fmt.Sprintf("%s#%d", queue, oi)
	t.Logf("front-end %s; %s hosted by %s (to be cut off), %s by %s", f, xm, x, om, o)

	c := tc.Dial(f)
	sendN(t, ctx, mustProducer(t, mustSession(t, c, client.AutoAck), om), "warm-", warm)

	// F's router sees both members available, X's empty and the other
	// holding the warm-up messages: it chooses X's member.
	wait.For(tc.t, 10*time.Second, f+"'s router seeing "+xm+" on "+x+" empty and "+om+" holding "+fmt.Sprint(warm), func() bool {
		cs := front.candidates(d)
		return cs[xi].Available && cs[xi].Pending == 0 && cs[oi].Available && cs[oi].Pending == warm
	})
	// No refresh of the loads may be in flight when X is cut off: one
	// that fails forgets X as the member's host before the first send.
	wait.For(tc.t, 5*time.Second, "no load refresh in flight on "+f, func() bool {
		front.loads.mu.Lock()
		defer front.loads.mu.Unlock()
		return !front.loads.m[xm].refreshing && !front.loads.m[om].refreshing
	})

	tc.Isolate(x)
	cut := time.Now()
	// What the router will see for the first send (read without asking
	// the router, which would refresh the loads).
	front.loads.mu.Lock()
	xPending, oPending := front.loads.m[xm].st.pending, front.loads.m[om].st.pending
	front.loads.mu.Unlock()
	if leader, alive := front.hostCache.get(xm), front.gossip.alive(x); leader != x || !alive || xPending != 0 || oPending != warm {
		t.Fatalf("just after cutting %s off, %s's router does not prefer %s: its host %q (want %s), %s alive %v, pending %d and %d (want 0 and %d)",
			x, f, xm, leader, x, x, alive, xPending, oPending, warm)
	}

	p := mustProducer(t, mustSession(t, c, client.AutoAck), queue)
	for i := range n {
		body := fmt.Sprint("cut-", i)
		sctx, cancel := context.WithTimeout(context.Background(), destination.RouteWindow+10*time.Second)
		start := time.Now()
		r, err := p.Send(sctx, &client.Message{Body: []byte(body)})
		cancel()
		if err != nil {
			t.Fatalf("send %d to %s through %s, %v after cutting %s off, failed after %v: %v", i, queue, f, start.Sub(cut).Round(time.Millisecond), x, time.Since(start).Round(time.Millisecond), err)
		}
		if r.Member != om {
			t.Fatalf("send %d to %s went to %s; want %s (%s is cut off)", i, queue, r.Member, om, xm)
		}
		if i == 0 {
			t.Logf("the first send, routed to %s first, succeeded on %s after %v", xm, r.Member, time.Since(start).Round(time.Millisecond))
		}
	}
	t.Logf("%d sends through %s with %s cut off took %v", n, f, x, time.Since(cut).Round(time.Millisecond))
	if r, ok := tc.Node(o).groups.replica(om); !ok {
		t.Fatalf("%s has no replica of %s", o, om)
	} else if st := r.Stats(); st.Pending != warm+n {
		t.Fatalf("%s on %s holds %d pending; want %d", om, o, st.Pending, warm+n)
	}

	tc.Rejoin(x)
	wait.Until(tc.t, 30*time.Second, "the counts of "+queue+" after "+x+" is back", func() string { return tc.counts(queue, warm+n, 0) })
	a := tc.Admin(f)
	wait.For(tc.t, 30*time.Second, f+" showing "+xm+" empty on "+x+" and "+om+" holding every message", func() bool {
		q, err := a.ShowQueue(ctx, queue)
		return err == nil && len(q.Members) == 2 &&
			q.Members[xi].Host == x && q.Members[xi].Pending == 0 && q.Members[xi].Delivered == 0 &&
			q.Members[oi].Host == o && q.Members[oi].Pending == warm+n && q.Members[oi].Delivered == 0
	})
}

// ddSenders is the number of concurrent senders of the host-kill tests.
const ddSenders = 4

// ddSend is one send of a host-kill test and what it was told.
type ddSend struct {
	sender int
	body   string
	id     string
	r      client.Receipt
	err    error
	// afterCrash: the send started after the crash had finished.
	afterCrash bool
}

// ddRun is what a host-kill scenario did and was told.
type ddRun struct {
	tc    *TestCluster
	f, h  string // the senders' front-end, the crashed host of queue#0
	sends []ddSend
	hist  *recorder
	// resent is closed if some node resent a send of unknown outcome.
	resent chan struct{}
	// crashes is how many times H was crashed.
	crashes int
	// elections is how many terms queue#0's group went through while the
	// senders ran, as F's replica counts them: the crashes' elections, and
	// any other a loaded machine brings (each can leave one send per
	// sender of unknown outcome).
	elections uint64
}

// ddMaxCrashes bounds the crashes of a host-kill scenario that waits for
// its fault to land.
const ddMaxCrashes = 3

// ddHostKill runs the host-kill scenario: a 3-node cluster with a queue of
// three members (three replicas each), each hosted by its preferred node;
// from a front-end F that is not the host H of member #0, ddSenders
// producers (idempotent or not) send to queue#0, each one message at a time
// with a unique body, recording every outcome in the history; H is crashed
// once 40 sends succeeded, and the senders stop once 8 sends started after
// the crash succeeded (the new host took over). With direct, the senders
// send straight to H once F named it (client/direct.go), falling back to F
// when H is lost; without, every send goes through F, which forwards it.
//
// With landed, which says whether the sends so far show what the test is
// about, a crash that did not land is followed by another, at most
// ddMaxCrashes in all: the senders pause, H starts again with its data and
// hosts #0 again, and the round begins anew. Without, H is crashed once.
func ddHostKill(t *testing.T, queue string, idempotent, direct bool, landed func([]ddSend) bool) *ddRun {
	t.Helper()
	watch := &logWatch{msg: "resending a send of unknown outcome; the member's dedup window drops a second copy", seen: make(chan struct{})}
	tc := NewTestCluster(t, 3, func(c *Config) {
		if c.Logger == nil { // nil unless CAIRN_TEST_LOGS sends the logs to the test log
			c.Logger = slog.New(watch)
		}
	})
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, queue, client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	hosts := tc.WaitSpread(queue, 3)
	h, f := hosts[0], hosts[1]
	target := queue + "#0"
	t.Logf("%s hosted by %s (to be crashed); senders on %s", target, h, f)

	fr, ok := tc.Node(f).groups.replica(target)
	if !ok {
		t.Fatalf("%s has no replica of %s", f, target)
	}
	term := fr.Raft().CurrentTerm()
	hist := newRecorder("receive")
	var sends []ddSend
	c := tc.Dial(f, func(o *client.Options) { o.NoDirectSends = !direct })
	var (
		mu                sync.Mutex
		stop, crashed     atomic.Bool
		okBefore, okAfter atomic.Int64
		wg                sync.WaitGroup
		// gate pauses the senders between crashes: each send holds it
		// for reading.
		gate   sync.RWMutex
		paused bool
	)
	defer func() {
		if paused { // a failure between crashes: the senders must end
			gate.Unlock()
		}
	}()
	const maxSends = 5000 // per sender
	runCtx := stepCtx(t, 3*time.Minute)
	for s := range ddSenders {
		p := mustProducer(t, mustSession(t, c, client.AutoAck), target)
		p.SetIdempotent(idempotent)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < maxSends && !stop.Load() && runCtx.Err() == nil; k++ {
				gate.RLock()
				after := crashed.Load()
				body := fmt.Sprintf("%s/s%d/%d", queue, s, k)
				m := &client.Message{ID: body, Body: []byte(body)}
				sctx, cancel := context.WithTimeout(runCtx, destination.RouteWindow+20*time.Second)
				r, err := p.Send(sctx, m)
				cancel()
				hist.Sending(body)
				hist.Sent(body, err)
				mu.Lock()
				sends = append(sends, ddSend{sender: s, body: string(m.Body), id: m.ID, r: r, err: err, afterCrash: after})
				mu.Unlock()
				switch {
				case err != nil:
				case after:
					okAfter.Add(1)
				default:
					okBefore.Add(1)
				}
				gate.RUnlock()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	// Registered after dial's, so it runs before the connection closes.
	t.Cleanup(func() { stop.Store(true); <-finished })

	crashes := 0
	for {
		// Every replica has heard of its group's current term before the
		// crash: a heartbeat with a newer term reaching H while it shuts
		// down makes Raft write its term, on the transport's goroutine
		// that Shutdown does not wait for, to a store already closed, and
		// the process exits. Sending direct, the senders' send link to H
		// is up, so the crash cuts sends in flight on it.
		wait.Until(tc.t, 30*time.Second, "40 sends to "+target+" succeeded, every group's replicas at one term", func() string {
			if n := okBefore.Load(); n < 40 {
				return fmt.Sprintf("%d sends succeeded", n)
			}
			if direct && len(tc.Node(h).conns.List()) == 0 {
				return "no send link to " + h
			}
			return ddTermsAgree(tc, queue, 3)
		})
		start := time.Now()
		tc.Crash(h)
		crashed.Store(true)
		crashes++
		t.Logf("crash %d: %s crashed in %v", crashes, h, time.Since(start).Round(time.Millisecond))
		wait.For(tc.t, 30*time.Second, "8 sends started after the crash succeeded", func() bool { return okAfter.Load() >= 8 })
		t.Logf("crash %d: the first 8 sends started after the crash succeeded %v after it finished", crashes, time.Since(start).Round(time.Millisecond))
		if landed == nil || crashes == ddMaxCrashes {
			break
		}
		gate.Lock()
		paused = true
		done := landed(sends)
		if done {
			gate.Unlock()
			paused = false
			break
		}
		t.Logf("crash %d did not land (no send in flight showed the path under test); %s starts again and is crashed once more", crashes, h)
		tc.Start(h)
		tc.WaitSpread(queue, 3)
		okBefore.Store(0)
		okAfter.Store(0)
		crashed.Store(false)
		gate.Unlock()
		paused = false
	}
	stop.Store(true)
	select {
	case <-finished:
	case <-time.After(destination.RouteWindow + 30*time.Second):
		t.Fatal("the senders did not finish")
	}
	mu.Lock()
	defer mu.Unlock()
	return &ddRun{tc: tc, f: f, h: h, sends: sends, hist: hist, resent: watch.seen, crashes: crashes, elections: fr.Raft().CurrentTerm() - term}
}

// ddTermsAgree explains which of the meta group and a destination's member
// groups have replicas at different terms ("" when none has).
func ddTermsAgree(tc *TestCluster, dest string, members int) string {
	terms := map[string]map[uint64][]string{} // group -> term -> nodes
	add := func(group, node string, term uint64) {
		if terms[group] == nil {
			terms[group] = map[uint64][]string{}
		}
		terms[group][term] = append(terms[group][term], node)
	}
	for _, nd := range tc.nodes {
		if nd == nil {
			continue
		}
		add(metagroup.ID, nd.ID(), nd.meta.Raft().CurrentTerm())
		for i := range members {
			name := fmt.Sprintf("%s#%d", dest, i)
			if r, ok := nd.groups.replica(name); ok {
				add(name, nd.ID(), r.Raft().CurrentTerm())
			}
		}
	}
	var out []string
	for group, byTerm := range terms {
		if len(byTerm) > 1 {
			out = append(out, fmt.Sprintf("%s at terms %v", group, byTerm))
		}
	}
	return strings.Join(out, "; ")
}

// ddDrain brings the crashed host back, waits until the members are hosted
// by their preferred nodes again, and drains queue#0 through node f with an
// IndividualAck consumer, recording every delivery and ack in hist.
//
// Leadership can still move while draining on a loaded machine, and an ack
// then fails with its outcome unknown: such a message is either gone or
// still held by the session. A Recover hands back what the session still
// holds (marked redelivered, as hist checks, which counts an ack that
// failed as done or not).
func ddDrain(t *testing.T, tc *TestCluster, f, h, queue string, hist *recorder) {
	t.Helper()
	tc.Start(h)
	tc.WaitSpread(queue, 3)
	target := queue + "#0"
	ctx := stepCtx(t, 90*time.Second)
	c := tc.Dial(f)
	s := mustSession(t, c, client.IndividualAck)
	k := mustConsumer(t, ctx, s, target)
	a := tc.Admin(f)
	bound := 2*hist.Attempted() + 10
	uncertain := map[string]bool{} // bodies whose ack's outcome is unknown
	recovers, reattached := 0, 0
	deadline := time.Now().Add(60 * time.Second)
	for got := 0; ; {
		m, err := k.ReceiveTimeout(200 * time.Millisecond)
		if err != nil {
			// The session's held messages come back, marked, to the next.
			if reattached++; reattached > 3 {
				t.Fatalf("receive from %s after %d messages: %v", target, got, err)
			}
			t.Logf("receive from %s after %d messages: %v; closing the session and attaching a new consumer", target, got, err)
			_ = s.Close()
			s = mustSession(t, c, client.IndividualAck)
			k = mustConsumer(t, ctx, s, target)
			continue
		}
		if m != nil {
			if got++; got > bound {
				t.Fatalf("more than %d deliveries draining %s", bound, target)
			}
			hist.delivered(m)
			if err := hist.ack(m); err != nil {
				t.Logf("ack of %q while draining: %v", m.Body, err)
				uncertain[string(m.Body)] = true
			}
			continue
		}
		q := showQueue(t, a, queue)
		if q.Members[0].Pending == 0 && q.Members[0].Delivered == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not drained after %d deliveries: %+v", target, got, q.Members[0])
		}
		if q.Members[0].Pending == 0 && len(uncertain) > 0 && recovers < 10 {
			recovers++
			if err := s.Recover(ctx); err != nil {
				t.Logf("recover: %v", err)
			}
		}
	}
}

// The host of a member is killed while producers that are not idempotent
// send to it through another front-end, which forwards every send (none
// goes straight to the host: the forwarding is the subject; a sender
// whose direct send is lost may have its next one forwarded into the same
// crash). Only the sends in flight at that moment may end with
// ErrDeliveryUnknown (at most one per sender, unless the loaded machine
// brings the member's group more elections), each
// naming its message id and member; they are never resent. No other error
// but ErrUnavailable (not sent) is allowed, and the new host takes the
// sends that follow. Once everything is drained: every send that returned
// ok is received exactly once, no send that failed with ErrUnavailable is
// ever received, and no message is received twice.
func TestDD_HostKilledMidRequest_UnknownOnlyForInFlight(t *testing.T) {
	t.Parallel()
	const queue = "ddu"
	run := ddHostKill(t, queue, false, false, nil)
	sends, hist := run.sends, run.hist
	target := queue + "#0"
	var ok, unavailable, unknownBefore, unknownAfter int
	for _, s := range sends {
		switch {
		case s.err == nil:
			ok++
			if s.r.Member != target || s.r.ID != s.id || s.r.Duplicate {
				t.Errorf("send %q: receipt %+v; want member %s, id %s, not a duplicate", s.body, s.r, target, s.id)
			}
		case errors.Is(s.err, client.ErrDeliveryUnknown):
			if s.afterCrash {
				unknownAfter++
			} else {
				unknownBefore++
			}
			if msg := s.err.Error(); !strings.Contains(msg, s.id) || !strings.Contains(msg, target) {
				t.Errorf("send %q (id %s): the unknown outcome does not name its message id and member %s: %v", s.body, s.id, target, s.err)
			}
			if strings.Contains(s.err.Error(), "resending") {
				t.Errorf("send %q without a dedup id was resent: %v", s.body, s.err)
			}
			t.Logf("sender %d, send %q (started after the crash: %v): %v", s.sender, s.body, s.afterCrash, s.err)
		case errors.Is(s.err, client.ErrUnavailable):
			unavailable++
			t.Logf("sender %d, send %q (started after the crash: %v): %v", s.sender, s.body, s.afterCrash, s.err)
		default:
			t.Errorf("sender %d, send %q (started after the crash: %v): %v; want ok, ErrDeliveryUnknown or ErrUnavailable", s.sender, s.body, s.afterCrash, s.err)
		}
	}
	t.Logf("%d sends: %d ok, %d unknown started before the crash finished, %d after it, %d unavailable; %d elections of %s",
		len(sends), ok, unknownBefore, unknownAfter, unavailable, run.elections, target)
	if run.elections == 0 {
		t.Errorf("%s went through no election though its host crashed", target)
	}
	// Each sender has one send at a time in flight, so each loss of the
	// host (the crash, or an election a loaded machine brings) leaves at
	// most ddSenders sends of unknown outcome: ddSenders in all unless
	// the group had elections besides the crash's.
	if unknown := unknownBefore + unknownAfter; uint64(unknown) > ddSenders*run.elections {
		t.Errorf("%d sends of unknown outcome from %d senders sending one at a time, through %d elections of %s: some were not in flight when the host was lost",
			unknown, ddSenders, run.elections, target)
	}
	if t.Failed() {
		t.FailNow()
	}

	ddDrain(t, run.tc, run.f, run.h, queue, hist)
	hist.check(t)
	stored := 0
	for _, s := range sends {
		if errors.Is(s.err, client.ErrDeliveryUnknown) && hist.receivedTimes(s.body) > 0 {
			stored++
		}
	}
	t.Logf("history: %s; %d of the unknown sends had been stored", hist.Stats(), stored)
}

// The same, with idempotent producers (every message carries its id as a
// dedup id) that send straight to the host: a send in flight when the host
// dies is resent through the front-end to the same member, whose
// replicated dedup window drops a second copy. No send fails, none is of
// unknown outcome, and each message is received exactly once.
//
// A crash lands when a send in flight had been stored and its resend was
// dropped (its receipt marked duplicate); without one, "no duplicates" was
// not tested, and the host is crashed again, up to ddMaxCrashes times.
func TestDD_HostKilledMidRequest_IdempotentNoUnknownsNoDuplicates(t *testing.T) {
	t.Parallel()
	const queue = "ddi"
	duplicate := func(s ddSend) bool { return s.err == nil && s.r.Duplicate }
	run := ddHostKill(t, queue, true, true, func(sends []ddSend) bool { return slices.ContainsFunc(sends, duplicate) })
	sends, hist := run.sends, run.hist
	target := queue + "#0"
	dups := 0
	for _, s := range sends {
		switch {
		case errors.Is(s.err, client.ErrDeliveryUnknown):
			t.Errorf("sender %d, idempotent send %q (started after the crash: %v): %v; want no unknown outcome", s.sender, s.body, s.afterCrash, s.err)
		case s.err != nil:
			t.Errorf("sender %d, idempotent send %q (started after the crash: %v): %v", s.sender, s.body, s.afterCrash, s.err)
		case s.r.Member != target || s.r.ID != s.id:
			t.Errorf("send %q: receipt %+v; want member %s, id %s", s.body, s.r, target, s.id)
		case s.r.Duplicate:
			dups++
			t.Logf("sender %d, send %q (id %s, started after the crash: %v): a duplicate; its first copy had been stored", s.sender, s.body, s.id, s.afterCrash)
		}
	}
	resent := "no node resent a send of unknown outcome (the client resent them, or the logs go to the test log)"
	select {
	case <-run.resent:
		resent = "a node resent sends of unknown outcome"
	default:
	}
	t.Logf("%d sends through %d crashes; %s; %d receipts marked duplicate (resent copies whose first copy had been stored); %d elections of %s",
		len(sends), run.crashes, resent, dups, run.elections, target)
	if dups == 0 {
		t.Errorf("the test did not test that: in %d crashes of %s, no send in flight had been stored and resent (no receipt marked duplicate)", run.crashes, run.h)
	}
	if t.Failed() {
		t.FailNow()
	}

	ddDrain(t, run.tc, run.f, run.h, queue, hist)
	hist.check(t)
	for _, s := range sends {
		if n := hist.receivedTimes(s.body); n != 1 {
			t.Errorf("%q received %d times; want once", s.body, n)
		}
	}
	t.Logf("history: %s", hist.Stats())
}
