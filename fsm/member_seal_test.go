package fsm_test

import (
	"errors"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A sealed member refuses new messages, whole batches, and changes
// nothing; a copy its dedup window drops is still answered; Seal reports
// what the member holds; unsealing takes messages again.
func TestSeal_RefusesNewMessagesAndCountsWhatIsHeld(t *testing.T) {
	f := newMember(t)
	f.enqueue(0, msg("a", dedup("d")))
	if r := f.ok(&fsmpb.Seal{Sealed: true}); r.Held != 1 {
		t.Fatalf("seal = %+v; want 1 held", r)
	}
	before := state(t, f.m)
	r := f.do(&fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("b"), msg("c")}})
	if !errors.Is(r.Err, fsm.ErrSealed) {
		t.Fatalf("enqueue on a sealed member: %v; want ErrSealed", r.Err)
	}
	sameState(t, f.m, before, "a refused enqueue")
	if r := f.ok(&fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("a2", dedup("d"))}}); len(r.Enqueued) != 1 || !r.Enqueued[0].Duplicate || r.Enqueued[0].ID != "a" {
		t.Fatalf("a dropped copy on a sealed member = %+v", r)
	}
	if !f.m.Sealed() || !restore(t, snapshotBytes(t, f.m)).Sealed() {
		t.Fatal("the seal did not survive a snapshot")
	}
	f.ok(&fsmpb.Seal{Sealed: false})
	f.enqueue(0, msg("b"))
}

// Retarget gives messages already moving a new target, and leaves waiting
// ones alone; a plain Move leaves moving ones alone.
func TestMove_RetargetChangesOnlyMovingMessages(t *testing.T) {
	f := newMember(t)
	f.enqueue(0, msg("a"), msg("b"))
	f.ok(&fsmpb.Move{Target: "q#1", MessageIds: []string{"a"}})
	if r := f.ok(&fsmpb.Move{Target: "q#2", MessageIds: []string{"a", "b"}, Retarget: true}); r.Moved != 1 {
		t.Fatalf("retarget = %+v; want 1", r)
	}
	if a, b := f.lookup("a"), f.lookup("b"); a.MovingTo != "q#2" || !b.Pending {
		t.Fatalf("after retarget: a %+v, b %+v", a, b)
	}
	if r := f.ok(&fsmpb.Move{Target: "q#3", MessageIds: []string{"a"}}); r.Moved != 0 || f.lookup("a").MovingTo != "q#2" {
		t.Fatalf("a plain move of a moving message = %+v", r)
	}
	checkCounts(t, f.m)
}

// A renewed member numbers its deliveries on from the member it replaces:
// Seal reports where that one got to, Configure sets where the new one
// starts (never lower), and a snapshot keeps it.
func TestConfigure_FirstDeliveryIDContinuesTheNumbering(t *testing.T) {
	old := newMember(t)
	old.ok(&fsmpb.OpenSession{Session: "s", Owner: "fe"})
	old.enqueue(0, msg("a"), msg("b"))
	old.deliver("s", 0, "a", "b")
	next := old.ok(&fsmpb.Seal{Sealed: true}).Watermark
	if next != 3 {
		t.Fatalf("seal after two deliveries: watermark %d; want 3", next)
	}

	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: fsm.DefaultSettings(), FirstDeliveryId: next})
	f.ok(&fsmpb.Configure{Settings: fsm.DefaultSettings(), FirstDeliveryId: 1})
	f = &member{t: t, m: restore(t, snapshotBytes(t, f.m)), idx: f.idx}
	f.ok(&fsmpb.OpenSession{Session: "s", Owner: "fe"})
	f.enqueue(0, msg("c"))
	if ds := f.deliver("s", 0, "c"); len(ds) != 1 || ds[0].DeliveryID != next {
		t.Fatalf("first delivery of the renewed member: %+v; want id %d", ds, next)
	}
}
