package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// subscribed is the Configure of a subscription's member.
func subscribed(topicMember, sel string, maxBytes int64) *fsmpb.Configure {
	st := fsm.DefaultSettings()
	st.Subscribes, st.Selector, st.MaxBytes = topicMember, sel, maxBytes
	return &fsmpb.Configure{Settings: st}
}

func numbered(id string, n int64, dedup string) *fsmpb.Message {
	m := &fsmpb.Message{Id: id, Body: []byte(id), Priority: 4, DedupId: dedup,
		TypedProperties: map[string]*fsmpb.PropertyValue{"n": {Value: &fsmpb.PropertyValue_Int{Int: n}}}}
	return m
}

func heldBy(g *fsm.Group, member string) []string {
	ids := allPending(g.Member(member))
	slices.Sort(ids)
	return ids
}

// A publish to a topic member is stored by every subscription's member
// subscribed to it that selects it, and by nothing else; the topic
// member's duplicate detection drops a second publish of a dedup id; a
// subscription that cannot take its share refuses the whole publish; and
// a snapshot keeps who subscribes to what.
func TestGroup_PublishReachesEverySubscription(t *testing.T) {
	g := fsm.NewGroup()
	idx := uint64(0)
	apply := func(cmds ...*fsmpb.Command) []fsm.Result {
		t.Helper()
		idx++
		rs, err := g.Apply(idx, groupEntry(t, cmds...))
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	publish := func(msgs ...*fsmpb.Message) fsm.Result {
		return apply(to("t#0", &fsmpb.Publish{Now: int64(idx) * 1e9, Messages: msgs}))[0]
	}
	rs := apply(
		to("t#0", &fsmpb.AddMember{}), to("t#1", &fsmpb.AddMember{}), to("q#0", &fsmpb.AddMember{}),
		to("t::all#0", &fsmpb.AddMember{}), to("t::all#0", subscribed("t#0", "", 0)),
		to("t::big#0", &fsmpb.AddMember{}), to("t::big#0", subscribed("t#0", "n > 1", 0)),
		to("t::other#1", &fsmpb.AddMember{}), to("t::other#1", subscribed("t#1", "", 0)),
	)
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("command %d: %v", i, r.Err)
		}
	}
	r := publish(numbered("m0", 0, "d0"), numbered("m1", 1, ""), numbered("m2", 2, ""))
	if r.Err != nil || len(r.Enqueued) != 3 || r.Enqueued[0].Duplicate {
		t.Fatalf("publish = %+v", r)
	}
	if !slices.Equal(g.Touched(), []string{"t#0", "t::all#0", "t::big#0"}) {
		t.Fatalf("the publish touched %v", g.Touched())
	}
	r = publish(numbered("m0-again", 5, "d0"), numbered("m3", 3, ""))
	if r.Err != nil || !r.Enqueued[0].Duplicate || r.Enqueued[0].ID != "m0" {
		t.Fatalf("a publish with a dedup id seen: %+v", r)
	}
	check := func(member string, want ...string) {
		t.Helper()
		if got := heldBy(g, member); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s holds %v, want %v", member, got, want)
		}
	}
	check("t::all#0", "m0", "m1", "m2", "m3")
	check("t::big#0", "m2", "m3")
	check("t::other#1")
	check("t#0")
	check("q#0")

	// A full subscription refuses the whole publish.
	apply(to("t::big#0", subscribed("t#0", "n > 1", 1)))
	if r := publish(numbered("m4", 4, "d4")); !errors.Is(r.Err, fsm.ErrMemberFull) {
		t.Fatalf("a publish that a full subscription cannot take: %v", r.Err)
	}
	check("t::all#0", "m0", "m1", "m2", "m3")
	// Refused, its dedup id was not recorded: it can be published again.
	apply(to("t::big#0", subscribed("t#0", "n > 1", 0)))
	if r := publish(numbered("m4", 4, "d4")); r.Err != nil || r.Enqueued[0].Duplicate {
		t.Fatalf("publishing the refused message again: %+v", r)
	}
	// A selector that does not parse is refused where it is configured.
	if r := apply(to("t::big#0", subscribed("t#0", "n >", 0)))[0]; !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Fatalf("a subscription with a malformed selector: %v", r.Err)
	}
	// A dropped subscription takes nothing more.
	apply(to("t::all#0", &fsmpb.DropMember{}))
	publish(numbered("m5", 5, ""))
	check("t::big#0", "m2", "m3", "m4", "m5")
	if r := apply(to("t#9", &fsmpb.Publish{Now: 1, Messages: []*fsmpb.Message{numbered("x", 1, "")}}))[0]; !errors.Is(r.Err, fsm.ErrUnknownMember) {
		t.Fatalf("a publish to a topic member the group does not hold: %v", r.Err)
	}

	// A restored group fans out the same.
	restored := restoreGroup(t, groupSnapshot(t, g))
	idx++
	data := groupEntry(t, to("t#0", &fsmpb.Publish{Now: int64(idx) * 1e9, Messages: []*fsmpb.Message{numbered("m6", 6, "")}}))
	for _, x := range []*fsm.Group{g, restored} {
		if _, err := x.Apply(idx, data); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := groupState(t, g), groupState(t, restored); string(a) != string(b) {
		t.Fatal("the restored group applied the publish differently")
	}
	if got := heldBy(restored, "t::big#0"); !slices.Contains(got, "m6") {
		t.Fatalf("the restored subscription holds %v, without m6", got)
	}
}

func restoreGroup(t *testing.T, snap []byte) *fsm.Group {
	t.Helper()
	g, err := fsm.RestoreGroup(bytes.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	return g
}
