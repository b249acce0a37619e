package fsm_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Tests of max deliveries, redelivery delays, dead messages and moves:
// Configure's redelivery settings, requeue (Recover, Release, Return),
// Move, Moved, Wake, and what Deliver, Purge and Expire do with messages
// that are delayed, dead or moving.

// redeliverySettings are the settings of everyState: dead after 2
// deliveries, a delay of 100 doubling per delivery up to 1000.
func redeliverySettings() *fsmpb.MemberSettings {
	return &fsmpb.MemberSettings{
		DedupWindowNs: fsm.DefaultDedupWindowNs, DedupMaxIds: fsm.DefaultDedupMaxIDs,
		MaxDeliveries: 2, RedeliveryDelayNs: 100, RedeliveryBackoff: 2, RedeliveryMaxDelayNs: 1000,
	}
}

// The messages of everyState, one per state. All expire at everyExpiry.
const (
	idPending     = "pending"     // never delivered
	idRedelivered = "redelivered" // pending again after a return: count 1, redelivered
	idDelivered   = "delivered"   // held by session s
	idDelayed     = "delayed"     // returned at 200, delayed until 300
	idDead        = "dead"        // delivered twice (max_deliveries) and returned
	idMoving      = "moving"      // pending, then moving to moveTarget
	idDeadMoving  = "deadmoving"  // dead, then moving to dlqTarget

	everyExpiry  = 5000
	moveTarget   = "orders#1"
	dlqTarget    = "orders.DLQ#0"
	delayedUntil = 300
)

var everyID = []string{idPending, idRedelivered, idDelivered, idDelayed, idDead, idMoving, idDeadMoving}

// everyState builds a member (settings redeliverySettings, session s open)
// with a message in every state a message can be in.
func everyState(t tb) *member {
	t.Helper()
	f := newMember(t)
	f.open("s")
	var msgs []*fsmpb.Message
	for i, id := range everyID {
		msgs = append(msgs, msg(id, prio(uint32(i)), expires(everyExpiry)))
	}
	f.enqueue(0, msgs...)
	// Returned under the default settings: pending at once, marked.
	f.ok(&fsmpb.Return{Session: "s", Now: 5, DeliveryIds: f.held("s", idRedelivered)})
	f.ok(&fsmpb.Configure{Settings: redeliverySettings()})
	// Two deliveries, each returned: dead.
	if r := f.ok(&fsmpb.Return{Session: "s", Now: 10, DeliveryIds: f.held("s", idDead, idDeadMoving)}); r.Returned != 2 {
		f.t.Fatalf("return = %+v", r)
	}
	if r := f.ok(&fsmpb.Wake{Now: 110}); r.Returned != 2 {
		f.t.Fatalf("wake = %+v", r)
	}
	f.ok(&fsmpb.Return{Session: "s", Now: 120, DeliveryIds: f.held("s", idDead, idDeadMoving)})
	if r := f.ok(&fsmpb.Move{Target: dlqTarget, MessageIds: []string{idDeadMoving}}); r.Moved != 1 {
		f.t.Fatalf("move dead = %+v", r)
	}
	if r := f.ok(&fsmpb.Move{Target: moveTarget, MessageIds: []string{idMoving}}); r.Moved != 1 {
		f.t.Fatalf("move pending = %+v", r)
	}
	f.held("s", idDelivered)
	f.ok(&fsmpb.Return{Session: "s", Now: 200, DeliveryIds: f.held("s", idDelayed)})
	return f
}

// wantState is what Lookup must say of a message in each state of everyState.
func wantState(id string) fsm.MessageState {
	switch id {
	case idPending:
		return fsm.MessageState{Pending: true}
	case idRedelivered:
		return fsm.MessageState{Pending: true, Redelivered: true, DeliveryCount: 1}
	case idDelivered:
		return fsm.MessageState{Session: "s", DeliveryID: 6, DeliveryCount: 1}
	case idDelayed:
		return fsm.MessageState{AvailableAt: delayedUntil, Redelivered: true, DeliveryCount: 1}
	case idDead:
		return fsm.MessageState{Dead: true, Redelivered: true, DeliveryCount: 2}
	case idMoving:
		return fsm.MessageState{MovingTo: moveTarget}
	case idDeadMoving:
		return fsm.MessageState{Dead: true, MovingTo: dlqTarget, Redelivered: true, DeliveryCount: 2}
	}
	panic(id)
}

// stateOf is Lookup without the message, for comparison.
func (f *member) stateOf(id string) fsm.MessageState {
	f.t.Helper()
	st := f.lookup(id)
	st.Message = nil
	return st
}

func TestEveryState_LooksAsBuilt(t *testing.T) {
	f := everyState(t)
	for _, id := range everyID {
		if got, want := f.stateOf(id), wantState(id); got != want {
			t.Errorf("%s = %+v, want %+v", id, got, want)
		}
	}
	want := fsm.Stats{Pending: 2, Delivered: 1, Delayed: 1, Moving: 3, Sessions: 1, DedupIDs: 0}
	for _, id := range everyID {
		want.Bytes += int64(len("body-" + id))
	}
	if st := f.m.Stats(); st != want {
		t.Fatalf("Stats = %+v, want %+v", st, want)
	}
	if got := f.m.NextWake(); got != delayedUntil {
		t.Fatalf("NextWake = %d, want %d", got, delayedUntil)
	}
	// Aside: the dead and the moving, by sequence (the order of everyID).
	want2 := []fsm.Aside{
		{Seq: 5, Dead: true, Redelivered: true, DeliveryCount: 2},
		{Seq: 6, Target: moveTarget},
		{Seq: 7, Dead: true, Target: dlqTarget, Redelivered: true, DeliveryCount: 2},
	}
	got := f.m.AsideMessages(10)
	if len(got) != len(want2) {
		t.Fatalf("AsideMessages = %+v", got)
	}
	for i, a := range got {
		if a.Message.GetId() != everyID[a.Seq-1] {
			t.Errorf("aside %d is %s with seq %d", i, a.Message.GetId(), a.Seq)
		}
		a.Message = nil
		if a != want2[i] {
			t.Errorf("aside %d = %+v, want %+v", i, a, want2[i])
		}
	}
	for limit, n := range []int{0, 1, 2, 3, 3} {
		if got := f.m.AsideMessages(limit); len(got) != n || (n > 0 && got[0].Message.GetId() != idDead) {
			t.Errorf("AsideMessages(%d) = %+v, want the first %d", limit, got, n)
		}
	}
	checkCounts(t, f.m)
}

// ---- Deliver ----

func TestDeliver_SkipsMessagesThatAreNotWaiting(t *testing.T) {
	for _, id := range everyID {
		t.Run(id, func(t *testing.T) {
			f := everyState(t)
			f.open("s2")
			want := wantState(id).Pending
			before := state(t, f.m)
			ds := f.deliver("s2", 250, id)
			if got := len(ds) == 1; got != want {
				t.Fatalf("deliver of %s = %+v, want delivered %v", id, ds, want)
			}
			if !want {
				sameState(t, f.m, before, "a deliver of a message that is not waiting")
				return
			}
			if ms := f.lookup(id); ms.Session != "s2" || ms.DeliveryCount != wantState(id).DeliveryCount+1 {
				t.Fatalf("%s = %+v", id, ms)
			}
		})
	}
}

// ---- Move ----

func TestMove_TakesWaitingMessagesOutOfDelivery(t *testing.T) {
	cases := []struct {
		name   string
		target string
		ids    []string
		moved  []string // the ids taken out; the others must not change
	}{
		{"pending", "q#0", []string{idPending}, []string{idPending}},
		{"redelivered pending keeps its mark and count", "q#3", []string{idRedelivered}, []string{idRedelivered}},
		{"dead", "q.DLQ#2", []string{idDead}, []string{idDead}},
		{"delivered is skipped", "q#0", []string{idDelivered}, nil},
		{"delayed is skipped", "q#0", []string{idDelayed}, nil},
		{"moving keeps its first target", "q#0", []string{idMoving}, nil},
		{"dead and moving keeps its first target", "q#0", []string{idDeadMoving}, nil},
		{"unknown id is skipped", "q#0", []string{"nope"}, nil},
		{"no ids", "q#0", nil, nil},
		{"the same id twice moves once", "q#0", []string{idPending, idPending}, []string{idPending}},
		{"a mix", "q#65535", append([]string{"nope"}, everyID...), []string{idPending, idRedelivered, idDead}},
		{"to the target another message moves to", moveTarget, []string{idDead, idPending}, []string{idDead, idPending}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := everyState(t)
			st0 := f.m.Stats()
			r := f.ok(&fsmpb.Move{Target: c.target, MessageIds: c.ids})
			if r.Moved != len(c.moved) {
				t.Fatalf("Move = %+v, want %d moved", r, len(c.moved))
			}
			fromPending := 0
			for _, id := range everyID {
				want := wantState(id)
				if slices.Contains(c.moved, id) {
					if want.Pending {
						fromPending++
					}
					want.Pending, want.MovingTo = false, c.target
				}
				if got := f.stateOf(id); got != want {
					t.Errorf("%s = %+v, want %+v", id, got, want)
				}
			}
			st := f.m.Stats()
			if st.Pending != st0.Pending-fromPending || st.Moving != st0.Moving+fromPending ||
				st.Delivered != st0.Delivered || st.Delayed != st0.Delayed || st.Bytes != st0.Bytes || st.DeadLettered != 0 {
				t.Fatalf("Stats = %+v, before %+v", st, st0)
			}
			for _, id := range pendingIDs(f.m, 0) {
				if slices.Contains(c.moved, id) {
					t.Errorf("moving %s is still in ScanPending", id)
				}
			}
			for _, a := range f.m.AsideMessages(10) {
				if slices.Contains(c.moved, a.Message.GetId()) && a.Target != c.target {
					t.Errorf("aside %+v, want target %s", a, c.target)
				}
			}
			// Moving messages are not delivered, nor moved again.
			before := state(t, f.m)
			if ds := f.deliver("s", 250, c.moved...); len(ds) != 0 {
				t.Fatalf("moving messages delivered: %+v", ds)
			}
			if r := f.ok(&fsmpb.Move{Target: "other#9", MessageIds: c.moved}); r.Moved != 0 {
				t.Fatalf("second move = %+v", r)
			}
			sameState(t, f.m, before, "a deliver and a move of moving messages")
			checkCounts(t, f.m)
		})
	}
}

func TestMove_RejectsATargetThatIsNotAMemberAddressAndChangesNothing(t *testing.T) {
	for _, target := range []string{
		"",
		"orders", // a destination, not one of its members
		"orders#",
		"orders#x",
		"orders#-1",
		"orders#01",
		"orders#65536",
		"#1",
		"bad name#1",
		".orders#1",
		"orders#1#2",
	} {
		t.Run(target, func(t *testing.T) {
			f := everyState(t)
			before := state(t, f.m)
			r := f.do(&fsmpb.Move{Target: target, MessageIds: []string{idPending, idDead}})
			mustErr(t, r.Err, fsm.ErrMalformed, "move to "+target)
			if r.Moved != 0 {
				t.Errorf("rejected move reports %+v", r)
			}
			sameState(t, f.m, before, "a rejected move")
		})
	}
}

// ---- Moved ----

func TestMoved_RemovesOnlyMovingMessages(t *testing.T) {
	cases := []struct {
		name         string
		ids          []string
		removed      []string
		deadLettered uint64
	}{
		{"moving", []string{idMoving}, []string{idMoving}, 0},
		{"dead and moving counts as dead-lettered", []string{idDeadMoving}, []string{idDeadMoving}, 1},
		{"dead not moving is ignored", []string{idDead}, nil, 0},
		{"pending is ignored", []string{idPending, idRedelivered}, nil, 0},
		{"delivered is ignored", []string{idDelivered}, nil, 0},
		{"delayed is ignored", []string{idDelayed}, nil, 0},
		{"unknown is ignored", []string{"nope"}, nil, 0},
		{"the same id twice counts once", []string{idDeadMoving, idDeadMoving}, []string{idDeadMoving}, 1},
		{"everything", append([]string{"nope"}, everyID...), []string{idMoving, idDeadMoving}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := everyState(t)
			st0 := f.m.Stats()
			before := state(t, f.m)
			r := f.ok(&fsmpb.Moved{MessageIds: c.ids})
			if r.Removed != len(c.removed) {
				t.Fatalf("Moved = %+v, want %d removed", r, len(c.removed))
			}
			if len(c.removed) == 0 {
				sameState(t, f.m, before, "a Moved of nothing moving")
			}
			f.absent(c.removed...)
			var bytes int64
			for _, id := range everyID {
				if slices.Contains(c.removed, id) {
					bytes += int64(len("body-" + id))
					continue
				}
				if got, want := f.stateOf(id), wantState(id); got != want {
					t.Errorf("%s = %+v, want %+v", id, got, want)
				}
			}
			want := st0
			want.Moving -= len(c.removed)
			want.DeadLettered += c.deadLettered
			want.Bytes -= bytes
			if st := f.m.Stats(); st != want {
				t.Fatalf("Stats = %+v, want %+v", st, want)
			}
			for _, id := range f.m.ExpiredBy(math.MaxInt64, 100) {
				if slices.Contains(c.removed, id) {
					t.Errorf("moved %s is still in the expiry index", id)
				}
			}
			// Moved again: nothing more to remove, and no second count.
			if r := f.ok(&fsmpb.Moved{MessageIds: c.ids}); r.Removed != 0 || f.m.Stats().DeadLettered != want.DeadLettered {
				t.Fatalf("second Moved = %+v, stats %+v", r, f.m.Stats())
			}
			checkCounts(t, f.m)
		})
	}
}

func TestMoved_DeadLetteredAddsUp(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxDeliveries: 1}})
	f.enqueue(0, msg("a"), msg("b"), msg("c"), msg("fwd"))
	f.ok(&fsmpb.Return{Session: "s", Now: 1, DeliveryIds: f.held("s", "a", "b", "c")})
	f.ok(&fsmpb.Move{Target: "dlq#0", MessageIds: []string{"a", "b", "c", "fwd"}})
	f.ok(&fsmpb.Moved{MessageIds: []string{"a", "fwd"}})
	f.ok(&fsmpb.Moved{MessageIds: []string{"b", "c"}})
	if st := f.m.Stats(); st.DeadLettered != 3 || st.Moving != 0 || st.Pending != 0 || st.Bytes != 0 {
		t.Fatalf("Stats = %+v, want 3 dead-lettered and nothing held", st)
	}
	// Kept across a snapshot.
	if st := restore(t, snapshotBytes(t, f.m)).Stats(); st.DeadLettered != 3 {
		t.Fatalf("restored Stats = %+v", st)
	}
}

// ---- Wake ----

func TestWake_ReturnsDueMessagesToPendingInTheirOrder(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{RedeliveryDelayNs: 100}})
	f.enqueue(0, msg("a"), msg("b"), msg("c"), msg("d", prio(9)), msg("e"), msg("never"))
	// Returned at different times: available at c 200, a 300, d 300, b 450, e 1100.
	returnAt := func(now int64, ids ...string) {
		t.Helper()
		f.ok(&fsmpb.Return{Session: "s", Now: now, DeliveryIds: f.held("s", ids...)})
	}
	returnAt(100, "c")
	returnAt(200, "d", "a")
	returnAt(350, "b")
	returnAt(1000, "e")
	if st := f.m.Stats(); st.Delayed != 5 || st.Pending != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	steps := []struct {
		now      int64
		returned int
		pending  []string
		nextWake int64
	}{
		{0, 0, []string{"never"}, 200},
		{199, 0, []string{"never"}, 200},
		{200, 1, []string{"c", "never"}, 300},
		{200, 0, []string{"c", "never"}, 300},
		{449, 2, []string{"d", "a", "c", "never"}, 450},
		{449, 0, []string{"d", "a", "c", "never"}, 450},
		{100, 0, []string{"d", "a", "c", "never"}, 450}, // a clock behind wakes nothing
		{math.MaxInt64, 2, []string{"d", "a", "b", "c", "e", "never"}, 0},
		{math.MaxInt64, 0, []string{"d", "a", "b", "c", "e", "never"}, 0},
	}
	for i, s := range steps {
		before := state(t, f.m)
		r := f.ok(&fsmpb.Wake{Now: s.now})
		if r.Returned != s.returned {
			t.Fatalf("step %d: Wake(%d) = %+v, want %d returned", i, s.now, r, s.returned)
		}
		if s.returned == 0 {
			sameState(t, f.m, before, "a Wake with nothing due")
		}
		if got := pendingIDs(f.m, 0); !slices.Equal(got, s.pending) {
			t.Fatalf("step %d: pending = %v, want %v", i, got, s.pending)
		}
		if got := f.m.NextWake(); got != s.nextWake {
			t.Fatalf("step %d: NextWake = %d, want %d", i, got, s.nextWake)
		}
		if st := f.m.Stats(); st.Delayed+st.Pending != 6 {
			t.Fatalf("step %d: Stats = %+v", i, st)
		}
		checkCounts(t, f.m)
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if ms := f.lookup(id); !ms.Pending || ms.AvailableAt != 0 || !ms.Redelivered || ms.DeliveryCount != 1 {
			t.Errorf("%s = %+v", id, ms)
		}
	}
}

func TestWake_LeavesEveryOtherStateAlone(t *testing.T) {
	f := everyState(t)
	if r := f.ok(&fsmpb.Wake{Now: delayedUntil}); r.Returned != 1 {
		t.Fatalf("Wake = %+v", r)
	}
	for _, id := range everyID {
		want := wantState(id)
		if id == idDelayed {
			want.AvailableAt, want.Pending = 0, true
		}
		if got := f.stateOf(id); got != want {
			t.Errorf("%s = %+v, want %+v", id, got, want)
		}
	}
	if st := f.m.Stats(); st.Delayed != 0 || st.Pending != 3 || st.Moving != 3 || st.Delivered != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

// ---- requeue: max deliveries ----

// requeueBy takes back the delivery d of message id held by session s,
// the way how says, at now.
func (f *member) requeueBy(how, s string, now int64, d uint64) {
	f.t.Helper()
	var r fsm.Result
	switch how {
	case "recover":
		r = f.ok(&fsmpb.Recover{Session: s, Now: now})
	case "release":
		r = f.ok(&fsmpb.Release{Session: s, Now: now})
		f.open(s)
	case "return":
		r = f.ok(&fsmpb.Return{Session: s, Now: now, DeliveryIds: []uint64{d}})
	default:
		f.t.Fatalf("no requeue %q", how)
	}
	if r.Returned != 1 {
		f.t.Fatalf("%s = %+v, want 1 returned", how, r)
	}
}

func TestRequeue_DeadAfterMaxDeliveries(t *testing.T) {
	for _, how := range []string{"recover", "release", "return"} {
		for _, maxd := range []uint32{1, 3} {
			t.Run(fmt.Sprintf("%s/max %d", how, maxd), func(t *testing.T) {
				f := newMember(t)
				f.open("s")
				f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxDeliveries: maxd}})
				f.enqueue(0, msg("a", expires(1000)), msg("b"))
				for n := uint32(1); n <= maxd; n++ {
					ds := f.deliver("s", 0, "a")
					if len(ds) != 1 || ds[0].DeliveryCount != n || ds[0].Redelivered != (n > 1) {
						t.Fatalf("delivery %d = %+v", n, ds)
					}
					f.requeueBy(how, "s", int64(n), ds[0].DeliveryID)
					ms := f.lookup("a")
					if dead := n == maxd; ms.Dead != dead || ms.Pending == dead || !ms.Redelivered || ms.DeliveryCount != n ||
						ms.Session != "" || ms.AvailableAt != 0 || ms.MovingTo != "" {
						t.Fatalf("after delivery %d of %d: %+v", n, maxd, ms)
					}
				}
				st := f.m.Stats()
				if st.Moving != 1 || st.Pending != 1 || st.Delivered != 0 || st.Delayed != 0 || st.DeadLettered != 0 {
					t.Fatalf("Stats = %+v", st)
				}
				aside := f.m.AsideMessages(10)
				if len(aside) != 1 || aside[0].Message.GetId() != "a" || !aside[0].Dead || aside[0].Target != "" ||
					!aside[0].Redelivered || aside[0].DeliveryCount != maxd {
					t.Fatalf("AsideMessages = %+v", aside)
				}
				if got := pendingIDs(f.m, 0); !slices.Equal(got, []string{"b"}) {
					t.Fatalf("pending = %v", got)
				}
				// Dead is not delivered, and stays through a Wake and a Purge.
				before := state(t, f.m)
				if ds := f.deliver("s", 0, "a"); len(ds) != 0 {
					t.Fatalf("dead message delivered: %+v", ds)
				}
				f.ok(&fsmpb.Wake{Now: math.MaxInt64})
				sameState(t, f.m, before, "a deliver and a wake of a dead message")
				if r := f.ok(&fsmpb.Purge{}); r.Removed != 1 {
					t.Fatalf("Purge = %+v", r)
				}
				f.absent("b")
				if ms := f.lookup("a"); !ms.Dead {
					t.Fatalf("a = %+v", ms)
				}
				// Expired, it goes whatever its state.
				if r := f.ok(&fsmpb.Expire{Now: 1000, MessageIds: []string{"a"}}); r.Removed != 1 {
					t.Fatalf("Expire = %+v", r)
				}
				if st := f.m.Stats(); st != (fsm.Stats{Sessions: 1}) {
					t.Fatalf("Stats = %+v", st)
				}
				checkCounts(t, f.m)
			})
		}
	}
}

func TestRequeue_NoMaxDeliveriesNeverDead(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	for n := uint32(1); n <= 20; n++ {
		ds := f.deliver("s", 0, "a")
		if len(ds) != 1 || ds[0].DeliveryCount != n {
			t.Fatalf("delivery %d = %+v", n, ds)
		}
		f.ok(&fsmpb.Recover{Session: "s", Now: int64(n)})
	}
	if ms := f.lookup("a"); !ms.Pending || ms.Dead {
		t.Fatalf("a = %+v", ms)
	}
}

func TestRequeue_MaxDeliveriesCountsEveryDeliveryInOneRecover(t *testing.T) {
	// One Recover takes back messages at different counts: each is judged
	// by its own.
	f := newMember(t)
	f.open("s")
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxDeliveries: 2}})
	f.enqueue(0, msg("a"), msg("b"))
	f.held("s", "a")
	f.ok(&fsmpb.Recover{Session: "s", Now: 1})
	f.held("s", "a", "b")
	if r := f.ok(&fsmpb.Recover{Session: "s", Now: 2}); r.Returned != 2 {
		t.Fatalf("Recover = %+v", r)
	}
	if a, b := f.lookup("a"), f.lookup("b"); !a.Dead || b.Dead || !b.Pending || b.DeliveryCount != 1 {
		t.Fatalf("a = %+v, b = %+v", a, b)
	}
}

// A front-end that got no answer sends the same Recover attempt again. The
// first was applied, and the member delivered the returned message to the
// session again before the repeat came: the repeat must not take that
// delivery back, which would count a delivery the application never saw and
// dead-letter the message early, and it answers the first's watermark. Also
// after a snapshot, which a new leader may have restored in between. A new
// attempt recovers as usual.
func TestRecover_RepeatedAttemptChangesNothing(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxDeliveries: 2}})
	f.enqueue(0, msg("a"))
	f.held("s", "a")
	first := f.ok(&fsmpb.Recover{Session: "s", Now: 1, Attempt: 1})
	if first.Returned != 1 {
		t.Fatalf("first Recover = %+v", first)
	}
	f.held("s", "a")
	repeat := func(how string, m *fsm.Member, index uint64) {
		t.Helper()
		before := state(t, m)
		rs, err := m.Apply(index, entry(t, &fsmpb.Recover{Session: "s", Now: 2, Attempt: 1}))
		if err != nil {
			t.Fatal(err)
		}
		if r := rs[0]; r.Err != nil || r.Returned != 0 || r.Watermark != first.Watermark {
			t.Errorf("%s: repeated Recover = %+v, want nothing returned and watermark %d", how, r, first.Watermark)
		}
		sameState(t, m, before, how+": a repeated Recover")
		if a, _ := m.Lookup("a"); a.Session != "s" || a.DeliveryCount != 2 || a.Dead {
			t.Errorf("%s: after the repeat a = %+v, want still delivered to s, count 2", how, a)
		}
	}
	repeat("restored from a snapshot", restore(t, snapshotBytes(t, f.m)), f.idx+1)
	f.idx++
	repeat("applied", f.m, f.idx)
	if r := f.ok(&fsmpb.Recover{Session: "s", Now: 3, Attempt: 2}); r.Returned != 1 || r.Watermark <= first.Watermark {
		t.Fatalf("a new attempt: Recover = %+v", r)
	}
	if a := f.lookup("a"); !a.Dead {
		t.Fatalf("a after two deliveries and a new Recover = %+v, want dead (max 2)", a)
	}
}

// Two recovers of one session overlap (the client gave up on the first and
// recovered again): the first, resent after the second was applied, must
// not take back what was delivered since, as the second took back all it
// would have.
func TestRecover_AnOlderAttemptAfterANewerChangesNothing(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	f.held("s", "a")
	f.ok(&fsmpb.Recover{Session: "s", Now: 1, Attempt: 1})
	f.held("s", "a")
	second := f.ok(&fsmpb.Recover{Session: "s", Now: 2, Attempt: 2})
	f.held("s", "a")
	before := state(t, f.m)
	if r := f.ok(&fsmpb.Recover{Session: "s", Now: 3, Attempt: 1}); r.Returned != 0 || r.Watermark != second.Watermark {
		t.Errorf("attempt 1 after 2 = %+v, want nothing returned and watermark %d", r, second.Watermark)
	}
	sameState(t, f.m, before, "an older attempt")
	if a := f.lookup("a"); a.Session != "s" || a.DeliveryCount != 3 {
		t.Errorf("a = %+v, want delivered to s, count 3", a)
	}
}

// An older leader, which knows no attempts, forwards a newer front-end's
// Recover with its attempt as a field it does not know, in a version 1
// entry, and its replicas recover in full each time: a replica of this
// build must do the same, or the two would diverge.
func TestRecover_AttemptInAVersion1EntryIsIgnored(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	for range 2 {
		f.held("s", "a")
		f.idx++
		rs, err := f.m.Apply(f.idx, rawEntry(t, 1, fsm.MustCommand(&fsmpb.Recover{Session: "s", Attempt: 1})))
		if err != nil || rs[0].Returned != 1 {
			t.Fatalf("Recover in a version 1 entry = %+v, %v; want a full recover", rs, err)
		}
	}
}

// Likewise an older leader forwards an unseen Return with unseen as a
// field it does not know, in a version 1 entry, and its replicas requeue
// marked and counted: so must this build's.
func TestReturn_UnseenInAnOlderEntryIsIgnored(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	d := f.held("s", "a")
	f.idx++
	if _, err := f.m.Apply(f.idx, rawEntry(t, 2, fsm.MustCommand(&fsmpb.Return{Session: "s", DeliveryIds: d, Unseen: true}))); err != nil {
		t.Fatal(err)
	}
	if ms := f.lookup("a"); !ms.Redelivered || ms.DeliveryCount != 1 {
		t.Fatalf("a after an unseen Return in a version 2 entry = %+v; want marked, count 1, as an older build applies it", ms)
	}
}

// ---- requeue: redelivery delay ----

func TestRedeliveryDelay_GrowsWithTheDeliveryCountUpToTheCap(t *testing.T) {
	const now = 1_000_000
	cases := []struct {
		name       string
		delay, cap int64
		backoff    uint32
		count      uint32 // delivery count when returned
		wait       int64  // available at now + wait
	}{
		{"first delivery", 100, 0, 2, 1, 100},
		{"no backoff", 100, 0, 0, 5, 100},
		{"backoff 1", 100, 0, 1, 5, 100},
		{"backoff 2, second delivery", 100, 0, 2, 2, 200},
		{"backoff 2, third delivery", 100, 0, 2, 3, 400},
		{"backoff 2, fourth delivery", 100, 0, 2, 4, 800},
		{"backoff 3, third delivery", 100, 0, 3, 3, 900},
		{"backoff 10, eighth delivery", 100, 0, 10, 8, 1_000_000_000},
		{"under the cap", 100, 500, 2, 3, 400},
		{"at the cap", 100, 400, 2, 3, 400},
		{"over the cap", 100, 500, 2, 4, 500},
		{"far over the cap", 100, 500, 2, 60, 500},
		{"cap below the delay", 100, 50, 2, 1, 50},
		{"cap below the delay, no backoff", 100, 50, 0, 1, 50},
		{"huge backoff is capped", 1000, 1e12, 1 << 31, 3, 1e12},
	}
	for _, c := range cases {
		for _, how := range []string{"recover", "release", "return"} {
			t.Run(c.name+"/"+how, func(t *testing.T) {
				f := newMember(t)
				f.open("s")
				f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{RedeliveryDelayNs: c.delay, RedeliveryBackoff: c.backoff, RedeliveryMaxDelayNs: c.cap}})
				// A message moved here after count-1 deliveries elsewhere.
				m := msg("a")
				m.DeliveryCount, m.Redelivered = c.count-1, c.count > 1
				f.enqueue(0, m)
				ds := f.deliver("s", now, "a")
				if len(ds) != 1 || ds[0].DeliveryCount != c.count {
					t.Fatalf("delivery = %+v", ds)
				}
				f.requeueBy(how, "s", now, ds[0].DeliveryID)
				at := now + c.wait
				if ms := f.lookup("a"); ms.AvailableAt != at || ms.Pending || !ms.Redelivered || ms.DeliveryCount != c.count {
					t.Fatalf("a = %+v, want available at %d", ms, at)
				}
				if got := f.m.NextWake(); got != at {
					t.Fatalf("NextWake = %d, want %d", got, at)
				}
				if st := f.m.Stats(); st.Delayed != 1 || st.Pending != 0 {
					t.Fatalf("Stats = %+v", st)
				}
			})
		}
	}
}

func TestRedeliveryDelay_UnboundedGrowthDoesNotWrapAround(t *testing.T) {
	// Without a cap the delay grows as far as it goes, but a message is
	// never made available in the past by an overflow.
	cases := []struct {
		name    string
		s       *fsmpb.MemberSettings
		count   uint32
		atLeast int64
	}{
		{"no cap, big backoff", &fsmpb.MemberSettings{RedeliveryDelayNs: 1e9, RedeliveryBackoff: 1000}, 20, 1 << 60},
		{"no cap, huge delay", &fsmpb.MemberSettings{RedeliveryDelayNs: math.MaxInt64}, 1, 1 << 60},
		{"largest cap, huge delay", &fsmpb.MemberSettings{RedeliveryDelayNs: math.MaxInt64, RedeliveryMaxDelayNs: math.MaxInt64}, 1, 1 << 60},
		{"largest cap, big backoff", &fsmpb.MemberSettings{RedeliveryDelayNs: 3600e9, RedeliveryBackoff: 2, RedeliveryMaxDelayNs: math.MaxInt64}, 64, 1 << 60},
	}
	const now = 1_700_000_000_000_000_000 // 2023, in Unix ns
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newMember(t)
			f.open("s")
			f.ok(&fsmpb.Configure{Settings: c.s})
			m := msg("a")
			m.DeliveryCount, m.Redelivered = c.count-1, c.count > 1
			f.enqueue(0, m)
			f.held("s", "a")
			f.ok(&fsmpb.Recover{Session: "s", Now: now})
			ms := f.lookup("a")
			if ms.AvailableAt < now+c.atLeast {
				t.Fatalf("available at %d, now %d: a delay of %d", ms.AvailableAt, int64(now), ms.AvailableAt-now)
			}
			if r := f.ok(&fsmpb.Wake{Now: now + 1e18}); r.Returned != 0 {
				t.Fatalf("Wake 30 years later returned it: %+v", r)
			}
		})
	}
}

func TestRedeliveryDelay_NotDeliveredBeforeWakeThenMarked(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{RedeliveryDelayNs: 100}})
	f.enqueue(0, msg("a"))
	f.held("s", "a")
	f.ok(&fsmpb.Recover{Session: "s", Now: 1000})
	if ds := f.deliver("s", 1050, "a"); len(ds) != 0 {
		t.Fatalf("delivered while delayed: %+v", ds)
	}
	if r := f.ok(&fsmpb.Wake{Now: 1099}); r.Returned != 0 {
		t.Fatalf("woke early: %+v", r)
	}
	if r := f.ok(&fsmpb.Wake{Now: 1100}); r.Returned != 1 {
		t.Fatalf("wake at the end of the delay: %+v", r)
	}
	ds := f.deliver("s", 1100, "a")
	if len(ds) != 1 || !ds[0].Redelivered || ds[0].DeliveryCount != 2 {
		t.Fatalf("after wake: %+v", ds)
	}
	checkCounts(t, f.m)
}

// A message at its last delivery is dead, not delayed: the delay is for
// messages that will be delivered again.
func TestRedeliveryDelay_MaxDeliveriesComesFirst(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxDeliveries: 1, RedeliveryDelayNs: 100}})
	f.enqueue(0, msg("a"))
	f.held("s", "a")
	f.ok(&fsmpb.Recover{Session: "s", Now: 1000})
	if st := f.lookup("a"); !st.Dead || st.AvailableAt != 0 {
		t.Fatalf("a = %+v; want dead, not delayed", st)
	}
	if st := f.m.Stats(); st.Delayed != 0 || st.Moving != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

// Entries written before Recover, Release and Return carried the time read
// as now 0: the delay then ends at the next Wake.
func TestRedeliveryDelay_OldEntriesWithoutNowWakeAtOnce(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{RedeliveryDelayNs: 100}})
	f.enqueue(0, msg("a"))
	f.held("s", "a")
	f.ok(&fsmpb.Recover{Session: "s"})
	if r := f.ok(&fsmpb.Wake{Now: 1_700_000_000_000_000_000}); r.Returned != 1 {
		t.Fatalf("wake = %+v", r)
	}
}

// A moved message keeps its delivery count and mark, through a snapshot
// too; its next delivery counts on from there.
func TestEnqueue_MovedMessageKeepsItsCountAndMark(t *testing.T) {
	f := newMember(t)
	f.open("s")
	m := msg("a")
	m.DeliveryCount, m.Redelivered = 3, true
	f.enqueue(0, m)
	if st := f.lookup("a"); !st.Pending || !st.Redelivered || st.DeliveryCount != 3 {
		t.Fatalf("a = %+v", st)
	}
	f.m = restore(t, snapshotBytes(t, f.m))
	ds := f.deliver("s", 0, "a")
	if len(ds) != 1 || !ds[0].Redelivered || ds[0].DeliveryCount != 4 {
		t.Fatalf("delivery after the move and a snapshot: %+v", ds)
	}
}

func TestPurge_LeavesDeadAndMovingRemovesDelayed(t *testing.T) {
	f := everyState(t)
	r := f.ok(&fsmpb.Purge{})
	if r.Removed != 3 { // pending, redelivered, delayed
		t.Fatalf("purge = %+v", r)
	}
	f.absent(idPending, idRedelivered, idDelayed)
	for _, id := range []string{idDelivered, idDead, idMoving, idDeadMoving} {
		if got := f.stateOf(id); got != wantState(id) {
			t.Errorf("%s after purge = %+v; want %+v", id, got, wantState(id))
		}
	}
	checkCounts(t, f.m)
}

func TestExpire_RemovesExpiredMessagesInEveryState(t *testing.T) {
	f := everyState(t)
	r := f.ok(&fsmpb.Expire{Now: everyExpiry, MessageIds: everyID})
	if r.Removed != len(everyID) {
		t.Fatalf("expire = %+v", r)
	}
	f.absent(everyID...)
	if st := f.m.Stats(); st != (fsm.Stats{Sessions: 1, DeadLettered: st.DeadLettered, DedupIDs: st.DedupIDs}) {
		t.Fatalf("Stats after expiring everything = %+v", st)
	}
	if f.m.NextWake() != 0 || len(f.m.AsideMessages(10)) != 0 {
		t.Fatal("expired messages left in the delayed or aside indexes")
	}
	checkCounts(t, f.m)
}
