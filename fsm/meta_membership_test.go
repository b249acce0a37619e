package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

func TestRemoveNode_NeverRegisteredAgain(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1"}})
	f.ok(&fsmpb.RemoveNode{Id: "n1"})
	if _, ok := f.m.Node("n1"); ok || !f.m.Removed("n1") {
		t.Fatal("removed node still registered")
	}
	if r := f.do(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1"}}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Fatalf("registering a removed node: %v, want ErrInvalidSettings", r.Err)
	}
	if r := f.do(&fsmpb.RemoveNode{Id: "n9"}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Fatalf("removing an unknown node: %v", r.Err)
	}
	var b bytes.Buffer
	if err := f.m.WriteSnapshot(&b); err != nil {
		t.Fatal(err)
	}
	m2, err := fsm.RestoreMeta(&b)
	if err != nil || !m2.Removed("n1") {
		t.Fatalf("removed nodes lost in a snapshot: %v", err)
	}
}

func TestReplaceReplica_MovesOneReplica(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: dest("q", 1, 3)})
	before, _ := f.m.Destination("q")
	old := before.Members[0].Replicas[1]
	f.ok(&fsmpb.ReplaceReplica{Destination: "q", Member: 0, Old: old, New: "n9"})
	after, _ := f.m.Destination("q")
	if slices.Contains(after.Members[0].Replicas, old) || !slices.Contains(after.Members[0].Replicas, "n9") {
		t.Fatalf("replicas %v after replacing %s with n9", after.Members[0].Replicas, old)
	}
	if !slices.Contains(before.Members[0].Replicas, old) {
		t.Fatal("the earlier record was modified in place")
	}
	for _, c := range []*fsmpb.ReplaceReplica{
		{Destination: "nope", Old: "n9", New: "n8"},
		{Destination: "q", Member: 3, Old: "n9", New: "n8"},
		{Destination: "q", Old: "absent", New: "n8"},
		{Destination: "q", Old: "n9", New: after.Members[0].Replicas[0]},
	} {
		if r := f.do(c); r.Err == nil {
			t.Errorf("%v accepted", c)
		}
	}
	f.ok(&fsmpb.ReplaceReplica{Destination: "q", Old: "n9"})
	if d, _ := f.m.Destination("q"); len(d.Members[0].Replicas) != 2 {
		t.Fatalf("dropping a replica left %v", d.Members[0].Replicas)
	}
}

// grouped is dest with each member in the shared group its replicas name.
func grouped(name string, members, r int) *fsmpb.Destination {
	d := dest(name, members, r)
	for _, p := range d.Members {
		p.Group = "g-" + strings.Join(p.Replicas, ",")
	}
	return d
}

func TestReplaceReplica_MovesEveryMemberOfASharedGroup(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: grouped("a", 2, 3)})
	f.ok(&fsmpb.CreateDestination{Destination: grouped("b", 1, 3)})
	solo := dest("c", 1, 3)
	f.ok(&fsmpb.CreateDestination{Destination: solo})
	a, _ := f.m.Destination("a")
	// a#0 and b#0 are in group g-n1,n2,n3; a#1 is not, nor c#0.
	f.ok(&fsmpb.ReplaceReplica{Destination: "a", Member: 0, Old: "n2", New: "n9"})
	a2, _ := f.m.Destination("a")
	b2, _ := f.m.Destination("b")
	c2, _ := f.m.Destination("c")
	want := []string{"n1", "n9", "n3"}
	if !slices.Equal(a2.Members[0].Replicas, want) || !slices.Equal(b2.Members[0].Replicas, want) {
		t.Fatalf("group members' replicas: a#0 %v, b#0 %v; want %v for both", a2.Members[0].Replicas, b2.Members[0].Replicas, want)
	}
	if !slices.Equal(a2.Members[1].Replicas, a.Members[1].Replicas) || !slices.Equal(c2.Members[0].Replicas, solo.Members[0].Replicas) {
		t.Fatalf("members of other groups changed: a#1 %v, c#0 %v", a2.Members[1].Replicas, c2.Members[0].Replicas)
	}
	if !slices.Contains(a.Members[0].Replicas, "n2") {
		t.Fatal("the earlier record was modified in place")
	}
}

func TestCreateDestination_RefusesASharedGroupOnOtherReplicas(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: grouped("a", 1, 3)})
	d := grouped("b", 1, 3)
	d.Members[0].Replicas = []string{"n1", "n2", "n4"}
	if r := f.do(&fsmpb.CreateDestination{Destination: d}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Fatalf("create in group g-n1,n2,n3 on n1,n2,n4: %v, want ErrInvalidSettings", r.Err)
	}
	add := proto.Clone(d.Members[0]).(*fsmpb.MemberPlacement)
	add.Index = 1
	if r := f.do(&fsmpb.ResizeDestination{Name: "a", Active: 2, Add: []*fsmpb.MemberPlacement{add}}); !errors.Is(r.Err, fsm.ErrInvalidSettings) || !strings.Contains(r.Err.Error(), "group") {
		t.Fatalf("resize into that group on other replicas: %v, want ErrInvalidSettings", r.Err)
	}
	add.Replicas = []string{"n1", "n2", "n3"}
	f.ok(&fsmpb.ResizeDestination{Name: "a", Active: 2, Add: []*fsmpb.MemberPlacement{add}})
	if e, _ := fsm.Decode(entry(t, &fsmpb.CreateDestination{Destination: grouped("c", 1, 3)})); e.Version != 4 {
		t.Fatalf("a create into shared groups is entry version %d, want 4", e.Version)
	}
}

// AddReplica gives an under-replicated member (and its shared group) a
// replica at the end of its list; it changes nothing for a node that is
// not registered or already holds one, or a member with all it wants.
func TestAddReplica_RepairsAnUnderReplicatedGroup(t *testing.T) {
	f := newMeta(t)
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id}})
	}
	f.ok(&fsmpb.CreateDestination{Destination: grouped("a", 2, 3)})
	f.ok(&fsmpb.CreateDestination{Destination: grouped("b", 1, 3)})
	f.ok(&fsmpb.RemoveNode{Id: "n3"})
	f.ok(&fsmpb.ReplaceReplica{Destination: "a", Member: 0, Old: "n3"}) // no node was free: dropped
	a, _ := f.m.Destination("a")
	if got := a.Members[0].Replicas; !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("a#0 after the drop: %v", got)
	}
	for _, c := range []*fsmpb.AddReplica{
		{Destination: "nope", Node: "n4"},
		{Destination: "a", Member: 5, Node: "n4"},
		{Destination: "a", Member: 0, Node: "n3"}, // removed
		{Destination: "a", Member: 0, Node: "n9"}, // never registered
		{Destination: "a", Member: 0, Node: "n2"}, // holds one
		{Destination: "a", Member: 1, Node: "n1"}, // a#1 (n2, n3, n4) has its 3
	} {
		if r := f.do(c); !errors.Is(r.Err, fsm.ErrInvalidSettings) && !errors.Is(r.Err, fsm.ErrUnknownDestination) {
			t.Errorf("%v: %v, want a refusal", c, r.Err)
		}
	}
	if a2, _ := f.m.Destination("a"); !proto.Equal(a, a2) {
		t.Fatalf("refused adds changed a: %v", a2)
	}
	f.ok(&fsmpb.AddReplica{Destination: "b", Member: 0, Node: "n4"})
	a2, _ := f.m.Destination("a")
	b2, _ := f.m.Destination("b")
	want := []string{"n1", "n2", "n4"}
	if !slices.Equal(a2.Members[0].Replicas, want) || !slices.Equal(b2.Members[0].Replicas, want) {
		t.Fatalf("group members' replicas: a#0 %v, b#0 %v; want %v for both", a2.Members[0].Replicas, b2.Members[0].Replicas, want)
	}
	if !slices.Equal(a2.Members[1].Replicas, a.Members[1].Replicas) {
		t.Fatalf("a#1, in another group, changed: %v", a2.Members[1].Replicas)
	}
	if r := f.do(&fsmpb.AddReplica{Destination: "a", Member: 0, Node: "n3"}); r.Err == nil {
		t.Fatal("a fourth replica accepted")
	}
}

// A node registered again under another incarnation came back empty: each
// group it holds a replica of, beside others, waits for it to catch up,
// until ReplicaCaughtUp says it has; its only replicas start again.
func TestRegisterNode_NewIncarnationRejoinsItsGroups(t *testing.T) {
	f := newMeta(t)
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id}})
	}
	f.ok(&fsmpb.CreateDestination{Destination: grouped("a", 3, 3)}) // n1-n3, n2-n4, n3-n5
	f.ok(&fsmpb.CreateDestination{Destination: grouped("b", 1, 3)}) // a#0's group
	f.ok(&fsmpb.CreateDestination{Destination: dest("solo", 2, 1)}) // n1; n2 alone
	a, _ := f.m.Destination("a")
	g0, g1, g2 := fsm.GroupKey("a", a.Members[0]), fsm.GroupKey("a", a.Members[1]), fsm.GroupKey("a", a.Members[2])
	rejoining := func() (out []string) {
		for _, g := range []string{g0, g1, g2, "solo#0", "solo#1"} {
			if f.m.Rejoining("n2", g) {
				out = append(out, g)
			}
		}
		return out
	}
	// A build that did not record incarnations, then the same directory.
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2", Incarnation: "x"}})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2", Incarnation: "x", ClientAddr: "moved:1"}})
	if got := rejoining(); len(got) != 0 {
		t.Fatalf("rejoining %v without a new incarnation", got)
	}
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2", Incarnation: "y"}})
	if got := rejoining(); !slices.Equal(got, []string{g0, g1}) {
		t.Fatalf("rejoining %v, want %v (not %s, no replica there, nor solo#1, its only replica)", got, []string{g0, g1}, g2)
	}
	for _, c := range []*fsmpb.ReplicaCaughtUp{{Node: "n2", Group: g2}, {Node: "n3", Group: g0}, {Node: "n2", Group: "nope"}} {
		before := f.m.Snapshot()
		if r := f.do(c); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
			t.Errorf("%v: %v, want a refusal", c, r.Err)
		}
		if after := f.m.Snapshot(); !slices.EqualFunc(before.Rejoining, after.Rejoining, func(x, y *fsmpb.Rejoining) bool { return proto.Equal(x, y) }) {
			t.Fatalf("refused %v changed what is rejoining", c)
		}
	}
	f.ok(&fsmpb.ReplicaCaughtUp{Node: "n2", Group: g0})
	if got := rejoining(); !slices.Equal(got, []string{g1}) {
		t.Fatalf("rejoining %v after %s caught up, want [%s]", got, g0, g1)
	}
	f.ok(&fsmpb.RemoveNode{Id: "n2"})
	if got := rejoining(); len(got) != 0 {
		t.Fatalf("a removed node still rejoining %v", got)
	}
}

// No sequence of registrations (under new incarnations too), removals,
// creates, replacements, repairs, changes of preferred host, rebuilt and
// caught-up replicas puts two replicas of a member on one node, gives the members of
// a shared group different replicas, or a member more replicas than its
// destination wants; and a refused command changes nothing.
func TestMetaPlacement_Property(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	rapid.Check(t, func(rt *rapid.T) {
		m := fsm.NewMeta()
		var idx uint64
		var names []string
		held := map[string]map[string]bool{} // by node, the groups it ever held a replica of
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			var body proto.Message
			switch rapid.IntRange(0, 5).Draw(rt, "kind") {
			case 0:
				id := rapid.SampledFrom(nodes).Draw(rt, "node")
				body = &fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id, Incarnation: rapid.SampledFrom([]string{"", "a", "b"}).Draw(rt, "incarnation")}}
				group := "g-" + strings.Join(rapid.Permutation(nodes).Draw(rt, "group")[:rapid.IntRange(1, 3).Draw(rt, "size")], ",")
				switch rapid.IntRange(0, 2).Draw(rt, "group change") {
				case 1:
					body = &fsmpb.ReplicaCaughtUp{Node: id, Group: group}
				case 2:
					body = &fsmpb.RebuildReplica{Node: id, Group: group}
				}
			case 1:
				body = &fsmpb.RemoveNode{Id: rapid.SampledFrom(nodes).Draw(rt, "node")}
			case 2:
				r := rapid.IntRange(1, 3).Draw(rt, "replicas")
				replicas := rapid.Permutation(nodes).Draw(rt, "order")[:r]
				name := fmt.Sprintf("d%d", len(names))
				d := &fsmpb.Destination{Name: name, Kind: fsmpb.DestinationKind_DESTINATION_KIND_QUEUE, Replicas: uint32(r)}
				for i := range rapid.IntRange(1, 2).Draw(rt, "members") {
					d.Members = append(d.Members, &fsmpb.MemberPlacement{Index: uint32(i), Replicas: slices.Clone(replicas), Group: "g-" + strings.Join(replicas, ",")})
				}
				names = append(names, name)
				body = &fsmpb.CreateDestination{Destination: d}
			case 3, 4, 5:
				if len(names) == 0 {
					continue
				}
				dest := rapid.SampledFrom(names).Draw(rt, "dest")
				member := uint32(rapid.IntRange(0, 2).Draw(rt, "member"))
				node := rapid.SampledFrom(append(slices.Clone(nodes), "")).Draw(rt, "node")
				switch rapid.IntRange(0, 2).Draw(rt, "change") {
				case 0:
					body = &fsmpb.AddReplica{Destination: dest, Member: member, Node: node}
				case 1:
					body = &fsmpb.PreferReplica{Destination: dest, Member: member, Node: node}
				}
				if body != nil {
					break
				}
				// Mostly one of the member's replicas, which drops or moves it.
				old := rapid.SampledFrom(nodes).Draw(rt, "old")
				if d, ok := m.Destination(dest); ok && int(member) < len(d.Members) && rapid.IntRange(0, 3).Draw(rt, "placed") > 0 {
					old = rapid.SampledFrom(d.Members[member].Replicas).Draw(rt, "old")
				}
				body = &fsmpb.ReplaceReplica{Destination: dest, Member: member, Old: old, New: node}
			}
			before := m.Snapshot()
			idx++
			rs, err := m.Apply(idx, entry(rt, body))
			if err != nil {
				rt.Fatalf("apply %v: %v", body, err)
			}
			// A refused command moves the applied index on, and nothing else.
			if after := m.Snapshot(); rs[0].Err != nil {
				after.Applied = before.Applied
				if !proto.Equal(before, after) {
					rt.Fatalf("refused %v (%v) changed the state", body, rs[0].Err)
				}
			}
			groups := map[string][]string{}
			for _, d := range m.Destinations() {
				for _, p := range d.Members {
					if len(p.Replicas) > int(d.Replicas) {
						rt.Fatalf("%s#%d has replicas %v, more than %d", d.Name, p.Index, p.Replicas, d.Replicas)
					}
					if len(slices.Compact(slices.Sorted(slices.Values(p.Replicas)))) != len(p.Replicas) {
						rt.Fatalf("%s#%d has two replicas on one node: %v", d.Name, p.Index, p.Replicas)
					}
					if g, ok := groups[p.Group]; ok && !slices.Equal(g, p.Replicas) {
						rt.Fatalf("group %s: members on %v and %v", p.Group, g, p.Replicas)
					}
					groups[p.Group] = p.Replicas
					for _, id := range p.Replicas {
						if held[id] == nil {
							held[id] = map[string]bool{}
						}
						held[id][p.Group] = true
					}
				}
			}
			for _, r := range m.Snapshot().Rejoining {
				if _, ok := m.Node(r.Node); !ok {
					rt.Fatalf("unregistered node %s rejoining %v", r.Node, r.Groups)
				}
				for _, g := range r.Groups {
					if !held[r.Node][g] {
						rt.Fatalf("%s rejoining group %s, which it never held", r.Node, g)
					}
				}
			}
		}
	})
}

// PreferReplica moves a replica to the front of a member's replicas, and
// of its shared group's; the others keep their order.
func TestPreferReplica_MakesAReplicaThePreferredHost(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: grouped("a", 2, 3)})
	f.ok(&fsmpb.CreateDestination{Destination: grouped("b", 1, 3)})
	a, _ := f.m.Destination("a")
	for _, c := range []*fsmpb.PreferReplica{
		{Destination: "nope", Node: "n1"},
		{Destination: "a", Member: 5, Node: "n1"},
		{Destination: "a", Member: 0, Node: "n5"}, // not a replica of a#0
	} {
		if r := f.do(c); r.Err == nil {
			t.Errorf("%v accepted", c)
		}
	}
	f.ok(&fsmpb.PreferReplica{Destination: "b", Member: 0, Node: "n3"})
	a2, _ := f.m.Destination("a")
	b2, _ := f.m.Destination("b")
	want := []string{"n3", "n1", "n2"}
	if !slices.Equal(a2.Members[0].Replicas, want) || !slices.Equal(b2.Members[0].Replicas, want) {
		t.Fatalf("a#0 %v, b#0 %v; want %v for both", a2.Members[0].Replicas, b2.Members[0].Replicas, want)
	}
	if !slices.Equal(a2.Members[1].Replicas, a.Members[1].Replicas) || !slices.Equal(a.Members[0].Replicas, []string{"n1", "n2", "n3"}) {
		t.Fatalf("another group's member or the earlier record changed: a#1 %v, old a#0 %v", a2.Members[1].Replicas, a.Members[0].Replicas)
	}
}

func TestDecommissionNode_MarksARegisteredNodeLeaving(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1"}})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2"}})
	before := withoutApplied(t, metaState(t, f.m))
	for _, c := range []struct {
		id   string
		want error
	}{{"", fsm.ErrMalformed}, {"n9", fsm.ErrInvalidSettings}} {
		if r := f.do(&fsmpb.DecommissionNode{Id: c.id}); !errors.Is(r.Err, c.want) {
			t.Fatalf("decommissioning %q: %v, want %v", c.id, r.Err, c.want)
		}
	}
	if !bytes.Equal(withoutApplied(t, metaState(t, f.m)), before) {
		t.Fatal("a refused DecommissionNode changed the meta state")
	}
	f.ok(&fsmpb.DecommissionNode{Id: "n1"})
	f.ok(&fsmpb.DecommissionNode{Id: "n1"})
	restored, err := fsm.RestoreMeta(bytes.NewReader(metaState(t, f.m)))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*fsm.Meta{f.m, restored} {
		if !m.Decommissioning("n1") || m.Decommissioning("n2") {
			t.Fatalf("decommissioning n1 %v, n2 %v; want n1 only", m.Decommissioning("n1"), m.Decommissioning("n2"))
		}
	}
	f.ok(&fsmpb.RemoveNode{Id: "n1"})
	if f.m.Decommissioning("n1") || !f.m.Removed("n1") {
		t.Fatal("a removed node is still decommissioning, or not removed")
	}
}

// A removed node's id joins again only from an empty data directory (a
// new incarnation), and only once no member is placed on it: a StatefulSet
// scaled down and up again reuses its pods' names.
func TestRemoveNode_JoinsAgainOnlyAfresh(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1", Incarnation: "a"}})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2", Incarnation: "b"}})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n3", Incarnation: "c"}})
	f.ok(&fsmpb.CreateDestination{Destination: dest("q", 1, 2)}) // on n1, n2
	f.ok(&fsmpb.RemoveNode{Id: "n1"})
	refused := func(m *fsm.Meta, n *fsmpb.Node, why string) {
		t.Helper()
		if m.MayRegister(n) {
			t.Fatalf("%s: MayRegister(%v) = true", why, n)
		}
	}
	refused(f.m, &fsmpb.Node{Id: "n1", Incarnation: "new"}, "still placed on n1")
	if r := f.do(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1", Incarnation: "new"}}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Fatalf("registering n1 while a member is placed on it: %v", r.Err)
	}
	f.ok(&fsmpb.ReplaceReplica{Destination: "q", Member: 0, Old: "n1", New: "n3"})
	restored, err := fsm.RestoreMeta(bytes.NewReader(metaState(t, f.m)))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*fsm.Meta{f.m, restored} {
		refused(m, &fsmpb.Node{Id: "n1", Incarnation: "a"}, "its old data directory")
		refused(m, &fsmpb.Node{Id: "n1"}, "no incarnation")
		if !m.MayRegister(&fsmpb.Node{Id: "n1", Incarnation: "new"}) {
			t.Fatal("n1 started afresh may not register")
		}
	}
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1", Incarnation: "new"}})
	if _, ok := f.m.Node("n1"); !ok || f.m.Removed("n1") {
		t.Fatal("n1 started afresh is not registered again")
	}
}

// keep_host moves a preferred host's replica without making the new,
// empty replica the preferred host; elsewhere it replaces in place.
func TestReplaceReplica_KeepHost(t *testing.T) {
	for _, c := range []struct {
		old  string
		keep bool
		want []string
	}{
		{"n1", false, []string{"n4", "n2", "n3"}},
		{"n1", true, []string{"n2", "n3", "n4"}},
		{"n2", true, []string{"n1", "n4", "n3"}},
	} {
		f := newMeta(t)
		for _, id := range []string{"n1", "n2", "n3", "n4"} {
			f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id}})
		}
		f.ok(&fsmpb.CreateDestination{Destination: dest("q", 1, 3)})
		f.ok(&fsmpb.ReplaceReplica{Destination: "q", Old: c.old, New: "n4", KeepHost: c.keep})
		if d, _ := f.m.Destination("q"); !slices.Equal(d.Members[0].Replicas, c.want) {
			t.Errorf("replacing %s (keep_host %v): replicas %v, want %v", c.old, c.keep, d.Members[0].Replicas, c.want)
		}
	}
}

// A replica that could not apply an entry is rebuilt: its group waits for
// it to catch up as for one back empty. Only a replica beside others, one
// of a group at a time; a repeat changes nothing, a refusal nothing either.
func TestRebuildReplica_OneReplicaOfAGroupAtATime(t *testing.T) {
	f := newMeta(t)
	for _, id := range []string{"n1", "n2", "n3"} {
		f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id}})
	}
	f.ok(&fsmpb.CreateDestination{Destination: dest("q", 1, 3)})
	f.ok(&fsmpb.CreateDestination{Destination: dest("solo", 1, 1)})
	q, _ := f.m.Destination("q")
	solo, _ := f.m.Destination("solo")
	g, gSolo := fsm.GroupKey("q", q.Members[0]), fsm.GroupKey("solo", solo.Members[0])
	f.ok(&fsmpb.RebuildReplica{Node: "n2", Group: g})
	if !f.m.Rejoining("n2", g) {
		t.Fatalf("n2's replica of %s not rejoining after RebuildReplica", g)
	}
	f.ok(&fsmpb.RebuildReplica{Node: "n2", Group: g}) // a repeat, once its answer was lost
	for _, c := range []*fsmpb.RebuildReplica{
		{Node: "n3", Group: g},                            // another of the same group
		{Node: solo.Members[0].Replicas[0], Group: gSolo}, // an only replica
		{Node: "n9", Group: g},                            // no replica there
		{Node: "n1", Group: "nope"},
	} {
		before := f.m.Snapshot()
		if r := f.do(c); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
			t.Errorf("%v: %v, want a refusal", c, r.Err)
		}
		if after := f.m.Snapshot(); !slices.EqualFunc(before.Rejoining, after.Rejoining, func(x, y *fsmpb.Rejoining) bool { return proto.Equal(x, y) }) {
			t.Fatalf("refused %v changed what is rejoining", c)
		}
	}
	f.ok(&fsmpb.ReplicaCaughtUp{Node: "n2", Group: g})
	f.ok(&fsmpb.RebuildReplica{Node: "n3", Group: g})
	if f.m.Rejoining("n2", g) || !f.m.Rejoining("n3", g) {
		t.Fatalf("after n2 caught up and n3 asked: n2 rejoining %v, n3 %v; want false, true", f.m.Rejoining("n2", g), f.m.Rejoining("n3", g))
	}
}
