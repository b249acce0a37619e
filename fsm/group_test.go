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
)

// to addresses a command body to a member of a shared group.
func to(member string, body proto.Message) *fsmpb.Command {
	c := fsm.MustCommand(body)
	c.Member = member
	return c
}

// groupEntry encodes addressed commands into one entry.
func groupEntry(t tb, cmds ...*fsmpb.Command) []byte {
	t.Helper()
	data, err := fsm.Encode(cmds...)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return data
}

// groupState is every member's name and full state, in order.
func groupState(t tb, g *fsm.Group) []byte {
	t.Helper()
	var out []byte
	for _, name := range g.Members() {
		out = append(out, name...)
		out = append(out, 0)
		out = append(out, fullState(t, g.Member(name))...)
	}
	return out
}

func groupSnapshot(t tb, g *fsm.Group) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := g.Capture().WriteTo(&buf); err != nil {
		t.Fatalf("write group snapshot: %v", err)
	}
	return buf.Bytes()
}

func TestGroup_EachCommandReachesItsMember(t *testing.T) {
	g := fsm.NewGroup()
	rs, err := g.Apply(1, groupEntry(t,
		to("a", &fsmpb.AddMember{}), to("b", &fsmpb.AddMember{}),
		to("a", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1")}}),
		to("b", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1"), msg("m2")}}),
		to("a", &fsmpb.OpenSession{Session: "s", Owner: owner}),
		to("a", &fsmpb.Deliver{Session: "s", Now: 2, MessageIds: []string{"m1"}}),
	))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("command %d rejected: %v", i, r.Err)
		}
	}
	if len(rs[3].Enqueued) != 2 || len(rs[5].Delivered) != 1 || rs[5].Delivered[0].Message.Id != "m1" {
		t.Fatalf("results = %+v", rs)
	}
	a, b := g.Member("a").Stats(), g.Member("b").Stats()
	if a.Pending != 0 || a.Delivered != 1 || b.Pending != 2 || b.Delivered != 0 {
		t.Fatalf("a = %+v, b = %+v", a, b)
	}
	if got := g.Members(); !slices.Equal(got, []string{"a", "b"}) || g.Applied() != 1 {
		t.Fatalf("Members = %v, Applied = %d", got, g.Applied())
	}
}

func TestGroup_CommandForAMemberItDoesNotHoldIsRejected(t *testing.T) {
	g := fsm.NewGroup()
	if _, err := g.Apply(1, groupEntry(t, to("a", &fsmpb.AddMember{}))); err != nil {
		t.Fatal(err)
	}
	before := groupState(t, g)
	rs, err := g.Apply(2, groupEntry(t, to("c", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1")}})))
	if err != nil || len(rs) != 1 || !errors.Is(rs[0].Err, fsm.ErrUnknownMember) || fsm.RejectionCode(rs[0].Err) == "" {
		t.Fatalf("Apply = %+v, %v; want a rejection wrapping ErrUnknownMember", rs, err)
	}
	if !bytes.Equal(before, groupState(t, g)) || !slices.Equal(g.Members(), []string{"a"}) {
		t.Fatal("a rejected command changed the group")
	}
}

func TestGroup_AddTwiceKeepsTheMemberAndDropEmptiesIt(t *testing.T) {
	g := fsm.NewGroup()
	apply := func(idx uint64, cmds ...*fsmpb.Command) {
		t.Helper()
		if _, err := g.Apply(idx, groupEntry(t, cmds...)); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, to("a", &fsmpb.AddMember{}), to("a", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1")}}))
	apply(2, to("a", &fsmpb.AddMember{}))
	if st := g.Member("a").Stats(); st.Pending != 1 {
		t.Fatalf("after a second add: %+v, want the message kept", st)
	}
	apply(3, to("a", &fsmpb.DropMember{}), to("b", &fsmpb.DropMember{}))
	if g.Member("a") != nil || len(g.Members()) != 0 {
		t.Fatalf("after drop: members %v", g.Members())
	}
	apply(4, to("a", &fsmpb.AddMember{}))
	if st := g.Member("a").Stats(); st.Pending != 0 {
		t.Fatalf("added again: %+v, want an empty member", st)
	}
}

func TestGroup_DroppedMemberGivesUpItsBodiesPutAway(t *testing.T) {
	g := fsm.NewGroup()
	g.TrackBodies()
	if _, err := g.Apply(1, groupEntry(t, to("a", &fsmpb.AddMember{}),
		to("a", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1"), msg("m2")}}))); err != nil {
		t.Fatal(err)
	}
	var next uint64
	err := g.Member("a").PutBodiesAway(0, func(bodies [][]byte) ([]fsm.BodyRef, error) {
		refs := make([]fsm.BodyRef, len(bodies))
		for i, b := range bodies {
			next++
			refs[i] = fsm.BodyRef{At: next, Len: uint32(len(b))}
		}
		return refs, nil
	})
	if err != nil || next != 2 {
		t.Fatalf("PutBodiesAway: %v, %d put", err, next)
	}
	if _, err := g.Apply(2, groupEntry(t, to("a", &fsmpb.DropMember{}))); err != nil {
		t.Fatal(err)
	}
	got := g.DroppedBodies()
	slices.SortFunc(got, func(x, y fsm.BodyRef) int { return int(x.At) - int(y.At) })
	if len(got) != 2 || got[0].At != 1 || got[1].At != 2 {
		t.Fatalf("DroppedBodies = %v, want both bodies", got)
	}
	if again := g.DroppedBodies(); len(again) != 0 {
		t.Fatalf("DroppedBodies again = %v", again)
	}
}

func TestGroup_CorruptEntryChangesNothing(t *testing.T) {
	good := to("a", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m2")}})
	for name, data := range map[string][]byte{
		"command without member": groupEntry(t, good, fsm.MustCommand(&fsmpb.Purge{})),
		"meta command":           groupEntry(t, good, to("a", &fsmpb.DeleteDestination{Name: "q"})),
		"unknown type":           rawEntry(t, 4, good, &fsmpb.Command{Type: 99, Member: "a"}),
		"body does not decode":   rawEntry(t, 4, good, &fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_ACK, Payload: []byte{0xff}, Member: "a"}),
		"newer version":          rawEntry(t, fsm.EntryVersion+1, good),
	} {
		t.Run(name, func(t *testing.T) {
			g := fsm.NewGroup()
			if _, err := g.Apply(1, groupEntry(t, to("a", &fsmpb.AddMember{}), to("a", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1")}}))); err != nil {
				t.Fatal(err)
			}
			before := groupState(t, g)
			rs, err := g.Apply(2, data)
			if !errors.Is(err, fsm.ErrCorrupt) || rs != nil {
				t.Fatalf("Apply = %+v, %v; want ErrCorrupt", rs, err)
			}
			if g.Applied() != 1 || !bytes.Equal(before, groupState(t, g)) {
				t.Fatal("a corrupt entry changed the group")
			}
		})
	}
}

func TestMember_RefusesACommandOfASharedGroup(t *testing.T) {
	m := newMember(t)
	before := fullState(t, m.m)
	rs, err := m.m.Apply(1, groupEntry(t, to("a", &fsmpb.Purge{})))
	if !errors.Is(err, fsm.ErrCorrupt) || rs != nil || !bytes.Equal(before, fullState(t, m.m)) {
		t.Fatalf("Apply = %+v, %v; want ErrCorrupt and no change", rs, err)
	}
}

func TestEncode_SharedGroupEntriesAreVersion4(t *testing.T) {
	for name, c := range map[string]*fsmpb.Command{
		"addressed": to("a", &fsmpb.Purge{}),
		"add":       to("a", &fsmpb.AddMember{}),
		"drop":      fsm.MustCommand(&fsmpb.DropMember{}),
	} {
		e, err := fsm.Decode(groupEntry(t, fsm.MustCommand(&fsmpb.Purge{}), c))
		if err != nil || e.Version != 4 || e.Commands[1].Member != c.Member {
			t.Errorf("%s: Decode = %v, %v; want version 4 and the member kept", name, e, err)
		}
	}
	if e, _ := fsm.Decode(entry(t, &fsmpb.Purge{})); e.Version != 1 {
		t.Errorf("an entry of one member is version %d, want 1", e.Version)
	}
}

// TestProperty_GroupAppliesAsSeparateMembers: whatever the interleaving,
// each member of a shared group ends in the state, and answers each
// command with the result, that it would alone in a group of its own fed
// its commands in the same order; and a snapshot restores the group
// exactly.
func TestProperty_GroupAppliesAsSeparateMembers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var seeds [][]*fsmpb.Command
		for _, e := range seedEntries(t) {
			if dec, err := fsm.Decode(e); err == nil && dec.Version == 1 && dec.Commands[0].Type != fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION && dec.Commands[0].Type != 99 {
				seeds = append(seeds, dec.Commands)
			}
		}
		names := []string{"q#0@u1", "q#1@u1", "r#0@u2"}
		g := fsm.NewGroup()
		alone := map[string]*fsm.Member{}
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for idx := uint64(1); idx <= uint64(steps); idx++ {
			var cmds []*fsmpb.Command
			var owner []string // the member of each command
			parts := rapid.IntRange(1, 3).Draw(t, "parts")
			for range parts {
				name := rapid.SampledFrom(names).Draw(t, "member")
				switch k := rapid.IntRange(0, 9).Draw(t, "kind"); k {
				case 0:
					cmds, owner = append(cmds, to(name, &fsmpb.AddMember{})), append(owner, name)
				case 1:
					cmds, owner = append(cmds, to(name, &fsmpb.DropMember{})), append(owner, name)
				default:
					for _, c := range seeds[rapid.IntRange(0, len(seeds)-1).Draw(t, "seed")] {
						c = proto.Clone(c).(*fsmpb.Command)
						c.Member = name
						cmds, owner = append(cmds, c), append(owner, name)
					}
				}
			}
			rs, err := g.Apply(idx, groupEntry(t, cmds...))
			if err != nil {
				t.Fatalf("entry %d: %v", idx, err)
			}
			// Alone, each member applies its own commands of this entry as
			// one entry, in their order, up to an add or a drop.
			i := 0
			for i < len(cmds) {
				name := owner[i]
				switch cmds[i].Type {
				case fsmpb.CommandType_COMMAND_TYPE_ADD_MEMBER:
					if alone[name] == nil {
						alone[name] = fsm.NewMember()
					}
					i++
					continue
				case fsmpb.CommandType_COMMAND_TYPE_DROP_MEMBER:
					delete(alone, name)
					i++
					continue
				}
				j := i
				for j < len(cmds) && owner[j] == name && !slices.Contains([]fsmpb.CommandType{fsmpb.CommandType_COMMAND_TYPE_ADD_MEMBER, fsmpb.CommandType_COMMAND_TYPE_DROP_MEMBER}, cmds[j].Type) {
					j++
				}
				m := alone[name]
				if m == nil {
					for k := i; k < j; k++ {
						if !errors.Is(rs[k].Err, fsm.ErrUnknownMember) {
							t.Fatalf("entry %d command %d for %s, not held: %+v", idx, k, name, rs[k])
						}
					}
					i = j
					continue
				}
				// The same index: a member that applied this entry's earlier
				// commands would skip it, so alone it applies to a copy.
				want, err := applyAt(t, m, idx, cmds[i:j])
				if err != nil {
					t.Fatalf("entry %d alone: %v", idx, err)
				}
				for k := range want {
					w, got := want[k], rs[i+k]
					sameErr := fmt.Sprint(w.Err) == fmt.Sprint(got.Err)
					w.Err, got.Err = nil, nil
					if !sameErr || !sameResult(w, got) {
						t.Fatalf("entry %d command %d (%v) for %s: got %+v, alone %+v", idx, i+k, cmds[i+k].Type, name, rs[i+k], want[k])
					}
				}
				i = j
			}
			var held int64
			for _, name := range g.Members() {
				held += g.Member(name).Stats().Bytes
			}
			if g.Bytes() != held {
				t.Fatalf("entry %d: Bytes = %d, the members hold %d", idx, g.Bytes(), held)
			}
			touched := slices.Clone(g.Touched())
			for k, c := range cmds {
				if !slices.Contains([]fsmpb.CommandType{fsmpb.CommandType_COMMAND_TYPE_ADD_MEMBER, fsmpb.CommandType_COMMAND_TYPE_DROP_MEMBER}, c.Type) && !errors.Is(rs[k].Err, fsm.ErrUnknownMember) && !slices.Contains(touched, c.Member) {
					t.Fatalf("entry %d: %s not in Touched %v", idx, c.Member, touched)
				}
			}
			if got := g.Members(); !slices.Equal(got, slices.Sorted(func(yield func(string) bool) {
				for n := range alone {
					if !yield(n) {
						return
					}
				}
			})) {
				t.Fatalf("entry %d: group holds %v, alone %d members", idx, got, len(alone))
			}
			for name, m := range alone {
				if !bytes.Equal(canonical(t, snapshotBytes(t, m), false), canonical(t, snapshotBytes(t, g.Member(name)), false)) {
					t.Fatalf("entry %d: member %s differs from the same member alone", idx, name)
				}
			}
		}
		raw := groupSnapshot(t, g)
		r, err := fsm.RestoreGroup(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if r.Applied() != g.Applied() || r.Bytes() != g.Bytes() || !bytes.Equal(groupState(t, g), groupState(t, r)) || !bytes.Equal(raw, groupSnapshot(t, r)) {
			t.Fatal("the restored group differs")
		}
	})
}

// applyAt applies cmds to m as one entry at idx, or, when m already applied
// idx (an earlier part of the same group entry), as the next entry of a
// copy of m put back in its place.
func applyAt(t *rapid.T, m *fsm.Member, idx uint64, cmds []*fsmpb.Command) ([]fsm.Result, error) {
	data, err := fsm.Encode(stripped(cmds)...)
	if err != nil {
		return nil, err
	}
	if m.Applied() < idx {
		return m.Apply(idx, data)
	}
	// Replaying with a higher index keeps the member's applied index
	// apart from the group's for this member, which canonical ignores.
	return m.Apply(m.Applied()+1, data)
}

// stripped copies cmds without their member, as a group of one writes them.
func stripped(cmds []*fsmpb.Command) []*fsmpb.Command {
	out := make([]*fsmpb.Command, len(cmds))
	for i, c := range cmds {
		out[i] = &fsmpb.Command{Type: c.Type, Payload: c.Payload}
	}
	return out
}

func TestRestoreGroup_RefusesABrokenSnapshot(t *testing.T) {
	g := fsm.NewGroup()
	if _, err := g.Apply(1, groupEntry(t, to("a", &fsmpb.AddMember{}), to("b", &fsmpb.AddMember{}),
		to("b", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1")}}))); err != nil {
		t.Fatal(err)
	}
	raw := groupSnapshot(t, g)
	twice, err := proto.Marshal(&fsmpb.GroupSnapshot{Applied: 1, Members: []string{"a", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"cut short":   raw[:len(raw)-3],
		"no members":  raw[:5],
		"named twice": append([]byte{byte(len(twice))}, twice...),
		"garbage":     []byte("garbage"),
	} {
		if g, err := fsm.RestoreGroup(bytes.NewReader(data)); !errors.Is(err, fsm.ErrCorrupt) || g != nil {
			t.Errorf("%s: RestoreGroup = %v, %v; want ErrCorrupt", name, g, err)
		}
	}
}

// FuzzGroupApply: arbitrary entries never panic a group; each either is
// refused as corrupt and changes nothing, or applies with one result per
// command; a snapshot then restores the same group.
func FuzzGroupApply(f *testing.F) {
	var seeds [][]byte
	for i, e := range seedEntries(f) {
		dec, err := fsm.Decode(e)
		if err != nil {
			continue
		}
		for _, c := range dec.Commands {
			c.Member = fmt.Sprintf("m%d", i%2)
		}
		seeds = append(seeds, groupEntry(f, dec.Commands...))
	}
	add := groupEntry(f, to("m0", &fsmpb.AddMember{}), to("m1", &fsmpb.AddMember{}))
	f.Add(frame(append([][]byte{add}, seeds...)...))
	f.Add(frame(add, seeds[0], seeds[3], seeds[5], groupEntry(f, to("m1", &fsmpb.DropMember{})), seeds[7]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := fsm.NewGroup()
		for i, e := range unframe(data) {
			idx := uint64(i + 1)
			before := groupState(t, g)
			rs, err := g.Apply(idx, e)
			if err != nil {
				if !errors.Is(err, fsm.ErrCorrupt) || rs != nil || g.Applied() == idx || !bytes.Equal(before, groupState(t, g)) {
					t.Fatalf("entry %d: Apply = %+v, %v, and the group changed or the error is not ErrCorrupt", i, rs, err)
				}
				continue
			}
			if dec, _ := fsm.Decode(e); len(rs) != len(dec.GetCommands()) || g.Applied() != idx {
				t.Fatalf("entry %d: %d results, Applied %d", i, len(rs), g.Applied())
			}
		}
		r, err := fsm.RestoreGroup(bytes.NewReader(groupSnapshot(t, g)))
		if err != nil || !bytes.Equal(groupState(t, g), groupState(t, r)) {
			t.Fatalf("restore: %v, or the restored group differs", err)
		}
	})
}

// FuzzRestoreGroup: RestoreGroup never panics on arbitrary bytes. A group
// it returns writes a snapshot that restores to the same group: the same
// members and bytes held, and the same snapshot bytes when written again.
func FuzzRestoreGroup(f *testing.F) {
	g := fsm.NewGroup()
	if _, err := g.Apply(1, groupEntry(f, to("a", &fsmpb.AddMember{}), to("b", &fsmpb.AddMember{}),
		to("b", &fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("m1"), msg("m2", prio(3))}}))); err != nil {
		f.Fatal(err)
	}
	f.Add(groupSnapshot(f, g))
	f.Add(groupSnapshot(f, fsm.NewGroup()))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := fsm.RestoreGroup(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, fsm.ErrCorrupt) || g != nil {
				t.Fatalf("RestoreGroup = %v, %v", g, err)
			}
			return
		}
		once := groupSnapshot(t, g)
		again, err := fsm.RestoreGroup(bytes.NewReader(once))
		if err != nil {
			t.Fatalf("a restored group's own snapshot does not restore: %v", err)
		}
		if !slices.Equal(g.Members(), again.Members()) || g.Applied() != again.Applied() || g.Bytes() != again.Bytes() {
			t.Fatalf("snapshot and restore changed the group: members %v, applied %d, %d bytes, then %v, %d, %d",
				g.Members(), g.Applied(), g.Bytes(), again.Members(), again.Applied(), again.Bytes())
		}
		if twice := groupSnapshot(t, again); !bytes.Equal(once, twice) {
			t.Fatal("snapshot, restore, snapshot changed the group")
		}
	})
}
