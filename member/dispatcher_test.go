package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// logCommands decodes the member commands of the log entries from index
// first on.
func logCommands(t *testing.T, r *Replica, first uint64) [][]proto.Message {
	t.Helper()
	var entries [][]proto.Message
	for i := first; i <= r.Raft().LastIndex(); i++ {
		var l raft.Log
		if err := r.host.group.Entry(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		e, err := fsm.Decode(l.Data)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		var bodies []proto.Message
		for _, c := range e.Commands {
			var b proto.Message
			switch c.Type {
			case fsmpb.CommandType_COMMAND_TYPE_ENQUEUE:
				b = &fsmpb.Enqueue{}
			case fsmpb.CommandType_COMMAND_TYPE_DELIVER:
				b = &fsmpb.Deliver{}
			default:
				t.Fatalf("entry %d holds a %v", i, c.Type)
			}
			if err := proto.Unmarshal(c.Payload, b); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
			bodies = append(bodies, b)
		}
		entries = append(entries, bodies)
	}
	return entries
}

// consumingReplica opens a replica with session s1 and its consumer c1,
// which push feeds, with credit for that many messages.
func consumingReplica(t *testing.T, credit int, push func([]fsm.Delivery) bool) *Replica {
	t.Helper()
	r := testReplica(t, t.TempDir())
	if err := r.OpenSession(context.Background(), "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: push}, credit); err != nil {
		t.Fatal(err)
	}
	return r
}

// A consumer waits with credit on an empty member: a send's messages are
// delivered by a Deliver in the send's own entry, one commit for both.
func TestReplica_DeliversAnEnqueueInItsOwnEntry(t *testing.T) {
	ctx := context.Background()
	var c collector
	r := consumingReplica(t, 10, c.push)
	first := r.Raft().LastIndex() + 1
	if _, err := r.Enqueue(ctx, msgs(3, "m")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "3 deliveries", func() bool { return c.count() == 3 })
	entries := logCommands(t, r, first)
	if len(entries) != 1 || len(entries[0]) != 2 {
		t.Fatalf("the send and its delivery took entries %v; want one entry of an Enqueue and a Deliver", entries)
	}
	d, ok := entries[0][1].(*fsmpb.Deliver)
	if _, isEnqueue := entries[0][0].(*fsmpb.Enqueue); !isEnqueue || !ok || !slices.Equal(d.MessageIds, []string{"m000", "m001", "m002"}) || d.Session != "s1" {
		t.Fatalf("entry is %v; want the Enqueue, then a Deliver of m000..m002 to s1", entries[0])
	}
}

// dealNow runs the Enqueue deal of submitEnqueue after setup, both while
// the dispatcher is held off, so the deal sees the state setup made. It
// leaves the messages not dealt out of r.undealt, as if their Enqueue were
// applied at once; left lists them.
func dealNow(r *Replica, setup func(), ms []*fsmpb.Message) (ids, left []string) {
	r.submitMu.Lock()
	defer r.submitMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	setup()
	picks, rest := r.dealLocked(&fsmpb.Enqueue{Now: r.now().UnixNano(), Messages: ms})
	for _, p := range picks {
		ids = append(ids, p.ids...)
	}
	for _, m := range rest {
		left = append(left, m.Id)
	}
	return ids, left
}

// Messages that may come before a send's keep it from being dealt at once:
// pending ones not yet dealt, and commands ahead of it that may make some
// pending. A send larger than the credit is dealt in part.
func TestReplica_EnqueueDealtOnlyWhenNothingComesFirst(t *testing.T) {
	ctx := context.Background()
	var c collector
	r := consumingReplica(t, 0, c.push)
	if _, err := r.Enqueue(ctx, msgs(2, "old")); err != nil {
		t.Fatal(err)
	}
	none := func() {}
	// Credit given without waking the dispatcher, which dealNow holds off.
	if ids, left := dealNow(r, func() { r.consumers["c1"].credit = 4 }, msgs(1, "new")); ids != nil || !slices.Equal(left, []string{"new000"}) {
		t.Fatalf("with 2 messages pending, a send was dealt %v (left %v)", ids, left)
	}
	r.kick()
	wait.For(t, 10*time.Second, "the pending messages delivered", func() bool { return c.count() == 2 })

	// Say, a Recover on its way.
	if ids, _ := dealNow(r, func() { r.ahead++ }, msgs(1, "new")); ids != nil {
		t.Fatalf("behind a command that may make messages pending, a send was dealt %v", ids)
	}
	dealNow(r, func() { r.ahead-- }, nil)

	expired := &fsmpb.Message{Id: "expired", Priority: 4, Expiration: 1}
	urgent := &fsmpb.Message{Id: "urgent", Priority: 9}
	ids, left := dealNow(r, none, append([]*fsmpb.Message{expired}, append(msgs(1, "a"), urgent)...))
	if !slices.Equal(ids, []string{"urgent", "a000"}) || left != nil {
		t.Fatalf("dealt %v (left %v); want urgent, then a000, and nothing of the expired one", ids, left)
	}
	// The consumer's credit (4 less the 2 delivered, less 2 dealt) is spent.
	if ids, left := dealNow(r, func() { r.consumers["c1"].credit++ }, msgs(3, "b")); !slices.Equal(ids, []string{"b000"}) || !slices.Equal(left, []string{"b001", "b002"}) {
		t.Fatalf("with credit for 1 of 3, dealt %v (left %v); want b000, and b001 and b002 left", ids, left)
	}
}

// The messages a send could not deal for want of credit are dealt by the
// next send, before its own of the same priority, while the first is still
// on its way to the log: a send dealt in part does not make every send
// behind it wait for the dispatcher.
func TestReplica_NextSendDealsTheMessagesASendLeft(t *testing.T) {
	var c collector
	r := consumingReplica(t, 0, c.push)
	r.submitMu.Lock()
	defer r.submitMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	deal := func(ms ...*fsmpb.Message) (ids []string, u *undealt) {
		picks, u := r.dealEnqueueLocked(&fsmpb.Enqueue{Now: r.now().UnixNano(), Messages: ms})
		for _, p := range picks {
			ids = append(ids, p.ids...)
		}
		return ids, u
	}
	msg := func(id string, priority uint32) *fsmpb.Message { return &fsmpb.Message{Id: id, Priority: priority} }

	r.consumers["c1"].credit = 1
	ids, first := deal(msg("x0", 4), msg("x1", 4), msg("x2", 4))
	if !slices.Equal(ids, []string{"x0"}) || first == nil {
		t.Fatalf("with credit for 1, dealt %v and left %v; want x0, and x1 and x2 left", ids, first)
	}
	// Credit for 3 comes back: the next send's urgent message goes first,
	// then the first send's, then its own.
	r.consumers["c1"].credit = 3
	ids, second := deal(msg("y0", 4), msg("urgent", 9))
	if want := []string{"urgent", "x1", "x2"}; !slices.Equal(ids, want) || second == nil || len(second.msgs) != 1 || second.msgs[0].Id != "y0" {
		t.Fatalf("dealt %v and left %v; want %v, and y0 left", ids, second, want)
	}
	// Behind a command that may make pending messages nobody can name,
	// nothing is dealt, and the whole send waits.
	r.ahead++
	r.consumers["c1"].credit = 5
	if ids, third := deal(msg("z0", 4)); ids != nil || third == nil {
		t.Fatalf("behind a Recover, dealt %v and left %v", ids, third)
	}
	r.ahead--
	// Once applied, the first send's messages are the member's to deal
	// (pending or delivered); the others' wait on.
	r.mu.Unlock()
	r.applied(first)
	r.mu.Lock()
	if len(r.undealt) != 2 || r.undealt[0] != second {
		t.Fatalf("after the first send applied, undealt holds %d sends", len(r.undealt))
	}
	if ids, fourth := deal(msg("w0", 4)); !slices.Equal(ids, []string{"y0", "z0", "w0"}) || fourth != nil {
		t.Fatalf("dealt %v and left %v; want y0, z0, w0 and none left", ids, fourth)
	}
}

// Through Submit: a send dealt in part leaves its other messages to the
// next send or the dispatcher, which deliver each once, in order, and the
// replica forgets them once their send is applied.
func TestReplica_SendDealtInPartThroughSubmit(t *testing.T) {
	var c collector
	r := consumingReplica(t, 2, c.push)
	var sent sync.WaitGroup
	submit := func(prefix string, n int) {
		sent.Add(1)
		r.Submit(&fsmpb.Enqueue{Messages: msgs(n, prefix)}, func(res fsm.Result, err error) {
			if err == nil {
				err = res.Err
			}
			if err != nil {
				t.Error(err)
			}
			sent.Done()
		})
	}
	submit("a", 5) // credit for 2: a000 and a001 dealt, three left
	r.Credit("c1", 3)
	submit("b", 3)
	r.Credit("c1", 3)
	sent.Wait()
	wait.For(t, 10*time.Second, "8 deliveries", func() bool { return c.count() >= 8 })
	var got []string
	for _, d := range c.deliveries() {
		got = append(got, d.Message.Id)
	}
	if want := []string{"a000", "a001", "a002", "a003", "a004", "b000", "b001", "b002"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	r.mu.Lock()
	left := len(r.undealt)
	r.mu.Unlock()
	if left != 0 {
		t.Fatalf("after both sends were applied, the replica still keeps %d sends' undealt messages", left)
	}
}

// Producers send one to three messages at a time, several sends in flight
// each, while a consumer with little credit acknowledges and takes more:
// sends dealt as they are proposed, sends dealt in part, and messages the
// dispatcher deals after they are stored interleave, and each producer's
// messages still arrive once each, in the order it sent them.
func TestReplica_DealtSendsKeepEachProducersOrder(t *testing.T) {
	ctx := context.Background()
	got := make(chan []fsm.Delivery, 1000)
	r := consumingReplica(t, 2, func(d []fsm.Delivery) bool { got <- d; return true })
	const producers, each = 4, 60
	var sent sync.WaitGroup
	for p := range producers {
		// Submit returns before the send commits; one caller's sends
		// are logged in the order it submitted them.
		// Two sends in flight per producer spread its sends over many
		// commits.
		inFlight := make(chan struct{}, 2)
		go func() {
			for i := 0; i < each; {
				var batch []*fsmpb.Message
				for range min(1+(i+p)%3, each-i) {
					batch = append(batch, &fsmpb.Message{Id: fmt.Sprintf("p%d-%03d", p, i), Body: []byte("x"), Priority: 4})
					i++
				}
				inFlight <- struct{}{}
				sent.Add(1)
				r.Submit(&fsmpb.Enqueue{Messages: batch}, func(res fsm.Result, err error) {
					if err == nil {
						err = res.Err
					}
					if err != nil {
						t.Error(err)
					}
					<-inFlight
					sent.Done()
				})
			}
		}()
	}
	next := make([]int, producers)
	var ids []uint64
	for received := 0; received < producers*each; {
		var ds []fsm.Delivery
		select {
		case ds = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d messages delivered, then none for 10 s", received, producers*each)
		}
		// Credit at once, as a client does when the application takes
		// a message, before the acknowledgements.
		r.Credit("c1", len(ds))
		for _, d := range ds {
			var p, n int
			if _, err := fmt.Sscanf(d.Message.Id, "p%d-%d", &p, &n); err != nil {
				t.Fatal(err)
			}
			if n != next[p] {
				t.Fatalf("producer %d: got message %d, want %d", p, n, next[p])
			}
			next[p]++
			ids = append(ids, d.DeliveryID)
		}
		received += len(ds)
	}
	sent.Wait()
	if _, rejected, err := r.Ack(ctx, "s1", ids); err != nil || len(rejected) > 0 {
		t.Fatalf("acknowledging every delivery: rejected %v, %v", rejected, err)
	}
	if st := r.Stats(); st.Pending != 0 || st.Delivered != 0 {
		t.Fatalf("stats %+v after every message was acknowledged", st)
	}
}

// A dealt send that the member refuses (here, a batch that repeats an id)
// gives its credit back and leaves nothing reserved or counted ahead.
func TestReplica_RefusedDealtSendGivesCreditBack(t *testing.T) {
	ctx := context.Background()
	var c collector
	r := consumingReplica(t, 5, c.push)
	twice := append(msgs(1, "dup"), msgs(1, "dup")...)
	if _, err := r.Enqueue(ctx, twice); !errors.Is(err, fsm.ErrDuplicateMessageID) {
		t.Fatalf("a batch that repeats an id: %v, want ErrDuplicateMessageID", err)
	}
	idle := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.consumers["c1"].credit == 5 && len(r.reserved) == 0 && r.ahead == 0
	}
	wait.For(t, 10*time.Second, "credit 5, nothing reserved, nothing ahead", idle)
	if _, err := r.Enqueue(ctx, msgs(5, "m")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "5 deliveries", func() bool { return c.count() == 5 })
}

func TestAddsPending(t *testing.T) {
	for _, c := range []struct {
		body proto.Message
		want bool
	}{
		{&fsmpb.Enqueue{}, true},
		{&fsmpb.Recover{}, true},
		{&fsmpb.Release{}, true},
		{&fsmpb.Return{}, true},
		{&fsmpb.Wake{}, true},
		{&fsmpb.TxDecide{}, true},
		{&fsmpb.TxPrepare{OnePhase: true}, true},
		{&fsmpb.TxPrepare{}, false},
		{&fsmpb.Ack{}, false},
		{&fsmpb.Deliver{}, false},
		{&fsmpb.Expire{}, false},
		{&fsmpb.Purge{}, false},
		{&fsmpb.OpenSession{}, false},
	} {
		if got := addsPending(c.body); got != c.want {
			t.Errorf("addsPending(%T %v) = %v, want %v", c.body, c.body, got, c.want)
		}
	}
}

// A consumer attached again to the same host (its link ended, the host did
// not change) is pushed the session's deliveries above what it saw. A
// Deliver proposed for its earlier attachment that is applied by then is
// among them, and when that Deliver's result comes back to the dispatcher
// it must not give those deliveries back: the client holds them, and an
// acknowledgement of one would be refused as no longer the session's.
func TestReplica_DeliveryPushedOnReattachIsNotGivenBack(t *testing.T) {
	ctx := context.Background()
	var first, second collector
	r := consumingReplica(t, 0, first.push)
	if _, err := r.Enqueue(ctx, msgs(1, "m")); err != nil {
		t.Fatal(err)
	}
	// Results come back in log order on one goroutine: holding one holds
	// the Deliver's after it, while Raft goes on applying.
	held, release := make(chan struct{}), make(chan struct{})
	r.Submit(&fsmpb.OpenSession{Session: "s2", Owner: "owner"}, func(fsm.Result, error) {
		close(held)
		<-release
	})
	<-held
	r.Credit("c1", 1)
	applied := func() (ds []fsm.Delivery) {
		r.Read(func(m *fsm.Member) { ds = m.SessionDeliveries("s1") })
		return ds
	}
	wait.For(t, 10*time.Second, "the Deliver applied", func() bool { return len(applied()) == 1 })
	d := applied()[0]

	r.RemoveConsumer("c1")
	if err := r.AttachConsumer(&Consumer{ID: "c1", Session: "s1", Push: second.push}, 0, 0); err != nil {
		t.Fatal(err)
	}
	if second.count() != 1 || first.count() != 0 {
		t.Fatalf("pushed to the earlier attachment %d, to the new one %d; want 0 and 1", first.count(), second.count())
	}
	close(release)
	// The Deliver's result has been handled once a later command's has.
	if err := r.OpenSession(ctx, "s3", "owner"); err != nil {
		t.Fatal(err)
	}
	// What came before the fix gave it back from a goroutine at once.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if len(applied()) != 1 {
			t.Fatalf("delivery %d, pushed to the new attachment, was given back to pending", d.DeliveryID)
		}
		time.Sleep(5 * time.Millisecond)
	}
	acked, rejected, err := r.Ack(ctx, "s1", []uint64{d.DeliveryID})
	if err != nil || acked != 1 || len(rejected) != 0 {
		t.Fatalf("ack of the pushed delivery: acked %d, rejected %v, err %v; want it acked", acked, rejected, err)
	}
}

// A delivery given back unseen goes one way: a consumer of its session that
// attached again and was pushed it keeps it (the give-back leaves it), and
// one attaching while the give-back is on its way is not pushed it (else
// it would hold a message that is pending again).
func TestReplica_GiveBackAndReattachNeverBothTakeADelivery(t *testing.T) {
	ctx := context.Background()
	var first, second, third collector
	r := consumingReplica(t, 1, first.push)
	if _, err := r.Enqueue(ctx, msgs(1, "m")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the delivery pushed", func() bool { return first.count() == 1 })
	d := first.deliveries()[0].DeliveryID
	held := func() int {
		var ds []fsm.Delivery
		r.Read(func(m *fsm.Member) { ds = m.SessionDeliveries("s1") })
		return len(ds)
	}

	// Attached again first, and pushed it: a give-back after leaves it.
	r.RemoveConsumer("c1")
	if err := r.AttachConsumer(&Consumer{ID: "c1", Session: "s1", Push: second.push}, 0, 0); err != nil {
		t.Fatal(err)
	}
	if second.count() != 1 {
		t.Fatalf("the new attachment was pushed %d deliveries; want the session's one", second.count())
	}
	r.GiveBack("s1", []uint64{d})
	wait.For(t, 10*time.Second, "the give-back done", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.returning) == 0
	})
	if held() != 1 {
		t.Fatalf("delivery %d, pushed to the new attachment, was given back", d)
	}

	// A give-back on its way (marked, not yet applied): an attachment made
	// meanwhile is not pushed it.
	r.RemoveConsumer("c1")
	r.mu.Lock()
	r.returning[d] = struct{}{}
	r.mu.Unlock()
	if err := r.AttachConsumer(&Consumer{ID: "c1", Session: "s1", Push: third.push}, 0, 0); err != nil {
		t.Fatal(err)
	}
	if third.count() != 0 {
		t.Fatalf("an attachment made while delivery %d was being given back was pushed it", d)
	}
}

// Two consumers of one session, each pushed its deliveries, attach again
// (as to a new host) having seen none of them: each is pushed its own
// again, never the other's; a consumer attaching for the first time is
// pushed nothing; a consumer's Return gives back its own alone.
func TestReplica_AttachPushesAConsumerItsOwnDeliveriesAlone(t *testing.T) {
	ctx := context.Background()
	var c1, c2 collector
	r := consumingReplica(t, 3, c1.push)
	if err := r.AddConsumer(&Consumer{ID: "c2", Session: "s1", Push: c2.push}, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enqueue(ctx, msgs(6, "m")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "three deliveries to each consumer", func() bool { return c1.count() == 3 && c2.count() == 3 })
	ids := func(ds []fsm.Delivery) (out []string) {
		for _, d := range ds {
			out = append(out, d.Message.Id)
		}
		return out
	}
	r.RemoveConsumer("c1")
	r.RemoveConsumer("c2")
	var again1, again2, fresh collector
	if err := r.AttachConsumer(&Consumer{ID: "c1", Session: "s1", Push: again1.push}, 3, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.AttachConsumer(&Consumer{ID: "c2", Session: "s1", Push: again2.push}, 3, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.AttachConsumer(&Consumer{ID: "c3", Session: "s1", Push: fresh.push}, 3, 0); err != nil {
		t.Fatal(err)
	}
	if got, want := ids(again1.deliveries()), ids(c1.deliveries()); !slices.Equal(got, want) {
		t.Errorf("c1 attached again was pushed %v; want its own %v", got, want)
	}
	if got, want := ids(again2.deliveries()), ids(c2.deliveries()); !slices.Equal(got, want) {
		t.Errorf("c2 attached again was pushed %v; want its own %v", got, want)
	}
	if fresh.count() != 0 {
		t.Errorf("a new consumer of the session was pushed %v; want none", ids(fresh.deliveries()))
	}
	r.RemoveConsumer("c3") // else it would take what c2 gives back
	res, err := r.proposeResult(ctx, &fsmpb.Return{Session: "s1", Consumer: "c2", After: c2.deliveries()[0].DeliveryID, Unseen: true})
	if err != nil || res.Returned != 2 {
		t.Fatalf("c2's Return after its first delivery: %+v, %v; want 2 returned", res, err)
	}
	var held []fsm.Delivery
	r.Read(func(m *fsm.Member) { held = m.SessionDeliveries("s1") })
	if want := append(ids(c1.deliveries()), c2.deliveries()[0].Message.Id); !slices.Equal(slices.Sorted(slices.Values(ids(held))), slices.Sorted(slices.Values(want))) {
		t.Errorf("the session holds %v after c2's Return; want %v", ids(held), want)
	}
}
