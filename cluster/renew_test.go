package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
)

// renewedTo explains how queue name, on node id, differs from members
// members placed with r replicas each, none renewing, draining or spare,
// each group's Raft configuration on its host following its placement
// ("" when it does not).
func renewedTo(tc *TestCluster, id, name string, members, r int) string {
	d, ok := tc.Node(id).meta.Destination(name)
	switch {
	case !ok:
		return "no destination " + name
	case int(d.Replicas) != r || len(d.Members) != members || d.Spare:
		return fmt.Sprintf("replicas %d, %d members, spare %v", d.Replicas, len(d.Members), d.Spare)
	}
	for _, p := range d.Members {
		mn := fsm.MemberName(name, p.Index)
		if len(p.Replicas) != r || p.Draining || p.Renewing {
			return fmt.Sprintf("%s on %v, draining %v, renewing %v", mn, p.Replicas, p.Draining, p.Renewing)
		}
		host := tc.HostOf(mn)
		if host == "" {
			return mn + " has no host"
		}
		rep, ok := tc.Node(host).groups.replica(mn)
		if !ok {
			return mn + ": no replica on its host " + host
		}
		if got := configuration(rep.Raft()); !slices.Equal(got, sorted(p.Replicas)) {
			return fmt.Sprintf("%s: Raft configuration %v, placement %v", mn, got, p.Replicas)
		}
	}
	return ""
}

// `queue update --replicas`: 3 → 1 → 3 on a queue of three members while
// a consumer takes messages and a producer sends; then 1 → 2 on a queue
// of one member, through a spare. Every message comes once, none marked
// redelivered but the one recovered on purpose, and the consumer pinned
// to a renewed member carries on.
func TestDD_UpdateReplicas_RenewsMembersAndLosesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("three nodes, seven renewals")
	}
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	a := tc.Admin("n1")
	if _, err := a.CreateQueue(ctx, "rr", client.QueueOptions{Members: 3, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	hosts := tc.WaitSpread("rr", 3)

	// A consumer on n1, pinned to the member n1 hosts, acknowledging as
	// it goes. Its session recovered once, so its client ignores that
	// member's deliveries numbered below the recover's: the renewed member
	// numbers on from the old one.
	cs := mustSession(t, tc.Dial("n1"), client.ClientAck)
	k := mustConsumer(t, ctx, cs, "rr")
	mine := fmt.Sprintf("rr#%d", slices.Index(hosts, "n1"))
	send(t, ctx, mustProducer(t, cs, mine), "recovered")
	if m := recv(t, k); string(m.Body) != "recovered" {
		t.Fatalf("got %q; want recovered", m.Body)
	}
	if err := cs.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, k); string(m.Body) != "recovered" || !m.Redelivered {
		t.Fatalf("after recover got %q, redelivered %v; want recovered, redelivered", m.Body, m.Redelivered)
	}
	if err := cs.Acknowledge(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var consumerErr error
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := k.ReceiveTimeout(100 * time.Millisecond)
			mu.Lock()
			switch {
			case err != nil:
				consumerErr = err
			case m != nil:
				got = append(got, string(m.Body))
				if m.Redelivered {
					consumerErr = fmt.Errorf("%q came marked redelivered", m.Body)
				} else if err := cs.Acknowledge(context.Background()); err != nil {
					consumerErr = err
				}
			}
			failed := consumerErr != nil
			mu.Unlock()
			if failed {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	p := mustProducer(t, mustSession(t, tc.Dial("n2"), client.AutoAck), "rr")
	sent := sendN(t, ctx, p, "before-", 30)

	for _, r := range []int{1, 3} {
		info, err := tc.Admin("n3").UpdateQueueWith(ctx, "rr", client.QueueUpdate{Replicas: r})
		if err != nil {
			t.Fatalf("update to %d replicas: %v", r, err)
		}
		if info.Replicas != r {
			t.Fatalf("the update's answer shows %d replicas; want %d", info.Replicas, r)
		}
		sent = append(sent, sendN(t, ctx, p, fmt.Sprintf("during-%d-", r), 20)...)
		wait.Until(tc.t, 60*time.Second, fmt.Sprintf("rr renewed to %d replicas", r), func() string { return renewedTo(tc, "n2", "rr", 3, r) })
		// Renewal keeps each member's preferred host.
		if now := tc.WaitSpread("rr", 3); !slices.Equal(now, hosts) {
			t.Errorf("after renewing to %d replicas the hosts are %v; were %v", r, now, hosts)
		}
	}
	// The consumer still takes what is sent to its member.
	if k.Member() != mine {
		t.Fatalf("consumer pinned to %s; want %s", k.Member(), mine)
	}
	sent = append(sent, sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n2"), client.AutoAck), mine), "after-", 5)...)
	wait.Until(tc.t, 20*time.Second, "the consumer receiving what was sent to "+mine+" after the renewals", func() string {
		mu.Lock()
		defer mu.Unlock()
		if consumerErr != nil {
			return "consumer ended: " + consumerErr.Error()
		}
		for _, b := range sent[len(sent)-5:] {
			if !slices.Contains(got, b) {
				return b + " not received yet"
			}
		}
		return ""
	})
	close(stop)
	<-done
	mu.Lock()
	received := slices.Clone(got)
	mu.Unlock()
	if rest := len(sent) - len(received); rest > 0 {
		received = append(received, drainMembers(t, mustSession(t, tc.Dial("n3"), client.ClientAck), "rr", 3, rest)...)
	}
	sameSet(t, "received through the renewals", received, sent)

	// One member: renewed through a spare, which then drains back.
	if _, err := a.CreateQueue(ctx, "one", client.QueueOptions{Members: 1, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	tc.WaitHost("one#0")
	one := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), "one"), "one-", 10)
	if _, err := a.UpdateQueueWith(ctx, "one", client.QueueUpdate{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	wait.Until(tc.t, 60*time.Second, "one renewed to 2 replicas and its spare gone", func() string { return renewedTo(tc, "n3", "one", 1, 2) })
	sameSet(t, "received from one", drainMembers(t, mustSession(t, tc.Dial("n3"), client.ClientAck), "one", 1, len(one)), one)
}

// Two queues of three members on three nodes, then two more nodes: the
// meta leader renews members onto the new nodes by itself until every
// node hosts one or two, and nothing is lost on the way.
func TestCluster_HostsSpreadOntoNewNodesByRenewal(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("five nodes")
	}
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	op := tc.Admin("n1")
	s := mustSession(t, tc.Dial("n2"), client.AutoAck)
	sent := map[string][]string{}
	for _, q := range []string{"ha", "hb"} {
		if _, err := op.CreateQueue(ctx, q, client.QueueOptions{Members: 3}); err != nil {
			t.Fatal(err)
		}
		tc.WaitSpread(q, 3)
		for i := range 3 {
			name := fmt.Sprintf("%s#%d", q, i)
			sent[q] = append(sent[q], sendN(t, ctx, mustProducer(t, s, name), name+"/", 5)...)
		}
	}
	tc.AddNode()
	tc.AddNode()
	wait.Until(tc.t, 120*time.Second, "every node hosting one or two members, nothing left to move", func() string {
		hosted := map[string]int{}
		for _, q := range []string{"ha", "hb"} {
			for i := range 3 {
				name := fmt.Sprintf("%s#%d", q, i)
				host := tc.HostOf(name)
				if host == "" {
					return name + " has no host"
				}
				hosted[host]++
			}
		}
		for _, id := range tc.IDs() {
			if hosted[id] < 1 || hosted[id] > 2 {
				return fmt.Sprintf("hosted %v", hosted)
			}
		}
		plan, err := op.Rebalance(stepCtx(t, 10*time.Second), true)
		switch {
		case err != nil:
			return err.Error()
		case len(plan.Moves) > 0:
			return fmt.Sprintf("moves still planned: %+v", plan.Moves)
		}
		return ""
	})
	for _, q := range []string{"ha", "hb"} {
		wait.Until(tc.t, 10*time.Second, q+": 15 messages pending on the members' hosts", func() string { return tc.counts(q, 15, 0) })
		sameSet(t, "received from "+q, drainMembers(t, mustSession(t, tc.Dial("n1"), client.ClientAck), q, 3, len(sent[q])), sent[q])
	}
}

// Two queues of one member on three nodes: spreading moves a shared
// group's preferred host, so the group named after a node no longer
// prefers it. A queue renewed 3 → 1 → 3 (through spares) while members
// are renewed onto nodes that host fewer ends renewed, each member hosted
// where its renewal put it, and nothing keeps renewing.
func TestCluster_RenewedOntoANodeIsHostedThere(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	a := tc.Admin("n1")
	for _, q := range []string{"renew", "probe"} {
		if _, err := a.CreateQueue(ctx, q, client.QueueOptions{Members: 1}); err != nil {
			t.Fatal(err)
		}
		tc.WaitHost(q + "#0")
	}
	sent := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), "renew"), "m", 50)
	for _, r := range []int{1, 3} {
		if _, err := a.UpdateQueueWith(ctx, "renew", client.QueueUpdate{Replicas: r}); err != nil {
			t.Fatal(err)
		}
		wait.Until(tc.t, 60*time.Second, fmt.Sprintf("renew renewed to %d replicas", r), func() string { return renewedTo(tc, "n2", "renew", 1, r) })
	}
	wait.Steady(tc.t, 3*time.Second, "nothing renewed any more", func() string {
		if d, _ := tc.Node("n2").meta.Destination("renew"); len(d.Members) != 1 || d.Members[0].Draining {
			return fmt.Sprintf("renew: %+v", d.Members)
		}
		return ""
	})
	sameSet(t, "received after the renewals", drainMembers(t, mustSession(t, tc.Dial("n3"), client.ClientAck), "renew", 1, len(sent)), sent)
}
