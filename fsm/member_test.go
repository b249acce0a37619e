package fsm_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// ---- Enqueue ----

func TestEnqueue_StoresMessagesPendingInPriorityThenArrivalOrder(t *testing.T) {
	f := newMember(t)
	got := f.enqueue(100,
		msg("a", prio(4)),
		msg("b", prio(9)),
		msg("c", prio(0)),
		msg("d", prio(4)),
		msg("e", prio(9)),
	)
	want := []fsm.Enqueued{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "e"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Enqueued = %+v, want %+v", got, want)
	}
	// A second entry arrives later: same priority goes after.
	f.enqueue(101, msg("f", prio(9)), msg("g", prio(4)))
	if got, want := pendingIDs(f.m, 0), []string{"b", "e", "f", "a", "d", "g", "c"}; !slices.Equal(got, want) {
		t.Fatalf("ScanPending = %v, want %v", got, want)
	}
	st := f.m.Stats()
	if st.Pending != 7 || st.Delivered != 0 {
		t.Fatalf("Stats = %+v, want 7 pending", st)
	}
	ms := f.lookup("b")
	if !ms.Pending || ms.Redelivered || ms.DeliveryCount != 0 || ms.Session != "" || ms.Message.GetPriority() != 9 {
		t.Fatalf("Lookup(b) = %+v", ms)
	}
	checkCounts(t, f.m)
}

func TestScanPending_StopsWhenFnReturnsFalseAndSkipsExpired(t *testing.T) {
	f := newMember(t)
	f.enqueue(0, msg("a", prio(9), expires(50)), msg("b", prio(9)), msg("c", prio(5)), msg("d", prio(1)))
	var got []string
	f.m.ScanPending(50, func(id []byte) bool { got = append(got, string(id)); return len(got) < 2 })
	if want := []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("ScanPending(50) stopping after 2 = %v, want %v", got, want)
	}
	if got, want := pendingIDs(f.m, 49), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("ScanPending(49) = %v, want %v", got, want)
	}
}

func TestEnqueue_RejectsInvalidMessagesAndChangesNothing(t *testing.T) {
	cases := []struct {
		name string
		msgs []*fsmpb.Message
		want error
	}{
		{"priority 10", []*fsmpb.Message{msg("x", prio(10))}, fsm.ErrInvalidMessage},
		{"priority max uint32", []*fsmpb.Message{msg("x", prio(^uint32(0)))}, fsm.ErrInvalidMessage},
		{"empty id", []*fsmpb.Message{msg("")}, fsm.ErrInvalidMessage},
		{"negative expiration", []*fsmpb.Message{msg("x", expires(-1))}, fsm.ErrInvalidMessage},
		{"one bad message rejects the batch", []*fsmpb.Message{msg("x"), msg("y", prio(12)), msg("z")}, fsm.ErrInvalidMessage},
		{"id already stored", []*fsmpb.Message{msg("x"), msg("old")}, fsm.ErrDuplicateMessageID},
		{"id twice in the batch", []*fsmpb.Message{msg("x"), msg("y"), msg("x")}, fsm.ErrDuplicateMessageID},
		{"id twice with different dedup ids", []*fsmpb.Message{msg("x", dedup("d1")), msg("x", dedup("d2"))}, fsm.ErrDuplicateMessageID},
		{"new dedup id on a stored id", []*fsmpb.Message{msg("old", dedup("fresh"))}, fsm.ErrDuplicateMessageID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newMember(t)
			f.enqueue(10, msg("old", dedup("d-old")))
			before := state(t, f.m)
			r := f.do(&fsmpb.Enqueue{Now: 20, Messages: c.msgs})
			mustErr(t, r.Err, c.want, "enqueue")
			if r.Enqueued != nil {
				t.Errorf("a rejected enqueue reports Enqueued %+v", r.Enqueued)
			}
			sameState(t, f.m, before, "a rejected enqueue")
			f.absent("x", "y", "z")
			// The dedup ids of the rejected batch were not remembered.
			if got := f.enqueue(30, msg("x2", dedup("d1"))); got[0].Duplicate {
				t.Errorf("dedup id of a rejected batch was remembered: %+v", got)
			}
		})
	}
}

func TestEnqueue_RejectsOverMaxBytesAndChangesNothing(t *testing.T) {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxBytes: 10, DedupWindowNs: fsm.DefaultDedupWindowNs, DedupMaxIds: 10}})
	f.enqueue(1, msg("a", body("12345"))) // 5 bytes
	before := state(t, f.m)
	r := f.do(&fsmpb.Enqueue{Now: 2, Messages: []*fsmpb.Message{msg("b", body("123")), msg("c", body("123"), dedup("dc"))}})
	mustErr(t, r.Err, fsm.ErrMemberFull, "enqueue over the limit")
	sameState(t, f.m, before, "a rejected enqueue")
	f.absent("b", "c")
	if st := f.m.Stats(); st.Bytes != 5 || st.Pending != 1 || st.DedupIDs != 0 {
		t.Fatalf("Stats = %+v, want 5 bytes, 1 pending, no dedup id", st)
	}
	// Properties count toward the size: 2 body + "k"+"vv" = 5, exactly the limit.
	f.enqueue(3, msg("d", body("12"), props("k", "vv"), dedup("DD")))
	if st := f.m.Stats(); st.Bytes != 10 {
		t.Fatalf("Bytes = %d, want 10", st.Bytes)
	}
	mustErr(t, f.do(&fsmpb.Enqueue{Now: 4, Messages: []*fsmpb.Message{msg("e", body("x"))}}).Err, fsm.ErrMemberFull, "one byte over")
	// A duplicate adds nothing and so fits.
	if got := f.enqueue(5, msg("d2", body("123"), dedup("DD"))); !got[0].Duplicate {
		t.Fatalf("resend = %+v, want a duplicate", got)
	}
	f.open("s")
	ds := f.deliver("s", 6, "a")
	f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{ds[0].DeliveryID}})
	if st := f.m.Stats(); st.Bytes != 5 {
		t.Fatalf("after ack Bytes = %d, want 5", st.Bytes)
	}
	f.enqueue(7, msg("e", body("12345")))
}

// max_messages bounds the messages a member holds in every state, a
// transaction's prepared sends included; a duplicate adds none.
func TestEnqueue_RejectsOverMaxMessagesAndChangesNothing(t *testing.T) {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxMessages: 3, DedupWindowNs: fsm.DefaultDedupWindowNs, DedupMaxIds: 10}})
	f.enqueue(1, msg("a", dedup("da")), msg("b"))
	before := state(t, f.m)
	mustErr(t, f.do(&fsmpb.Enqueue{Now: 2, Messages: []*fsmpb.Message{msg("c"), msg("d")}}).Err, fsm.ErrMemberFull, "two past three")
	sameState(t, f.m, before, "a refused enqueue")
	if got := f.enqueue(3, msg("a2", dedup("da")), msg("c")); !got[0].Duplicate || got[1].Duplicate {
		t.Fatalf("a duplicate and a third message: %+v", got)
	}
	f.open("s")
	ds := f.deliver("s", 4, "a")
	mustErr(t, f.do(&fsmpb.Enqueue{Now: 5, Messages: []*fsmpb.Message{msg("d")}}).Err, fsm.ErrMemberFull, "a delivered message still counts")
	f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{ds[0].DeliveryID}})
	prepared := f.do(&fsmpb.TxPrepare{Tx: "t1", Primary: "q#0", Session: "s", Now: 6, Messages: []*fsmpb.Message{msg("e")}})
	if prepared.Err != nil {
		t.Fatalf("a prepared send in the room an ack made: %v", prepared.Err)
	}
	mustErr(t, f.do(&fsmpb.Enqueue{Now: 7, Messages: []*fsmpb.Message{msg("f")}}).Err, fsm.ErrMemberFull, "a prepared send counts")
	f.ok(&fsmpb.TxDecide{Tx: "t1", Commit: false, Now: 8})
	f.enqueue(9, msg("f"))
}

func TestEnqueue_DedupDropsSecondWithinWindow(t *testing.T) {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{DedupWindowNs: 100, DedupMaxIds: 10}})
	if got := f.enqueue(1000, msg("m1", dedup("D"))); got[0] != (fsm.Enqueued{ID: "m1"}) {
		t.Fatalf("first = %+v", got)
	}
	// A resend with another message id, and one with the same id, just inside the window.
	got := f.enqueue(1099, msg("m2", dedup("D")), msg("m1", dedup("D")), msg("m3"))
	want := []fsm.Enqueued{{ID: "m1", Duplicate: true}, {ID: "m1", Duplicate: true}, {ID: "m3"}}
	if !slices.Equal(got, want) {
		t.Fatalf("resends = %+v, want %+v", got, want)
	}
	f.absent("m2")
	if st := f.m.Stats(); st.Pending != 2 || st.DedupIDs != 1 {
		t.Fatalf("Stats = %+v, want 2 pending and 1 dedup id", st)
	}
	// Within one batch the second of two new messages is the duplicate.
	got = f.enqueue(1099, msg("n1", dedup("E")), msg("n2", dedup("E")))
	if want := []fsm.Enqueued{{ID: "n1"}, {ID: "n1", Duplicate: true}}; !slices.Equal(got, want) {
		t.Fatalf("batch = %+v, want %+v", got, want)
	}
	f.absent("n2")
	// Acknowledged and gone, the message is still remembered (promise 5).
	f.open("s")
	ds := f.deliver("s", 1099, "m1")
	f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{ds[0].DeliveryID}})
	if got := f.enqueue(1099, msg("m1", dedup("D"))); got[0] != (fsm.Enqueued{ID: "m1", Duplicate: true}) {
		t.Fatalf("resend after ack = %+v, want a duplicate", got)
	}
	f.absent("m1")
}

func TestEnqueue_DedupForgetsAfterWindow(t *testing.T) {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{DedupWindowNs: 100, DedupMaxIds: 10}})
	f.enqueue(1000, msg("m1", dedup("D")))
	f.enqueue(1050, msg("k1", dedup("K")))
	// At 1100 the first id is exactly one window old: forgotten.
	got := f.enqueue(1100, msg("m2", dedup("D")), msg("k2", dedup("K")))
	if want := []fsm.Enqueued{{ID: "m2"}, {ID: "k1", Duplicate: true}}; !slices.Equal(got, want) {
		t.Fatalf("at the window's end = %+v, want %+v", got, want)
	}
	f.lookup("m2")
	// The new message now holds D.
	if got := f.enqueue(1150, msg("m3", dedup("D"))); got[0] != (fsm.Enqueued{ID: "m2", Duplicate: true}) {
		t.Fatalf("after re-store = %+v, want a duplicate of m2", got)
	}
	if st := f.m.Stats(); st.DedupIDs != 1 {
		// K (at 1050) was evicted at 1150; D (at 1100) remains.
		t.Fatalf("DedupIDs = %d, want 1", st.DedupIDs)
	}
}

func TestEnqueue_DedupDefaultWindowIsTwoMinutes(t *testing.T) {
	f := newMember(t)
	if s := f.m.Settings(); s.GetDedupWindowNs() != fsm.DefaultDedupWindowNs || s.GetDedupMaxIds() != fsm.DefaultDedupMaxIDs || s.GetMaxBytes() != 0 {
		t.Fatalf("default settings = %v", s)
	}
	f.enqueue(0, msg("m1", dedup("D")))
	if got := f.enqueue(fsm.DefaultDedupWindowNs-1, msg("m2", dedup("D"))); !got[0].Duplicate {
		t.Fatalf("inside the default window = %+v", got)
	}
	if got := f.enqueue(fsm.DefaultDedupWindowNs, msg("m3", dedup("D"))); got[0].Duplicate {
		t.Fatalf("after the default window = %+v", got)
	}
}

func TestEnqueue_DedupForgetsOldestBeyondMaxIDs(t *testing.T) {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{DedupWindowNs: 1e9, DedupMaxIds: 2}})
	f.enqueue(1, msg("m1", dedup("D1")))
	f.enqueue(2, msg("m2", dedup("D2")), msg("m3", dedup("D3")))
	if st := f.m.Stats(); st.DedupIDs != 2 {
		t.Fatalf("DedupIDs = %d, want 2", st.DedupIDs)
	}
	got := f.enqueue(3, msg("r1", dedup("D1")), msg("r3", dedup("D3")))
	if want := []fsm.Enqueued{{ID: "r1"}, {ID: "m3", Duplicate: true}}; !slices.Equal(got, want) {
		t.Fatalf("resends = %+v, want %+v", got, want)
	}
	// r1 took D1's place and pushed D2 out.
	if got := f.enqueue(4, msg("r2", dedup("D2"))); got[0].Duplicate {
		t.Fatalf("D2 should be forgotten: %+v", got)
	}
	// Lowering the limit forgets the oldest at once.
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{DedupWindowNs: 1e9, DedupMaxIds: 1}})
	if st := f.m.Stats(); st.DedupIDs != 1 {
		t.Fatalf("after lowering the limit DedupIDs = %d, want 1", st.DedupIDs)
	}
	if got := f.enqueue(5, msg("q2", dedup("D2")), msg("q1", dedup("D1"))); got[0] != (fsm.Enqueued{ID: "r2", Duplicate: true}) || got[1].Duplicate {
		t.Fatalf("after lowering = %+v, want D2 remembered and D1 forgotten", got)
	}
}

func TestEnqueue_DoesNotKeepEntryBytes(t *testing.T) {
	f := newMember(t)
	data := entry(t, &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("a", body("payload"), props("k", "v"))}})
	if _, err := f.m.Apply(1, data); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 0xff
	}
	ms := f.lookup("a")
	if string(ms.Message.GetBody()) != "payload" || ms.Message.GetProperties()["k"] != "v" {
		t.Fatalf("stored message changed with the entry's bytes: %v", ms.Message)
	}
}

// ---- Deliver ----

func TestDeliver_HandsMessagesInAskedOrderWithRisingIDs(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a", prio(1)), msg("b", prio(9)), msg("c"))
	ds := f.deliver("s", 0, "c", "a")
	if len(ds) != 2 || ds[0].Message.GetId() != "c" || ds[1].Message.GetId() != "a" {
		t.Fatalf("Delivered = %+v", ds)
	}
	for i, d := range ds {
		if d.DeliveryID != uint64(i+1) || d.Redelivered || d.DeliveryCount != 1 {
			t.Errorf("delivery %d = %+v, want id %d, first delivery", i, d, i+1)
		}
	}
	ms := f.lookup("c")
	if ms.Pending || ms.Session != "s" || ms.DeliveryID != 1 || ms.DeliveryCount != 1 {
		t.Fatalf("Lookup(c) = %+v", ms)
	}
	if got := pendingIDs(f.m, 0); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("pending = %v, want [b]", got)
	}
	if st := f.m.Stats(); st.Pending != 1 || st.Delivered != 2 {
		t.Fatalf("Stats = %+v", st)
	}
	if ss := f.m.Sessions(); len(ss) != 1 || ss[0] != (fsm.SessionInfo{ID: "s", Owner: owner, Deliveries: 2}) {
		t.Fatalf("Sessions = %+v", ss)
	}
	checkCounts(t, f.m)
}

func TestDeliver_SkipsIDsThatAreNotPending(t *testing.T) {
	f := newMember(t)
	f.open("s1", "s2")
	f.enqueue(0, msg("a"), msg("b"), msg("acked"))
	f.deliver("s1", 0, "a")
	d := f.deliver("s1", 0, "acked")
	f.ok(&fsmpb.Ack{Session: "s1", DeliveryIds: []uint64{d[0].DeliveryID}})
	before := state(t, f.m)
	ds := f.deliver("s2", 0, "a", "unknown", "acked")
	if len(ds) != 0 {
		t.Fatalf("delivered %+v, want nothing", ds)
	}
	sameState(t, f.m, before, "a deliver of nothing")
	// Asking twice for the same id in one command delivers it once.
	ds = f.deliver("s2", 0, "b", "b")
	if len(ds) != 1 || ds[0].Message.GetId() != "b" {
		t.Fatalf("delivered %+v, want b once", ds)
	}
	if ms := f.lookup("a"); ms.Session != "s1" {
		t.Fatalf("a moved to %q", ms.Session)
	}
}

func TestDeliver_SkipsMessagesExpiredAtNow(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("at100", expires(100)), msg("at101", expires(101)), msg("never"))
	ds := f.deliver("s", 100, "at100", "at101", "never")
	var got []string
	for _, d := range ds {
		got = append(got, d.Message.GetId())
	}
	if want := []string{"at101", "never"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v at 100, want %v", got, want)
	}
	// The expired message is still stored and pending until an Expire.
	if ms := f.lookup("at100"); !ms.Pending {
		t.Fatalf("at100 = %+v", ms)
	}
	if got := pendingIDs(f.m, 100); len(got) != 0 {
		t.Fatalf("ScanPending(100) = %v, want nothing", got)
	}
	if got := pendingIDs(f.m, 99); !slices.Equal(got, []string{"at100"}) {
		t.Fatalf("ScanPending(99) = %v", got)
	}
}

func TestDeliver_RejectsUnknownSessionAndChangesNothing(t *testing.T) {
	f := newMember(t)
	f.enqueue(0, msg("a"))
	before := state(t, f.m)
	r := f.do(&fsmpb.Deliver{Session: "nobody", MessageIds: []string{"a"}})
	mustErr(t, r.Err, fsm.ErrUnknownSession, "deliver")
	if r.Delivered != nil {
		t.Fatalf("Delivered = %+v", r.Delivered)
	}
	sameState(t, f.m, before, "a rejected deliver")
}

func TestDeliver_MessageGoesToOneSessionAtATime(t *testing.T) {
	f := newMember(t)
	f.open("s1", "s2")
	f.enqueue(0, msg("a"))
	rs := f.apply(
		&fsmpb.Deliver{Session: "s1", MessageIds: []string{"a"}},
		&fsmpb.Deliver{Session: "s2", MessageIds: []string{"a"}},
	)
	if len(rs[0].Delivered) != 1 || len(rs[1].Delivered) != 0 {
		t.Fatalf("results = %+v", rs)
	}
	if ss := f.m.Sessions(); ss[0].Deliveries != 1 || ss[1].Deliveries != 0 {
		t.Fatalf("Sessions = %+v", ss)
	}
}

// ---- Ack ----

// held delivers ids to session s, returning the delivery ids in order.
func (f *member) held(s string, ids ...string) []uint64 {
	f.t.Helper()
	ds := f.deliver(s, 0, ids...)
	if len(ds) != len(ids) {
		f.t.Fatalf("delivered %d of %d", len(ds), len(ids))
	}
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = d.DeliveryID
	}
	return out
}

func TestAck_RemovesListedDeliveries(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"), msg("b"), msg("c"))
	d := f.held("s", "a", "b", "c")
	r := f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{d[2], d[0]}})
	if r.Acked != 2 || r.Rejected != nil {
		t.Fatalf("Ack = %+v, want 2 acked", r)
	}
	f.absent("a", "c")
	if ms := f.lookup("b"); ms.Session != "s" {
		t.Fatalf("b = %+v", ms)
	}
	if st := f.m.Stats(); st.Delivered != 1 || st.Pending != 0 || st.Bytes != int64(len("body-b")) {
		t.Fatalf("Stats = %+v", st)
	}
	checkCounts(t, f.m)
}

func TestAck_UpToAcksEveryDeliveryAtOrBelow(t *testing.T) {
	f := newMember(t)
	f.open("s", "other")
	f.enqueue(0, msg("a"), msg("b"), msg("o"), msg("c"), msg("d"))
	da := f.held("s", "a", "b")
	do := f.held("other", "o")
	dc := f.held("s", "c", "d")
	r := f.ok(&fsmpb.Ack{Session: "s", UpTo: dc[0]})
	if r.Acked != 3 || r.Rejected != nil {
		t.Fatalf("Ack up_to = %+v, want 3 acked", r)
	}
	f.absent("a", "b", "c")
	if ms := f.lookup("o"); ms.Session != "other" || ms.DeliveryID != do[0] {
		t.Fatalf("another session's delivery below up_to was touched: %+v", ms)
	}
	f.lookup("d")
	// Listed ids and up_to together; a listed id at or below up_to counts once.
	f.enqueue(1, msg("e"), msg("g"))
	de := f.held("s", "e", "g")
	r = f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{de[1], da[0]}, UpTo: de[0]})
	if r.Acked != 3 || !slices.Equal(r.Rejected, []uint64{da[0]}) {
		t.Fatalf("Ack ids+up_to = %+v, want 3 acked and %d rejected", r, da[0])
	}
	f.absent("d", "e", "g")
	if st := f.m.Stats(); st.Delivered != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	// up_to with nothing left below it acks nothing.
	if r := f.ok(&fsmpb.Ack{Session: "s", UpTo: 1 << 60}); r.Acked != 0 || r.Rejected != nil {
		t.Fatalf("empty up_to = %+v", r)
	}
}

func TestAck_RejectsDeliveryOfOtherSession(t *testing.T) {
	f := newMember(t)
	f.open("s1", "s2")
	f.enqueue(0, msg("a"), msg("b"))
	d1 := f.held("s1", "a")
	d2 := f.held("s2", "b")
	before := state(t, f.m)
	r := f.ok(&fsmpb.Ack{Session: "s2", DeliveryIds: []uint64{d1[0], 999}})
	if r.Acked != 0 || !slices.Equal(r.Rejected, []uint64{d1[0], 999}) {
		t.Fatalf("Ack = %+v, want both rejected", r)
	}
	sameState(t, f.m, before, "an ack of foreign deliveries")
	// A mix: the session's own delivery is acked, the foreign one rejected.
	r = f.ok(&fsmpb.Ack{Session: "s2", DeliveryIds: []uint64{d1[0], d2[0]}})
	if r.Acked != 1 || !slices.Equal(r.Rejected, []uint64{d1[0]}) {
		t.Fatalf("Ack = %+v", r)
	}
	f.absent("b")
	if ms := f.lookup("a"); ms.Session != "s1" || ms.DeliveryID != d1[0] {
		t.Fatalf("a = %+v", ms)
	}
	// The same id twice: the second is no longer held.
	r = f.ok(&fsmpb.Ack{Session: "s1", DeliveryIds: []uint64{d1[0], d1[0]}})
	if r.Acked != 1 || !slices.Equal(r.Rejected, []uint64{d1[0]}) {
		t.Fatalf("Ack twice = %+v", r)
	}
}

func TestAck_RejectsUnknownSessionAndChangesNothing(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	d := f.held("s", "a")
	before := state(t, f.m)
	for _, ack := range []*fsmpb.Ack{
		{Session: "ghost", DeliveryIds: d},
		{Session: "ghost", UpTo: 100},
		{Session: "", DeliveryIds: d},
	} {
		r := f.do(ack)
		mustErr(t, r.Err, fsm.ErrUnknownSession, "ack")
		if r.Acked != 0 || r.Rejected != nil {
			t.Fatalf("rejected ack reports %+v", r)
		}
	}
	sameState(t, f.m, before, "acks on an unknown session")
}

func TestAck_AfterRecoverRejectsOldDeliveryIDs(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	old := f.held("s", "a")
	f.ok(&fsmpb.Recover{Session: "s"})
	again := f.held("s", "a")
	before := state(t, f.m)
	r := f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: old})
	if r.Acked != 0 || !slices.Equal(r.Rejected, old) {
		t.Fatalf("stale ack = %+v, want rejected", r)
	}
	sameState(t, f.m, before, "a stale ack")
	if r := f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: again}); r.Acked != 1 {
		t.Fatalf("ack of the redelivery = %+v", r)
	}
}

func TestAck_AckedMessageIsNeverDeliveredAgain(t *testing.T) {
	f := newMember(t)
	f.open("s1", "s2")
	f.enqueue(0, msg("a"))
	d := f.held("s1", "a")
	f.ok(&fsmpb.Ack{Session: "s1", DeliveryIds: d})
	f.ok(&fsmpb.Recover{Session: "s1"})
	f.ok(&fsmpb.Release{Session: "s1"})
	if ds := f.deliver("s2", 0, "a"); len(ds) != 0 {
		t.Fatalf("acked message delivered again: %+v", ds)
	}
	if got := allPending(f.m); len(got) != 0 {
		t.Fatalf("pending = %v", got)
	}
}

// ---- Recover, Release, Return ----

func TestRecover_MarksUnackedRedelivered(t *testing.T) {
	f := newMember(t)
	f.open("s", "other")
	f.enqueue(0, msg("a", prio(2)), msg("b", prio(7)), msg("c", prio(2)), msg("x"))
	d := f.held("s", "c", "a", "b")
	f.held("other", "x")
	f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{d[2]}}) // b acked
	r := f.ok(&fsmpb.Recover{Session: "s"})
	if r.Returned != 2 {
		t.Fatalf("Returned = %d, want 2", r.Returned)
	}
	// Back in pending in their original order, marked redelivered.
	if got := pendingIDs(f.m, 0); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("pending = %v, want [a c]", got)
	}
	for _, id := range []string{"a", "c"} {
		ms := f.lookup(id)
		if !ms.Pending || !ms.Redelivered || ms.DeliveryCount != 1 || ms.Session != "" || ms.DeliveryID != 0 {
			t.Errorf("%s after recover = %+v", id, ms)
		}
	}
	if !f.m.HasSession("s") {
		t.Fatal("recover closed the session")
	}
	if ms := f.lookup("x"); ms.Session != "other" || ms.Redelivered {
		t.Fatalf("another session's delivery was touched: %+v", ms)
	}
	// Delivered again: redelivered, count 2; and again after a second recover: 3.
	for want := uint32(2); want <= 3; want++ {
		ds := f.deliver("s", 0, "a")
		if len(ds) != 1 || !ds[0].Redelivered || ds[0].DeliveryCount != want {
			t.Fatalf("redelivery = %+v, want redelivered with count %d", ds, want)
		}
		f.ok(&fsmpb.Recover{Session: "s"})
	}
	// Redelivery to another session carries the mark too.
	ds := f.deliver("other", 0, "c")
	if len(ds) != 1 || !ds[0].Redelivered || ds[0].DeliveryCount != 2 {
		t.Fatalf("redelivery elsewhere = %+v", ds)
	}
	checkCounts(t, f.m)
}

func TestRecover_WatermarkIsTheNextDeliveryID(t *testing.T) {
	f := newMember(t)
	f.open("s", "other")
	if r := f.ok(&fsmpb.Recover{Session: "s"}); r.Watermark != 1 || r.Returned != 0 {
		t.Fatalf("recover of an empty member = %+v, want watermark 1", r)
	}
	f.enqueue(0, msg("a"), msg("b"), msg("c"))
	d := f.held("s", "a", "b")
	f.held("other", "c")
	r := f.ok(&fsmpb.Recover{Session: "s"})
	if r.Watermark != 4 {
		t.Fatalf("Watermark = %d, want 4", r.Watermark)
	}
	for _, id := range d {
		if id >= r.Watermark {
			t.Fatalf("returned delivery %d at or above the watermark %d", id, r.Watermark)
		}
	}
	next := f.held("s", "a")
	if next[0] < r.Watermark {
		t.Fatalf("delivery after recover has id %d below the watermark %d", next[0], r.Watermark)
	}
}

func TestRecover_RejectsUnknownSessionAndChangesNothing(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	f.held("s", "a")
	before := state(t, f.m)
	r := f.do(&fsmpb.Recover{Session: "ghost"})
	mustErr(t, r.Err, fsm.ErrUnknownSession, "recover")
	if r.Returned != 0 || r.Watermark != 0 {
		t.Fatalf("rejected recover reports %+v", r)
	}
	sameState(t, f.m, before, "a rejected recover")
}

func TestRelease_ReturnsDeliveriesAndClosesSession(t *testing.T) {
	f := newMember(t)
	f.open("s", "other")
	f.enqueue(0, msg("a"), msg("b"), msg("x"))
	old := f.held("s", "a", "b")
	f.held("other", "x")
	r := f.ok(&fsmpb.Release{Session: "s"})
	if r.Returned != 2 {
		t.Fatalf("Returned = %d", r.Returned)
	}
	if f.m.HasSession("s") || f.m.Stats().Sessions != 1 {
		t.Fatalf("session still open: %+v", f.m.Sessions())
	}
	for _, id := range []string{"a", "b"} {
		if ms := f.lookup(id); !ms.Pending || !ms.Redelivered || ms.DeliveryCount != 1 {
			t.Errorf("%s = %+v", id, ms)
		}
	}
	// The released session can no longer ack, deliver or recover.
	mustErr(t, f.do(&fsmpb.Ack{Session: "s", DeliveryIds: old}).Err, fsm.ErrUnknownSession, "ack after release")
	mustErr(t, f.do(&fsmpb.Deliver{Session: "s", MessageIds: []string{"a"}}).Err, fsm.ErrUnknownSession, "deliver after release")
	// Reopened under the same id it holds nothing of before.
	f.open("s")
	if r := f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: old}); r.Acked != 0 || len(r.Rejected) != 2 {
		t.Fatalf("ack of old deliveries by the reopened session = %+v", r)
	}
	ds := f.deliver("other", 0, "b")
	if len(ds) != 1 || !ds[0].Redelivered || ds[0].DeliveryCount != 2 {
		t.Fatalf("redelivery = %+v", ds)
	}
	checkCounts(t, f.m)
}

func TestRelease_OfUnknownSessionSucceedsAndChangesNothing(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a"))
	f.held("s", "a")
	before := state(t, f.m)
	r := f.ok(&fsmpb.Release{Session: "ghost"})
	if r.Returned != 0 {
		t.Fatalf("Release = %+v", r)
	}
	sameState(t, f.m, before, "a release of an unknown session")
	f.ok(&fsmpb.Release{Session: "s"})
	before = state(t, f.m)
	f.ok(&fsmpb.Release{Session: "s"}) // released twice: by the front-end and by a sweep
	sameState(t, f.m, before, "a second release")
}

func TestReturn_ReturnsChosenDeliveriesRedelivered(t *testing.T) {
	f := newMember(t)
	f.open("s", "other")
	f.enqueue(0, msg("a"), msg("b"), msg("c"), msg("x"))
	d := f.held("s", "a", "b", "c")
	dx := f.held("other", "x")
	r := f.ok(&fsmpb.Return{Session: "s", DeliveryIds: []uint64{d[2], dx[0], d[0], 12345}})
	if r.Returned != 2 || !slices.Equal(r.Rejected, []uint64{dx[0], 12345}) {
		t.Fatalf("Return = %+v", r)
	}
	if got := pendingIDs(f.m, 0); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("pending = %v", got)
	}
	if ms := f.lookup("a"); !ms.Redelivered || !ms.Pending {
		t.Fatalf("a = %+v", ms)
	}
	if ms := f.lookup("b"); ms.Session != "s" || ms.Redelivered {
		t.Fatalf("b = %+v", ms)
	}
	if ms := f.lookup("x"); ms.Session != "other" || ms.Redelivered {
		t.Fatalf("x = %+v", ms)
	}
	if !f.m.HasSession("s") {
		t.Fatal("return closed the session")
	}
	before := state(t, f.m)
	if r := f.ok(&fsmpb.Return{Session: "s", DeliveryIds: []uint64{d[0]}}); r.Returned != 0 || !slices.Equal(r.Rejected, []uint64{d[0]}) {
		t.Fatalf("second return = %+v", r)
	}
	sameState(t, f.m, before, "a return of deliveries not held")
	r = f.do(&fsmpb.Return{Session: "ghost", DeliveryIds: []uint64{d[1]}})
	mustErr(t, r.Err, fsm.ErrUnknownSession, "return")
	sameState(t, f.m, before, "a return on an unknown session")
	ds := f.deliver("other", 0, "c")
	if len(ds) != 1 || !ds[0].Redelivered || ds[0].DeliveryCount != 2 {
		t.Fatalf("redelivery = %+v", ds)
	}
}

// A return of deliveries the consumer never saw undoes them: however often
// it happens, the message is neither counted, nor marked, nor delayed, nor
// dead-lettered; the mark and count of earlier real deliveries stay.
func TestReturn_UnseenDeliveriesAreNotCounted(t *testing.T) {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxDeliveries: 2, RedeliveryDelayNs: 100}})
	f.open("s", "other")
	f.enqueue(0, msg("a"), msg("b"), msg("c"))
	for range 5 {
		d := f.held("s", "a", "b")
		if r := f.ok(&fsmpb.Return{Session: "s", DeliveryIds: d, Now: 10, Unseen: true}); r.Returned != 2 {
			t.Fatalf("unseen return = %+v", r)
		}
	}
	if got := pendingIDs(f.m, 0); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("pending after unseen returns = %v; want a, b, c in their order", got)
	}
	for _, id := range []string{"a", "b"} {
		if ms := f.lookup(id); ms.Redelivered || ms.DeliveryCount != 0 || ms.Dead || ms.AvailableAt != 0 {
			t.Fatalf("%s after unseen returns = %+v; want as never delivered", id, ms)
		}
	}
	// A real delivery taken back by a recover is counted and marked; an
	// unseen one after it keeps that.
	f.held("s", "a")
	f.ok(&fsmpb.Recover{Session: "s", Now: 10})
	f.ok(&fsmpb.Wake{Now: 1000})
	d := f.held("s", "a")
	f.ok(&fsmpb.Return{Session: "s", DeliveryIds: d, Now: 20, Unseen: true})
	if ms := f.lookup("a"); !ms.Redelivered || ms.DeliveryCount != 1 || !ms.Pending {
		t.Fatalf("a after a recover and an unseen return = %+v; want marked, count 1, pending", ms)
	}
	ds := f.deliver("other", 30, "a")
	if len(ds) != 1 || !ds[0].Redelivered || ds[0].DeliveryCount != 2 {
		t.Fatalf("delivery after = %+v; want the second delivery, marked", ds)
	}
	// What the session does not hold is rejected, and changes nothing.
	before := state(t, f.m)
	if r := f.ok(&fsmpb.Return{Session: "s", DeliveryIds: []uint64{ds[0].DeliveryID, 999}, Unseen: true}); r.Returned != 0 || len(r.Rejected) != 2 {
		t.Fatalf("unseen return of others' deliveries = %+v", r)
	}
	sameState(t, f.m, before, "an unseen return of deliveries not held")
}

// ---- Expire, Purge ----

func TestExpire_RemovesOnlyMessagesExpiredAtItsNow(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0,
		msg("p50", expires(50)),
		msg("d60", expires(60)),
		msg("p100", expires(100)),
		msg("d101", expires(101)),
		msg("never"),
	)
	d := f.held("s", "d60", "d101")
	if got := f.m.ExpiredBy(100, 10); !slices.Equal(got, []string{"p50", "d60", "p100"}) {
		t.Fatalf("ExpiredBy(100) = %v", got)
	}
	if got := f.m.NextExpiration(); got != 50 {
		t.Fatalf("NextExpiration = %d", got)
	}
	r := f.ok(&fsmpb.Expire{Now: 100, MessageIds: []string{"p50", "d60", "p100", "d101", "never", "unknown"}})
	if r.Removed != 3 {
		t.Fatalf("Removed = %d, want 3", r.Removed)
	}
	f.absent("p50", "d60", "p100")
	f.lookup("d101")
	f.lookup("never")
	if st := f.m.Stats(); st.Pending != 1 || st.Delivered != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	if ss := f.m.Sessions(); ss[0].Deliveries != 1 {
		t.Fatalf("Sessions = %+v", ss)
	}
	// The expired delivery can no longer be acked.
	if r := f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{d[0]}}); r.Acked != 0 || len(r.Rejected) != 1 {
		t.Fatalf("ack of an expired delivery = %+v", r)
	}
	if got := f.m.NextExpiration(); got != 101 {
		t.Fatalf("NextExpiration = %d", got)
	}
	before := state(t, f.m)
	if r := f.ok(&fsmpb.Expire{Now: 100, MessageIds: []string{"d101", "never", "p50"}}); r.Removed != 0 {
		t.Fatalf("Removed = %d", r.Removed)
	}
	sameState(t, f.m, before, "an expire of nothing expired")
	if r := f.ok(&fsmpb.Expire{Now: 1 << 62, MessageIds: []string{"d101", "never"}}); r.Removed != 1 {
		t.Fatalf("Removed = %d", r.Removed)
	}
	f.lookup("never")
	if got := f.m.NextExpiration(); got != 0 {
		t.Fatalf("NextExpiration = %d, want 0", got)
	}
	checkCounts(t, f.m)
}

func TestExpiredBy_ListsEarliestFirstUpToLimit(t *testing.T) {
	f := newMember(t)
	f.enqueue(0, msg("c", expires(30)), msg("a", expires(10)), msg("b1", expires(20)), msg("b2", expires(20)), msg("n"))
	cases := []struct {
		now   int64
		limit int
		want  []string
	}{
		{9, 10, nil},
		{10, 10, []string{"a"}},
		{20, 10, []string{"a", "b1", "b2"}},
		{30, 2, []string{"a", "b1"}},
		{1 << 62, 10, []string{"a", "b1", "b2", "c"}},
		{1 << 62, 0, nil},
	}
	for _, c := range cases {
		if got := f.m.ExpiredBy(c.now, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("ExpiredBy(%d, %d) = %v, want %v", c.now, c.limit, got, c.want)
		}
	}
}

func TestPurge_RemovesPendingOnly(t *testing.T) {
	f := newMember(t)
	f.open("s")
	f.enqueue(0, msg("a", prio(0)), msg("b", prio(9), expires(5)), msg("c"), msg("d"))
	d := f.held("s", "c")
	f.ok(&fsmpb.Return{Session: "s", DeliveryIds: d}) // c pending again, redelivered
	f.held("s", "d")
	r := f.ok(&fsmpb.Purge{})
	if r.Removed != 3 {
		t.Fatalf("Removed = %d, want 3", r.Removed)
	}
	f.absent("a", "b", "c")
	if ms := f.lookup("d"); ms.Session != "s" {
		t.Fatalf("d = %+v", ms)
	}
	st := f.m.Stats()
	if st.Pending != 0 || st.Delivered != 1 || st.Bytes != int64(len("body-d")) {
		t.Fatalf("Stats = %+v", st)
	}
	if got := f.m.ExpiredBy(1<<62, 10); len(got) != 0 {
		t.Fatalf("purged message still in the expiry index: %v", got)
	}
	if r := f.ok(&fsmpb.Purge{}); r.Removed != 0 {
		t.Fatalf("second purge removed %d", r.Removed)
	}
	checkCounts(t, f.m)
}

// ---- OpenSession, Configure ----

func TestOpenSession_Rules(t *testing.T) {
	cases := []struct {
		name string
		cmd  *fsmpb.OpenSession
		want error // nil: accepted
	}{
		{"new session", &fsmpb.OpenSession{Session: "new", Owner: "fe-2"}, nil},
		{"reopen by the same owner", &fsmpb.OpenSession{Session: "s", Owner: owner}, nil},
		{"open under another owner", &fsmpb.OpenSession{Session: "s", Owner: "fe-2"}, fsm.ErrSessionOwned},
		{"no session id", &fsmpb.OpenSession{Owner: owner}, fsm.ErrMalformed},
		{"no owner", &fsmpb.OpenSession{Session: "x"}, fsm.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newMember(t)
			f.open("s")
			f.enqueue(0, msg("a"))
			f.held("s", "a")
			before := state(t, f.m)
			r := f.do(c.cmd)
			if c.want != nil {
				mustErr(t, r.Err, c.want, "open")
				sameState(t, f.m, before, "a rejected open")
				return
			}
			if r.Err != nil {
				t.Fatalf("open: %v", r.Err)
			}
			if !f.m.HasSession(c.cmd.Session) {
				t.Fatalf("session %s not open", c.cmd.Session)
			}
			// Reopening keeps the deliveries the session holds.
			if ms := f.lookup("a"); ms.Session != "s" {
				t.Fatalf("a = %+v", ms)
			}
		})
	}
	f := newMember(t)
	f.ok(&fsmpb.OpenSession{Session: "b", Owner: "fe-9"})
	f.ok(&fsmpb.OpenSession{Session: "a", Owner: "fe-8"})
	want := []fsm.SessionInfo{{ID: "a", Owner: "fe-8"}, {ID: "b", Owner: "fe-9"}}
	if got := f.m.Sessions(); !slices.Equal(got, want) {
		t.Fatalf("Sessions = %+v, want %+v", got, want)
	}
}

func TestConfigure_SetsSettings(t *testing.T) {
	f := newMember(t)
	s := &fsmpb.MemberSettings{MaxBytes: 1 << 20, DedupWindowNs: 5e9, DedupMaxIds: 7}
	f.ok(&fsmpb.Configure{Settings: s})
	if got := f.m.Settings(); !proto.Equal(got, s) {
		t.Fatalf("Settings = %v, want %v", got, s)
	}
}

func TestConfigure_RejectsInvalidSettingsAndChangesNothing(t *testing.T) {
	cases := []struct {
		name string
		s    *fsmpb.MemberSettings
	}{
		{"missing", nil},
		{"negative max bytes", &fsmpb.MemberSettings{MaxBytes: -1, DedupWindowNs: 1, DedupMaxIds: 1}},
		{"negative window", &fsmpb.MemberSettings{DedupWindowNs: -1, DedupMaxIds: 1}},
		{"negative redelivery delay", &fsmpb.MemberSettings{DedupWindowNs: 1, DedupMaxIds: 1, RedeliveryDelayNs: -1}},
		{"negative max redelivery delay", &fsmpb.MemberSettings{DedupWindowNs: 1, DedupMaxIds: 1, RedeliveryDelayNs: 10, RedeliveryMaxDelayNs: -1}},
		{"negative redelivery delay with max deliveries", &fsmpb.MemberSettings{MaxDeliveries: 3, RedeliveryDelayNs: math.MinInt64}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newMember(t)
			f.enqueue(0, msg("a", dedup("D")))
			before := state(t, f.m)
			r := f.do(&fsmpb.Configure{Settings: c.s})
			mustErr(t, r.Err, fsm.ErrInvalidSettings, "configure")
			sameState(t, f.m, before, "a rejected configure")
			if !proto.Equal(f.m.Settings(), fsm.DefaultSettings()) {
				t.Fatalf("Settings = %v", f.m.Settings())
			}
		})
	}
}

// ---- Apply ----

func TestApply_SkipsEntriesAtOrBelowApplied(t *testing.T) {
	m := fsm.NewMember()
	if m.Applied() != 0 {
		t.Fatalf("Applied = %d", m.Applied())
	}
	e1 := entry(t, &fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("a")}})
	if rs, err := m.Apply(5, e1); err != nil || len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("Apply(5) = %+v, %v", rs, err)
	}
	if m.Applied() != 5 {
		t.Fatalf("Applied = %d, want 5", m.Applied())
	}
	before := fullState(t, m)
	for _, idx := range []uint64{0, 1, 5} {
		// A replay, a different entry, even garbage: all skipped.
		for _, data := range [][]byte{e1, entry(t, &fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("b")}}), []byte("garbage")} {
			rs, err := m.Apply(idx, data)
			if rs != nil || err != nil {
				t.Fatalf("Apply(%d) of an old index = %+v, %v; want nil, nil", idx, rs, err)
			}
		}
	}
	if !bytes.Equal(before, fullState(t, m)) {
		t.Fatal("an old index changed the state")
	}
	// A gap in the indexes is fine: the next entry is whatever index comes.
	if _, err := m.Apply(9, entry(t, &fsmpb.Purge{})); err != nil || m.Applied() != 9 {
		t.Fatalf("Apply(9): %v, applied %d", err, m.Applied())
	}
	// A rejected command still advances the index: it was applied.
	if rs, _ := m.Apply(10, entry(t, &fsmpb.Recover{Session: "ghost"})); rs[0].Err == nil || m.Applied() != 10 {
		t.Fatalf("rejected command: %+v, applied %d", rs, m.Applied())
	}
	// An empty entry advances it too.
	if rs, err := m.Apply(11, entry(t)); err != nil || len(rs) != 0 || m.Applied() != 11 {
		t.Fatalf("empty entry: %+v, %v, applied %d", rs, err, m.Applied())
	}
}

func TestApply_SeveralCommandsInOneEntryApplyInOrder(t *testing.T) {
	f := newMember(t)
	rs := f.apply(
		&fsmpb.OpenSession{Session: "s", Owner: owner},
		&fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("a"), msg("b")}},
		&fsmpb.Deliver{Session: "s", MessageIds: []string{"a", "b"}},
		&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{1}},
		&fsmpb.Ack{Session: "ghost", DeliveryIds: []uint64{2}},
		&fsmpb.Recover{Session: "s"},
	)
	if rs[0].Err != nil || len(rs[1].Enqueued) != 2 || len(rs[2].Delivered) != 2 || rs[3].Acked != 1 {
		t.Fatalf("results = %+v", rs)
	}
	mustErr(t, rs[4].Err, fsm.ErrUnknownSession, "ack in a batch")
	// The rejection of one command does not undo the others.
	if rs[5].Returned != 1 || rs[5].Watermark != 3 {
		t.Fatalf("recover = %+v", rs[5])
	}
	f.absent("a")
	if ms := f.lookup("b"); !ms.Pending || !ms.Redelivered {
		t.Fatalf("b = %+v", ms)
	}
}

// corruptEntries are entries a Member must refuse as corrupt.
func corruptEntries(t *testing.T) map[string][]byte {
	good := fsm.MustCommand(&fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("new")}})
	return map[string][]byte{
		"garbage bytes":            []byte("this is not a protobuf entry \xff\xff\xff"),
		"truncated entry":          entry(t, &fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("new")}})[:10],
		"version 0":                rawEntry(t, 0, good),
		"version 2":                rawEntry(t, fsm.EntryVersion+1, good),
		"version 99":               rawEntry(t, 99, good),
		"empty bytes (version 0)":  {},
		"meta command":             entry(t, &fsmpb.CreateDestination{Destination: &fsmpb.Destination{Name: "q"}}),
		"register node":            entry(t, &fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1"}}),
		"unknown command type 0":   rawEntry(t, 1, &fsmpb.Command{Type: 0}),
		"unknown command type 99":  rawEntry(t, 1, &fsmpb.Command{Type: 99, Payload: good.Payload}),
		"bad payload":              rawEntry(t, 1, &fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_ENQUEUE, Payload: []byte{0xff, 0xff, 0xff}}),
		"invalid utf-8 in a field": rawEntry(t, 1, &fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_RECOVER, Payload: []byte{0x0a, 0x02, 0xc3, 0x28}}),
		"good then corrupt":        rawEntry(t, 1, good, &fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_PURGE, Payload: []byte{0x0a}}),
		"good then meta":           rawEntry(t, 1, fsm.MustCommand(&fsmpb.Purge{}), fsm.MustCommand(&fsmpb.DeleteDestination{Name: "q"})),
	}
}

func TestApply_CorruptEntriesReturnErrCorruptAndChangeNothing(t *testing.T) {
	for name, data := range corruptEntries(t) {
		t.Run(name, func(t *testing.T) {
			f := newMember(t)
			f.open("s")
			f.enqueue(0, msg("a"), msg("b"))
			f.held("s", "a")
			before := fullState(t, f.m)
			applied := f.m.Applied()
			rs, err := f.m.Apply(applied+1, data)
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Fatalf("Apply = %+v, %v; want an error wrapping ErrCorrupt", rs, err)
			}
			if rs != nil {
				t.Errorf("corrupt entry returned results %+v", rs)
			}
			if f.m.Applied() != applied {
				t.Errorf("Applied moved from %d to %d", applied, f.m.Applied())
			}
			if !bytes.Equal(before, fullState(t, f.m)) {
				t.Error("a corrupt entry changed the state")
			}
			f.absent("new")
		})
	}
}

func TestDecode_RejectsCorruptAndReadsValid(t *testing.T) {
	for name, data := range corruptEntries(t) {
		e, err := fsm.Decode(data)
		// Decode checks the encoding and version only; commands are checked by Apply.
		switch name {
		case "meta command", "register node", "unknown command type 0", "unknown command type 99",
			"bad payload", "invalid utf-8 in a field", "good then corrupt", "good then meta":
			if err != nil {
				t.Errorf("%s: Decode: %v", name, err)
			}
		default:
			if !errors.Is(err, fsm.ErrCorrupt) || e != nil {
				t.Errorf("%s: Decode = %v, %v; want ErrCorrupt", name, e, err)
			}
		}
	}
	data := entry(t, &fsmpb.Purge{}, &fsmpb.Recover{Session: "s"})
	e, err := fsm.Decode(data)
	if err != nil || e.GetVersion() != 1 || len(e.GetCommands()) != 2 ||
		e.GetCommands()[1].GetType() != fsmpb.CommandType_COMMAND_TYPE_RECOVER {
		t.Fatalf("Decode = %v, %v", e, err)
	}
}

// An entry is written at the oldest version that carries its commands, so
// that an older build stops at the first entry it would apply differently
// and applies every other (EntryVersion lists what makes each version).
func TestEncode_WritesTheOldestVersionThatCarriesTheEntry(t *testing.T) {
	for _, c := range []struct {
		name string
		cmds []proto.Message
		want uint32
	}{
		{"no commands", nil, 1},
		{"a send", []proto.Message{&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: "a"}}}}, 1},
		{"a recover without an attempt", []proto.Message{&fsmpb.Recover{Session: "s", Now: 3}}, 1},
		{"a recover with an attempt", []proto.Message{&fsmpb.Recover{Session: "s", Now: 3, Attempt: 1}}, 2},
		{"an attempt after a send", []proto.Message{&fsmpb.Purge{}, &fsmpb.Recover{Session: "s", Attempt: 7}}, 2},
		{"a return", []proto.Message{&fsmpb.Return{Session: "s", DeliveryIds: []uint64{1}}}, 1},
		{"an unseen return", []proto.Message{&fsmpb.Return{Session: "s", DeliveryIds: []uint64{1}, Unseen: true}}, 3},
		{"an attempt and an unseen return", []proto.Message{&fsmpb.Recover{Session: "s", Attempt: 1}, &fsmpb.Return{Session: "s", Unseen: true}}, 3},
		{"a configure", []proto.Message{&fsmpb.Configure{Settings: fsm.DefaultSettings()}}, 1},
		{"a configure with a first delivery id", []proto.Message{&fsmpb.Configure{Settings: fsm.DefaultSettings(), FirstDeliveryId: 9}}, 5},
		{"a configure counting memory", []proto.Message{&fsmpb.Configure{Settings: &fsmpb.MemberSettings{CountMemory: true}, FirstDeliveryId: 9}}, 6},
		{"a configure bounding messages", []proto.Message{&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxMessages: 10}}}, 6},
		{"a deliver naming its consumer", []proto.Message{&fsmpb.Deliver{Session: "s", Consumer: "c1", MessageIds: []string{"a"}}}, 1},
		{"a return of a consumer's deliveries", []proto.Message{&fsmpb.Return{Session: "s", Consumer: "c1", After: 3, Unseen: true}}, 7},
	} {
		e, err := fsm.Decode(entry(t, c.cmds...))
		if err != nil || e.GetVersion() != c.want {
			t.Errorf("%s: Decode = version %d, %v; want version %d", c.name, e.GetVersion(), err, c.want)
		}
	}
}

func TestNewCommand_RejectsNonCommandBodies(t *testing.T) {
	if _, err := fsm.NewCommand(&fsmpb.Message{Id: "x"}); err == nil {
		t.Fatal("NewCommand accepted a Message")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustCommand did not panic on a non-command body")
		}
	}()
	fsm.MustCommand(&fsmpb.Entry{})
}

func TestNewCommand_TypesMatchBodies(t *testing.T) {
	cases := []struct {
		body proto.Message
		want fsmpb.CommandType
	}{
		{&fsmpb.Enqueue{}, fsmpb.CommandType_COMMAND_TYPE_ENQUEUE},
		{&fsmpb.Deliver{}, fsmpb.CommandType_COMMAND_TYPE_DELIVER},
		{&fsmpb.Ack{}, fsmpb.CommandType_COMMAND_TYPE_ACK},
		{&fsmpb.Recover{}, fsmpb.CommandType_COMMAND_TYPE_RECOVER},
		{&fsmpb.Release{}, fsmpb.CommandType_COMMAND_TYPE_RELEASE},
		{&fsmpb.Expire{}, fsmpb.CommandType_COMMAND_TYPE_EXPIRE},
		{&fsmpb.Purge{}, fsmpb.CommandType_COMMAND_TYPE_PURGE},
		{&fsmpb.OpenSession{}, fsmpb.CommandType_COMMAND_TYPE_OPEN_SESSION},
		{&fsmpb.Return{}, fsmpb.CommandType_COMMAND_TYPE_RETURN},
		{&fsmpb.Configure{}, fsmpb.CommandType_COMMAND_TYPE_CONFIGURE},
		{&fsmpb.Move{}, fsmpb.CommandType_COMMAND_TYPE_MOVE},
		{&fsmpb.Moved{}, fsmpb.CommandType_COMMAND_TYPE_MOVED},
		{&fsmpb.Wake{}, fsmpb.CommandType_COMMAND_TYPE_WAKE},
		{&fsmpb.CreateDestination{}, fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION},
		{&fsmpb.DeleteDestination{}, fsmpb.CommandType_COMMAND_TYPE_DELETE_DESTINATION},
		{&fsmpb.RegisterNode{}, fsmpb.CommandType_COMMAND_TYPE_REGISTER_NODE},
	}
	for _, c := range cases {
		cmd, err := fsm.NewCommand(c.body)
		if err != nil || cmd.GetType() != c.want {
			t.Errorf("NewCommand(%T) = %v, %v; want type %v", c.body, cmd, err, c.want)
		}
	}
}
