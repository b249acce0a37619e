package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// A distributed queue whose only consumer is on member 2 drains members 0
// and 1 to it after the forward delay: every message arrives exactly once,
// keeping its redelivered mark and delivery count, and nothing is left
// anywhere, moving or not.
func TestDD_StrandedMembersDrainToTheMemberWithConsumers(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	a := tc.Admin("n1")
	if _, err := a.CreateQueue(ctx, "st", client.QueueOptions{ForwardDelay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	tc.WaitSpread("st", 3)
	c := tc.Dial("n1")
	var want []string
	for i := range 2 {
		want = append(want, sendN(t, ctx, mustProducer(t, mustSession(t, c, client.AutoAck), fmt.Sprintf("st#%d", i)), fmt.Sprintf("m%d-", i), 10)...)
	}
	// Three of member 0's messages are delivered once and given back: they
	// must arrive marked redelivered, delivered for the second time. A
	// prefetch of 3 would not do: the client asks for more as the test
	// takes each message, and a fourth that arrives before the close comes
	// back marked too.
	s0 := mustSession(t, c, client.ClientAck)
	k0 := mustConsumer(t, ctx, s0, "st#0", client.WithLimit(3))
	recvN(t, k0, 3)
	if err := s0.Close(); err != nil {
		t.Fatal(err)
	}
	redelivered := map[string]bool{"m0-0": true, "m0-1": true, "m0-2": true}

	k := mustConsumer(t, ctx, mustSession(t, tc.Dial("n2"), client.AutoAck), "st#2")
	got := map[string]int{}
	for range len(want) {
		m := recv(t, k)
		b := string(m.Body)
		got[b]++
		wantCount := 1
		if redelivered[b] {
			wantCount = 2
		}
		if m.Redelivered != redelivered[b] || m.DeliveryCount != wantCount {
			t.Errorf("%q: redelivered %v count %d; want %v, %d", b, m.Redelivered, m.DeliveryCount, redelivered[b], wantCount)
		}
	}
	for _, b := range want {
		if got[b] != 1 {
			t.Errorf("%q received %d times; want once", b, got[b])
		}
	}
	expectNothing(t, k, 500*time.Millisecond)
	q := checkQueue(t, a, "st", 0, 0)
	for _, m := range q.Members {
		if m.Moving != 0 || m.Delayed != 0 {
			t.Errorf("member %s: moving %d delayed %d; want none", m.Name, m.Moving, m.Delayed)
		}
	}
}

// With the forward delay off, a member without consumers keeps its
// messages.
func TestDD_ForwardDelayOffKeepsMessagesWhereTheyAre(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	a := tc.Admin("n1")
	if _, err := a.CreateQueue(ctx, "keep", client.QueueOptions{ForwardDelay: -1}); err != nil {
		t.Fatal(err)
	}
	tc.WaitSpread("keep", 3)
	c := tc.Dial("n1")
	sendN(t, ctx, mustProducer(t, mustSession(t, c, client.AutoAck), "keep#0"), "m", 5)
	k := mustConsumer(t, ctx, mustSession(t, tc.Dial("n2"), client.AutoAck), "keep#2")
	expectNothing(t, k, time.Second)
	if q := showQueue(t, a, "keep"); q.Members[0].Pending != 5 || q.ForwardDelayMillis != 0 {
		t.Errorf("keep#0 pending %d, forward_delay_ms %d; want 5, 0", q.Members[0].Pending, q.ForwardDelayMillis)
	}
}

// `queue update --members`: a new member takes sends at once (on the node
// that hosted none, a send goes to it); shrinking drains the highest
// members into the others, which then hold every message once, and removes
// them when empty. While they drain, no send goes to them.
func TestDD_UpdateMembers_GrowTakesSendsShrinkDrains(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	a := tc.Admin("n1")
	if _, err := a.CreateQueue(ctx, "rs", client.QueueOptions{Members: 2, ForwardDelay: -1}); err != nil {
		t.Fatal(err)
	}
	hosts := tc.WaitSpread("rs", 2)
	free := tc.Others(hosts...)[0]
	info, err := a.UpdateQueue(ctx, "rs", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Members) != 3 || info.Members[2].Replicas[0] != free {
		t.Fatalf("after update: members %+v; want 3, rs#2 preferring %s", info.Members, free)
	}
	tc.WaitSpread("rs", 3)
	p := mustProducer(t, mustSession(t, tc.Dial(free), client.AutoAck), "rs")
	if r := send(t, ctx, p, "new"); r.Member != "rs#2" {
		t.Errorf("send on %s went to %s; want the new member rs#2", free, r.Member)
	}

	c := tc.Dial("n1")
	var want []string
	for i := range 3 {
		want = append(want, sendN(t, ctx, mustProducer(t, mustSession(t, c, client.AutoAck), fmt.Sprintf("rs#%d", i)), fmt.Sprintf("m%d-", i), 5)...)
	}
	want = append(want, "new")
	// Asked of a node that may not lead the meta group: its answer must
	// show the update all the same.
	shrunk, err := tc.Admin(free).UpdateQueue(ctx, "rs", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range shrunk.Members {
		if m.Draining != (m.Name != "rs#0") {
			t.Errorf("the update's answer shows %s draining %v; want only rs#0 active", m.Name, m.Draining)
		}
	}
	// The resize is committed; free applies it a moment later.
	wait.For(tc.t, 5*time.Second, free+" learning that rs#1 and rs#2 drain", func() bool {
		d, ok := tc.Node(free).meta.Destination("rs")
		return ok && len(d.Members) > 0 && !d.Members[0].Draining && (len(d.Members) < 3 || d.Members[2].Draining)
	})
	for range 5 {
		if r := send(t, ctx, p, "late"); r.Member != "rs#0" {
			t.Errorf("send while draining went to %s; want rs#0", r.Member)
		}
	}
	want = append(want, "late", "late", "late", "late", "late")
	wait.For(tc.t, 20*time.Second, "rs drained into rs#0 and shrunk to one member", func() bool {
		q, err := a.ShowQueue(ctx, "rs")
		return err == nil && len(q.Members) == 1 && q.Members[0].Pending == uint64(len(want))
	})
	k := mustConsumer(t, ctx, mustSession(t, tc.Dial("n2"), client.AutoAck), "rs")
	got := recvN(t, k, len(want))
	sameSet(t, "after the drain", bodiesOf(got), want)
	expectNothing(t, k, 300*time.Millisecond)
}
