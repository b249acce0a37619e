package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
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

// BenchmarkGroup_PublishFanOut measures the state machine's cost per
// published message stored by 4 subscriptions (one with a selector that
// takes half), 64 messages of 1 KiB per entry; each subscription is purged
// every 64 entries, outside the timer.
func BenchmarkGroup_PublishFanOut(b *testing.B) {
	const batch, subs = 64, 4
	g := fsm.NewGroup()
	var idx uint64
	apply := func(cmds ...*fsmpb.Command) {
		idx++
		data, err := fsm.Encode(cmds...)
		if err != nil {
			b.Fatal(err)
		}
		rs, err := g.Apply(idx, data)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	cmds := []*fsmpb.Command{to("t#0", &fsmpb.AddMember{})}
	for i := range subs {
		sel := ""
		if i == 0 {
			sel = "n < 32"
		}
		name := fmt.Sprint("t::s", i, "#0")
		cmds = append(cmds, to(name, &fsmpb.AddMember{}), to(name, subscribed("t#0", sel, 0)))
	}
	apply(cmds...)
	body := make([]byte, 1024)
	b.SetBytes(batch * int64(len(body)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		msgs := make([]*fsmpb.Message, batch)
		for j := range msgs {
			msgs[j] = &fsmpb.Message{Id: fmt.Sprint("m", i, "-", j), Body: body, Priority: 4,
				TypedProperties: map[string]*fsmpb.PropertyValue{"n": {Value: &fsmpb.PropertyValue_Int{Int: int64(j)}}}}
		}
		apply(to("t#0", &fsmpb.Publish{Now: int64(i), Messages: msgs}))
		if i%64 == 63 {
			b.StopTimer()
			for s := range subs {
				apply(to(fmt.Sprint("t::s", s, "#0"), &fsmpb.Purge{}))
			}
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/msg")
}

// TestProperty_PublishAgainstModel runs random subscriptions coming and
// going (with selectors), publishes with and without dedup ids (plain, or
// in transactions committed at once, or prepared and later committed or
// rolled back), and purges against a model: each subscription's member
// holds exactly the new messages that were published (committed) while it
// was subscribed and that its selector selects, and a restored snapshot
// holds the same state and applies the next publish and decisions the
// same.
func TestProperty_PublishAgainstModel(t *testing.T) {
	selectors := []string{"", "n < 5", "n BETWEEN 3 AND 7 AND NOT odd", "tag IS NULL"}
	subs := []string{"t::a#0", "t::b#0", "t::c#0"}
	rapid.Check(t, func(t *rapid.T) {
		g := fsm.NewGroup()
		var idx uint64
		apply := func(cmds ...*fsmpb.Command) []fsm.Result {
			idx++
			rs, err := g.Apply(idx, groupEntry(t, cmds...))
			if err != nil {
				t.Fatal(err)
			}
			return rs
		}
		apply(to("t#0", &fsmpb.AddMember{}))
		model := map[string]map[string]bool{} // subscription: ids it holds
		selOf := map[string]*selector.Selector{}
		seenDedup := map[string]string{}
		// prepared are the transactions prepared and not decided, with
		// the messages each will publish (its duplicates left out).
		prepared := map[string][]*fsmpb.Message{}
		var preparedOrder []string
		next := 0
		deliver := func(m *fsmpb.Message) {
			for sub, held := range model {
				if fsm.Selects(selOf[sub], m) {
					held[m.Id] = true
				}
			}
		}
		for step := range rapid.IntRange(1, 30).Draw(t, "steps") {
			s := rapid.SampledFrom(subs).Draw(t, "subscription")
			now := int64(step+1) * 1e9
			switch rapid.IntRange(0, 6).Draw(t, "action") {
			case 0: // subscribe
				if model[s] == nil {
					src := rapid.SampledFrom(selectors).Draw(t, "selector")
					apply(to(s, &fsmpb.AddMember{}), to(s, subscribed("t#0", src, 0)))
					model[s], selOf[s] = map[string]bool{}, mustSel(t, src)
				}
			case 1: // unsubscribe
				apply(to(s, &fsmpb.DropMember{}))
				delete(model, s)
			case 2: // purge
				if model[s] != nil {
					apply(to(s, &fsmpb.Purge{}))
					model[s] = map[string]bool{}
				}
			case 6: // decide a prepared transaction
				if len(preparedOrder) == 0 {
					break
				}
				i := rapid.IntRange(0, len(preparedOrder)-1).Draw(t, "tx")
				tx := preparedOrder[i]
				preparedOrder = slices.Delete(preparedOrder, i, i+1)
				commit := rapid.Bool().Draw(t, "commit")
				if r := apply(to("t#0", &fsmpb.TxDecide{Tx: tx, Commit: commit, Record: true, Now: now}))[0]; r.Err != nil || r.Committed != commit {
					t.Fatalf("decide %s (commit %v): %+v", tx, commit, r)
				}
				for _, m := range prepared[tx] {
					switch {
					case commit:
						deliver(m)
					case m.DedupId != "" && seenDedup[m.DedupId] == m.Id:
						delete(seenDedup, m.DedupId) // a rollback forgets it
					}
				}
				delete(prepared, tx)
			default: // publish
				var msgs []*fsmpb.Message
				for range rapid.IntRange(1, 4).Draw(t, "messages") {
					next++
					m := numbered(fmt.Sprint("m", next), int64(rapid.IntRange(0, 9).Draw(t, "n")), "")
					if rapid.Bool().Draw(t, "dedup") {
						m.DedupId = fmt.Sprint("d", rapid.IntRange(0, 5).Draw(t, "dedup id"))
					}
					m.TypedProperties["odd"] = &fsmpb.PropertyValue{Value: &fsmpb.PropertyValue_Bool{Bool: next%2 == 1}}
					msgs = append(msgs, m)
				}
				var cmd proto.Message = &fsmpb.Publish{Now: now, Messages: msgs}
				tx := fmt.Sprint("tx", step)
				how := rapid.SampledFrom([]string{"publish", "one phase", "prepare"}).Draw(t, "how")
				if how != "publish" {
					cmd = &fsmpb.TxPrepare{Tx: tx, Primary: "t#0", Now: now, Messages: msgs, OnePhase: how == "one phase", Publish: true}
				}
				r := apply(to("t#0", cmd))[0]
				if r.Err != nil {
					t.Fatalf("%s refused: %v", how, r.Err)
				}
				for i, m := range msgs {
					first, dup := seenDedup[m.DedupId]
					if m.DedupId != "" && !dup {
						seenDedup[m.DedupId], first = m.Id, m.Id
					}
					if r.Enqueued[i].Duplicate != (dup && m.DedupId != "") || dup && m.DedupId != "" && r.Enqueued[i].ID != first {
						t.Fatalf("message %s: result %+v; dedup id %q seen for %q", m.Id, r.Enqueued[i], m.DedupId, first)
					}
					switch {
					case r.Enqueued[i].Duplicate:
					case how == "prepare":
						prepared[tx] = append(prepared[tx], m)
					default:
						deliver(m)
					}
				}
				if how == "prepare" {
					preparedOrder = append(preparedOrder, tx)
				}
			}
			for _, sub := range subs {
				held, m := model[sub], g.Member(sub)
				if (held == nil) != (m == nil) {
					t.Fatalf("step %d: %s present %v in the group, %v in the model", step, sub, m != nil, held != nil)
				}
				if m == nil {
					continue
				}
				if got := allPending(m); len(got) != len(held) || slices.ContainsFunc(got, func(id string) bool { return !held[id] }) {
					t.Fatalf("step %d: %s holds %v, want %v", step, sub, got, held)
				}
			}
		}
		restored, err := fsm.RestoreGroup(bytes.NewReader(groupSnapshot(t, g)))
		if err != nil {
			t.Fatal(err)
		}
		cmds := []*fsmpb.Command{to("t#0", &fsmpb.Publish{Now: 1e12, Messages: []*fsmpb.Message{numbered("last", 4, "")}})}
		for _, tx := range preparedOrder {
			cmds = append(cmds, to("t#0", &fsmpb.TxDecide{Tx: tx, Commit: true, Record: true, Now: 1e12}))
		}
		data := groupEntry(t, cmds...)
		idx++
		for _, x := range []*fsm.Group{g, restored} {
			if _, err := x.Apply(idx, data); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(groupState(t, g), groupState(t, restored)) {
			t.Fatal("the restored group differs after the same publish")
		}
	})
}

func mustSel(t *rapid.T, src string) *selector.Selector {
	s, err := selector.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
