package fsm_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A publish in a transaction: prepared, it is held by the topic member and
// stored by no subscription; committed, each subscription stores what its
// selector selects, and the topic member holds nothing; rolled back,
// nothing. A one-phase commit stores at once. A subscription that would
// refuse the publish refuses the prepare; a prepared publish survives a
// snapshot; a member outside a group refuses a publishing prepare.
func TestGroup_TransactedPublish(t *testing.T) {
	g := fsm.NewGroup()
	idx := uint64(0)
	apply := func(cmds ...*fsmpb.Command) fsm.Result {
		t.Helper()
		idx++
		rs, err := g.Apply(idx, groupEntry(t, cmds...))
		if err != nil {
			t.Fatal(err)
		}
		return rs[len(rs)-1]
	}
	prepare := func(tx string, onePhase bool, msgs ...*fsmpb.Message) fsm.Result {
		return apply(to("t#0", &fsmpb.TxPrepare{Tx: tx, Primary: "t#0", Now: int64(idx) * 1e9, Messages: msgs, OnePhase: onePhase, Publish: true}))
	}
	decide := func(tx string, commit bool) fsm.Result {
		return apply(to("t#0", &fsmpb.TxDecide{Tx: tx, Commit: commit, Record: true, Now: int64(idx) * 1e9}))
	}
	check := func(member string, want ...string) {
		t.Helper()
		if got := heldBy(g, member); !slices.Equal(got, want) {
			t.Fatalf("%s holds %v, want %v", member, got, want)
		}
	}
	apply(to("t#0", &fsmpb.AddMember{}),
		to("t::all#0", &fsmpb.AddMember{}), to("t::all#0", subscribed("t#0", "", 0)),
		to("t::big#0", &fsmpb.AddMember{}), to("t::big#0", subscribed("t#0", "n > 1", 0)))

	if r := prepare("tx1", false, numbered("a", 1, "d-a"), numbered("b", 2, "")); r.Err != nil {
		t.Fatalf("prepare: %v", r.Err)
	}
	check("t::all#0")
	check("t#0")
	if st := g.Member("t#0").Stats(); st.Prepared != 2 {
		t.Fatalf("the topic member holds %d prepared sends, want 2", st.Prepared)
	}
	// A snapshot taken while it is prepared decides it the same.
	restored := restoreGroup(t, groupSnapshot(t, g))
	idx++
	commit := groupEntry(t, to("t#0", &fsmpb.TxDecide{Tx: "tx1", Commit: true, Record: true, Now: int64(idx) * 1e9}))
	for _, x := range []*fsm.Group{g, restored} {
		if rs, err := x.Apply(idx, commit); err != nil || !rs[0].Committed {
			t.Fatalf("commit: %+v, %v", rs, err)
		}
	}
	if a, b := groupState(t, g), groupState(t, restored); string(a) != string(b) {
		t.Fatal("the restored group committed the publish differently")
	}
	check("t::all#0", "a", "b")
	check("t::big#0", "b")
	check("t#0")

	// Rolled back: nothing; its dedup id can be published again.
	prepare("tx2", false, numbered("c", 3, "d-c"))
	if r := decide("tx2", false); r.Committed {
		t.Fatal("a rollback committed")
	}
	check("t::all#0", "a", "b")
	// One phase, with a dedup id seen: the copy is dropped.
	if r := prepare("tx3", true, numbered("c", 3, "d-c"), numbered("a-again", 5, "d-a")); r.Err != nil || !r.Committed || !r.Enqueued[1].Duplicate {
		t.Fatalf("one-phase publish: %+v", r)
	}
	check("t::all#0", "a", "b", "c")
	check("t::big#0", "b", "c")

	// A full subscription refuses the prepare; nothing changes.
	apply(to("t::big#0", subscribed("t#0", "n > 1", 1)))
	if r := prepare("tx4", false, numbered("d", 4, "")); !errors.Is(r.Err, fsm.ErrTxRefused) || !errors.Is(r.Err, fsm.ErrMemberFull) {
		t.Fatalf("a publish a full subscription cannot take: %v", r.Err)
	}
	if st := g.Member("t#0").Stats(); st.Prepared != 0 || len(g.Touched()) != 0 {
		t.Fatalf("a refused prepare changed the group: %d prepared, touched %v", st.Prepared, g.Touched())
	}

	// Outside a group, a member refuses a publishing prepare.
	m := fsm.NewMember()
	rs, err := m.Apply(1, entry(t, &fsmpb.TxPrepare{Tx: "x", Primary: "q#0", Now: 1, Messages: []*fsmpb.Message{numbered("x", 1, "")}, Publish: true}))
	if err != nil || !errors.Is(rs[0].Err, fsm.ErrMalformed) {
		t.Fatalf("a member alone prepared a publish: %+v, %v", rs, err)
	}
}
