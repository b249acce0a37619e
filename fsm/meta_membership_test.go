package fsm_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

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
