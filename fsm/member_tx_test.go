package fsm_test

import (
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// txMember holds a session "s1" with m1 and m2 delivered (delivery ids 1
// and 2) and m3 pending.
func txMember(t *testing.T) *member {
	f := newMember(t)
	f.open("s1")
	f.enqueue(1, msg("m1"), msg("m2"), msg("m3"))
	f.deliver("s1", 1, "m1", "m2")
	return f
}

func prepare(tx string, sends []*fsmpb.Message, acks ...uint64) *fsmpb.TxPrepare {
	return &fsmpb.TxPrepare{Tx: tx, Primary: "q#0", Session: "s1", Now: 10, Messages: sends, DeliveryIds: acks}
}

// One participant commits in one entry: its sends pending, its acks done.
func TestTx_OnePhaseCommitsAtOnce(t *testing.T) {
	f := txMember(t)
	p := prepare("t1", []*fsmpb.Message{msg("n1")}, 1)
	p.OnePhase = true
	r := f.ok(p)
	if !r.Committed || r.Acked != 1 || len(r.Enqueued) != 1 {
		t.Fatalf("one-phase commit: %+v", r)
	}
	f.absent("m1")
	if st := f.lookup("n1"); !st.Pending {
		t.Fatalf("n1 after commit: %+v", st)
	}
	if st := f.m.Stats(); st.Prepared != 0 || st.Delivered != 1 || st.Pending != 2 {
		t.Fatalf("stats: %+v", st)
	}
	checkCounts(t, f.m)
	// The commit is recorded: a late copy changes nothing, and a client
	// asking for the outcome learns it.
	before := state(t, f.m)
	if r := f.ok(p); !r.Committed {
		t.Fatalf("late copy of a one-phase commit: %+v", r)
	}
	sameState(t, f.m, before, "a late copy of a one-phase commit")
	if r := f.ok(&fsmpb.TxDecide{Tx: "t1", Record: true, Now: 11}); !r.Committed {
		t.Fatalf("outcome query of a one-phase commit: %+v", r)
	}
}

// A prepared transaction's sends are invisible and its acknowledged
// deliveries held: no recover, release, return, ack or expiry touches them
// until the decision; a commit then makes all visible and acknowledged.
func TestTx_PreparedHoldsEverythingUntilCommitted(t *testing.T) {
	f := txMember(t)
	f.ok(prepare("t1", []*fsmpb.Message{msg("n1"), msg("n2")}, 1))
	if st := f.m.Stats(); st.Prepared != 3 || st.Delivered != 1 || st.Pending != 1 {
		t.Fatalf("stats while prepared: %+v", st)
	}
	if got := allPending(f.m); len(got) != 1 || got[0] != "m3" {
		t.Fatalf("pending while prepared: %v; want m3 only", got)
	}
	if st := f.lookup("m1"); st.Tx != "t1" {
		t.Fatalf("m1 while prepared: %+v", st)
	}
	if r := f.ok(&fsmpb.Ack{Session: "s1", DeliveryIds: []uint64{1}}); r.Acked != 0 || len(r.Rejected) != 1 {
		t.Fatalf("ack of a held delivery: %+v", r)
	}
	if r := f.ok(&fsmpb.Recover{Session: "s1", Now: 11}); r.Returned != 1 {
		t.Fatalf("recover while prepared: %+v; want m2 only back", r)
	}
	f.ok(&fsmpb.Release{Session: "s1", Now: 12})
	if st := f.lookup("m1"); st.Tx != "t1" || st.Pending {
		t.Fatalf("m1 after its session was released: %+v; want it held", st)
	}
	// A second prepare of the same transaction (a resend) changes nothing.
	before := state(t, f.m)
	f.ok(prepare("t1", []*fsmpb.Message{msg("n1"), msg("n2")}, 1))
	sameState(t, f.m, before, "a repeated prepare")
	checkCounts(t, f.m)

	if r := f.ok(&fsmpb.TxDecide{Tx: "t1", Commit: true, Now: 13}); !r.Committed || r.Acked != 1 {
		t.Fatalf("decide commit: %+v", r)
	}
	// A late copy of the prepare is answered from the decision, not
	// prepared again.
	decided := state(t, f.m)
	if r := f.ok(prepare("t1", []*fsmpb.Message{msg("n1"), msg("n2")}, 1)); !r.Committed {
		t.Fatalf("late prepare of a committed transaction: %+v", r)
	}
	sameState(t, f.m, decided, "a late prepare")
	f.absent("m1")
	for _, id := range []string{"n1", "n2"} {
		if st := f.lookup(id); !st.Pending {
			t.Fatalf("%s after commit: %+v", id, st)
		}
	}
	if st := f.m.Stats(); st.Prepared != 0 {
		t.Fatalf("stats after commit: %+v", st)
	}
	checkCounts(t, f.m)
}

// An abort discards the sends (and forgets their dedup ids) and returns the
// acknowledged deliveries, marked redelivered.
func TestTx_AbortDiscardsSendsAndReturnsReceives(t *testing.T) {
	f := txMember(t)
	f.ok(prepare("t1", []*fsmpb.Message{msg("n1", dedup("d1"))}, 1, 2))
	// While prepared, the dedup id is taken: a plain send with it is a duplicate.
	if out := f.enqueue(11, msg("x1", dedup("d1"))); !out[0].Duplicate {
		t.Fatalf("send with the prepared dedup id: %+v", out)
	}
	if r := f.ok(&fsmpb.TxDecide{Tx: "t1", Commit: false, Now: 12}); r.Committed || r.Returned != 2 {
		t.Fatalf("decide abort: %+v", r)
	}
	f.absent("n1")
	for _, id := range []string{"m1", "m2"} {
		if st := f.lookup(id); !st.Pending || !st.Redelivered || st.DeliveryCount != 1 {
			t.Fatalf("%s after abort: %+v; want pending, redelivered", id, st)
		}
	}
	if out := f.enqueue(13, msg("x2", dedup("d1"))); out[0].Duplicate {
		t.Fatalf("send with the dedup id of a rolled-back send: %+v; want it stored", out)
	}
	checkCounts(t, f.m)
}

// A prepare that cannot be carried out in full is refused and changes
// nothing.
func TestTx_RefusedPrepareChangesNothing(t *testing.T) {
	cases := []struct {
		name string
		cmd  *fsmpb.TxPrepare
	}{
		{"a delivery that is not the session's", prepare("t1", nil, 1, 99)},
		{"a message id already stored", prepare("t1", []*fsmpb.Message{msg("m3")}, 1)},
		{"a delivery of an unknown session", &fsmpb.TxPrepare{Tx: "t1", Primary: "q#0", Session: "nope", DeliveryIds: []uint64{1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := txMember(t)
			f.ok(prepare("t0", nil, 2)) // holds delivery 2
			before := state(t, f.m)
			mustErr(t, f.do(c.cmd).Err, fsm.ErrTxRefused, c.name)
			sameState(t, f.m, before, c.name)
		})
	}
	t.Run("a delivery another transaction holds", func(t *testing.T) {
		f := txMember(t)
		f.ok(prepare("t0", nil, 2))
		before := state(t, f.m)
		mustErr(t, f.do(prepare("t1", nil, 2)).Err, fsm.ErrTxRefused, "double hold")
		sameState(t, f.m, before, "double hold")
	})
	t.Run("malformed", func(t *testing.T) {
		f := txMember(t)
		mustErr(t, f.do(&fsmpb.TxPrepare{Primary: "q#0"}).Err, fsm.ErrMalformed, "no id")
	})
}

// The primary's first recorded decision stands: a timeout's abort that
// came first wins over the front-end's commit, which learns it; a prepare
// that comes after the abort is refused.
func TestTx_FirstRecordedDecisionStands(t *testing.T) {
	f := txMember(t)
	f.ok(prepare("t1", []*fsmpb.Message{msg("n1")}, 1))
	if r := f.ok(&fsmpb.TxDecide{Tx: "t1", Commit: false, Record: true, Now: 20}); r.Committed {
		t.Fatalf("abort recorded: %+v", r)
	}
	if r := f.ok(&fsmpb.TxDecide{Tx: "t1", Commit: true, Record: true, Now: 21}); r.Committed {
		t.Fatalf("commit after a recorded abort: %+v; want the abort back", r)
	}
	if commit, ok := f.m.Decision("t1"); !ok || commit {
		t.Fatalf("Decision(t1) = %v, %v", commit, ok)
	}
	f.absent("n1")
	mustErr(t, f.do(prepare("t1", []*fsmpb.Message{msg("n1")})).Err, fsm.ErrTxRefused, "prepare after abort")
	// An undecided transaction asked about records the abort (a client's
	// outcome query after its front-end died).
	if r := f.ok(&fsmpb.TxDecide{Tx: "t2", Commit: false, Record: true, Now: 22}); r.Committed {
		t.Fatalf("query of an unknown transaction: %+v", r)
	}
	// Decisions are forgotten after the retention.
	f.ok(&fsmpb.TxDecide{Tx: "t3", Commit: true, Record: true, Now: 23 + fsm.DecisionRetentionNs})
	if _, ok := f.m.Decision("t1"); ok {
		t.Fatal("t1's decision outlived the retention")
	}
	if commit, ok := f.m.Decision("t3"); !ok || !commit {
		t.Fatalf("Decision(t3) = %v, %v", commit, ok)
	}
}

// A prepared transaction, its held deliveries (of a released session too),
// its dedup ids and the primary's decisions survive a snapshot, and the
// restored member decides as the original does.
func TestTx_SnapshotKeepsPreparedTransactions(t *testing.T) {
	f := txMember(t)
	f.enqueue(2, msg("m4", dedup("d4")))
	f.ok(prepare("t1", []*fsmpb.Message{msg("n1", dedup("dn")), msg("n2", dedup("d4"))}, 1))
	f.ok(&fsmpb.Release{Session: "s1", Now: 12})
	f.ok(&fsmpb.TxDecide{Tx: "t9", Commit: true, Record: true, Now: 12})
	f.ok(prepare("t2", []*fsmpb.Message{msg("n3")}))
	f.ok(&fsmpb.TxDecide{Tx: "t2", Commit: false, Now: 13}) // forgets nothing of t1

	r := &member{t: t, m: restore(t, snapshotBytes(t, f.m)), idx: f.idx}
	if a, b := state(t, f.m), state(t, r.m); string(a) != string(b) {
		t.Fatal("restored state differs")
	}
	if got := r.m.PreparedTxs(); len(got) != 1 || got[0].Tx != "t1" || got[0].Primary != "q#0" {
		t.Fatalf("PreparedTxs after restore: %+v", got)
	}
	if commit, ok := r.m.Decision("t9"); !ok || !commit {
		t.Fatalf("Decision(t9) after restore = %v, %v", commit, ok)
	}
	for _, x := range []*member{f, r} {
		x.ok(&fsmpb.TxDecide{Tx: "t1", Commit: true, Now: 14})
		x.absent("m1")
		if st := x.lookup("n1"); !st.Pending {
			t.Fatalf("n1: %+v", st)
		}
		x.absent("n2") // dropped at prepare as a duplicate of m4
		checkCounts(t, x.m)
	}
	if a, b := state(t, f.m), state(t, r.m); string(a) != string(b) {
		t.Fatal("the original and the restored member differ after the same decision")
	}
}
