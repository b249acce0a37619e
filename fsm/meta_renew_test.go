package fsm_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// renewable is a destination of members placed in groups created with r
// replicas (Initial set, as the cluster places them).
func renewable(name string, members, r int) *fsmpb.Destination {
	d := dest(name, members, r)
	for _, p := range d.Members {
		p.Initial = p.Replicas
	}
	return d
}

func members(t *testing.T, m *fsm.Meta, name string) []*fsmpb.MemberPlacement {
	t.Helper()
	d, ok := m.Destination(name)
	if !ok {
		t.Fatalf("no destination %s", name)
	}
	return d.Members
}

func TestSetReplicas_MarksEveryMemberForRenewal(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: renewable("q", 2, 1)})
	d, _ := f.m.Destination("q")
	for _, p := range d.Members {
		if fsm.NeedsRenewal(d, p) {
			t.Fatalf("member %d needs renewal before any change", p.Index)
		}
	}
	f.ok(&fsmpb.SetReplicas{Name: "q", Replicas: 3})
	d, _ = f.m.Destination("q")
	if d.Replicas != 3 {
		t.Fatalf("replicas %d; want 3", d.Replicas)
	}
	for _, p := range d.Members {
		if !fsm.NeedsRenewal(d, p) || fsm.Wanted(d, p) != 1 {
			t.Errorf("member %d: needs renewal %v, repair keeps it at %d; want true and 1", p.Index, fsm.NeedsRenewal(d, p), fsm.Wanted(d, p))
		}
	}
}

func TestRenewMember_DrainsThenTakesANewPlacementUnderTheSameIndex(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: renewable("q", 2, 1)})
	f.ok(&fsmpb.SetReplicas{Name: "q", Replicas: 2})
	f.ok(&fsmpb.RenewMember{Name: "q", Index: 0})
	ms := members(t, f.m, "q")
	if !ms[0].Renewing || !ms[0].Draining || ms[1].Draining {
		t.Fatalf("after the start: %+v; want member 0 renewing and draining, member 1 active", ms)
	}
	// A resize keeps it renewing and draining.
	f.ok(&fsmpb.ResizeDestination{Name: "q", Active: 2})
	if ms := members(t, f.m, "q"); !ms[0].Renewing || !ms[0].Draining {
		t.Fatalf("after a resize: %+v; want member 0 still renewing", ms[0])
	}

	np := &fsmpb.MemberPlacement{Index: 0, Replicas: []string{"n1", "n2"}, Initial: []string{"n1", "n2"}, Uid: "new"}
	f.ok(&fsmpb.RenewMember{Name: "q", Index: 0, Placement: np})
	d, _ := f.m.Destination("q")
	if p := d.Members[0]; p.Renewing || p.Draining || p.Uid != "new" || len(p.Replicas) != 2 || fsm.NeedsRenewal(d, p) {
		t.Fatalf("after the end: %+v; want the new placement, active", p)
	}
	if !fsm.NeedsRenewal(d, d.Members[1]) {
		t.Fatal("member 1 no longer needs renewal, though nothing renewed it")
	}
}

func TestRenewMember_RejectsInvalidAndChangesNothing(t *testing.T) {
	good := func(mod func(*fsmpb.MemberPlacement)) *fsmpb.MemberPlacement {
		p := &fsmpb.MemberPlacement{Index: 0, Replicas: []string{"n1", "n2"}, Initial: []string{"n1", "n2"}, Uid: "new"}
		mod(p)
		return p
	}
	cases := []struct {
		name  string
		setup []proto.Message
		cmd   *fsmpb.RenewMember
		want  error
	}{
		{"unknown destination", nil, &fsmpb.RenewMember{Name: "nope"}, fsm.ErrUnknownDestination},
		{"unknown member", nil, &fsmpb.RenewMember{Name: "q", Index: 2}, fsm.ErrInvalidSettings},
		{"start twice", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}}, &fsmpb.RenewMember{Name: "q", Index: 0}, fsm.ErrInvalidSettings},
		{"start on the only active member", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}}, &fsmpb.RenewMember{Name: "q", Index: 1}, fsm.ErrInvalidSettings},
		{"end without a start", nil, &fsmpb.RenewMember{Name: "q", Index: 0, Placement: good(func(*fsmpb.MemberPlacement) {})}, fsm.ErrInvalidSettings},
		{"end under another index", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}},
			&fsmpb.RenewMember{Name: "q", Index: 0, Placement: good(func(p *fsmpb.MemberPlacement) { p.Index = 1 })}, fsm.ErrInvalidSettings},
		{"end with the old uid", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}},
			&fsmpb.RenewMember{Name: "q", Index: 0, Placement: good(func(p *fsmpb.MemberPlacement) { p.Uid = "" })}, fsm.ErrInvalidSettings},
		{"end with the old factor", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}},
			&fsmpb.RenewMember{Name: "q", Index: 0, Placement: good(func(p *fsmpb.MemberPlacement) { p.Replicas = p.Replicas[:1] })}, fsm.ErrInvalidSettings},
		{"end draining", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}},
			&fsmpb.RenewMember{Name: "q", Index: 0, Placement: good(func(p *fsmpb.MemberPlacement) { p.Draining = true })}, fsm.ErrInvalidSettings},
		{"end on one node twice", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}},
			&fsmpb.RenewMember{Name: "q", Index: 0, Placement: good(func(p *fsmpb.MemberPlacement) { p.Replicas = []string{"n1", "n1"} })}, fsm.ErrInvalidSettings},
		{"onto a node not in the cluster", nil, &fsmpb.RenewMember{Name: "q", Index: 0, On: "n9"}, fsm.ErrInvalidSettings},
		{"onto a leaving node", []proto.Message{&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n4"}}, &fsmpb.DecommissionNode{Id: "n4"}},
			&fsmpb.RenewMember{Name: "q", Index: 0, On: "n4"}, fsm.ErrInvalidSettings},
		{"shrink leaving no active member", []proto.Message{&fsmpb.RenewMember{Name: "q", Index: 0}},
			nil, fsm.ErrInvalidSettings},
		{"replication factor 0", nil, nil, fsm.ErrInvalidSettings},
		{"replication factor of an unknown destination", nil, nil, fsm.ErrUnknownDestination},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newMeta(t)
			f.ok(&fsmpb.CreateDestination{Destination: renewable("q", 2, 1)})
			f.ok(&fsmpb.SetReplicas{Name: "q", Replicas: 2})
			for _, s := range c.setup {
				f.ok(s)
			}
			before := metaState(t, f.m)
			var cmd proto.Message = c.cmd
			switch c.name {
			case "shrink leaving no active member":
				cmd = &fsmpb.ResizeDestination{Name: "q", Active: 1}
			case "replication factor 0":
				cmd = &fsmpb.SetReplicas{Name: "q"}
			case "replication factor of an unknown destination":
				cmd = &fsmpb.SetReplicas{Name: "nope", Replicas: 1}
			}
			mustErr(t, f.do(cmd).Err, c.want, c.name)
			if !bytes.Equal(withoutApplied(t, before), withoutApplied(t, metaState(t, f.m))) {
				t.Fatal("a rejected command changed the state")
			}
		})
	}
}

// A shrink past a renewing member drains it to be removed, not renewed;
// a resize sets and clears the spare mark.
func TestResizeDestination_RenewingAndSpare(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: renewable("q", 1, 1)})
	f.ok(&fsmpb.SetReplicas{Name: "q", Replicas: 2})
	spare := &fsmpb.MemberPlacement{Index: 1, Replicas: []string{"n1", "n2"}, Initial: []string{"n1", "n2"}, Uid: "s"}
	f.ok(&fsmpb.ResizeDestination{Name: "q", Add: []*fsmpb.MemberPlacement{spare}, Active: 2, Spare: true})
	if d, _ := f.m.Destination("q"); !d.Spare {
		t.Fatal("the spare mark was not set")
	}
	f.ok(&fsmpb.RenewMember{Name: "q", Index: 0})
	f.ok(&fsmpb.ResizeDestination{Name: "q", Add: []*fsmpb.MemberPlacement{placement(2, "n3", "n4")}, Active: 3})
	d, _ := f.m.Destination("q")
	if d.Spare || !d.Members[0].Renewing {
		t.Fatalf("after growing: spare %v, member 0 %+v; want no spare mark, member 0 renewing", d.Spare, d.Members[0])
	}
	f.ok(&fsmpb.RenewMember{Name: "q", Index: 2})
	f.ok(&fsmpb.ResizeDestination{Name: "q", Active: 2})
	ms := members(t, f.m, "q")
	if !ms[0].Renewing || ms[1].Draining || !ms[2].Draining || ms[2].Renewing {
		t.Fatalf("after shrinking to 2: %+v; want 0 renewing, 1 active, 2 draining to be removed", ms)
	}
}

// Renewing onto a node records it for the new placement; a shrink that
// drains the member instead forgets it.
func TestRenewMember_OntoANode(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n4"}})
	f.ok(&fsmpb.CreateDestination{Destination: renewable("q", 2, 1)})
	f.ok(&fsmpb.RenewMember{Name: "q", Index: 1, On: "n4"})
	if p := members(t, f.m, "q")[1]; !p.Renewing || p.RenewOn != "n4" {
		t.Fatalf("after the start: %+v; want renewing onto n4", p)
	}
	f.ok(&fsmpb.ResizeDestination{Name: "q", Active: 1})
	if p := members(t, f.m, "q")[1]; p.Renewing || p.RenewOn != "" || !p.Draining {
		t.Fatalf("after a shrink past it: %+v; want draining, not renewing", p)
	}
}
