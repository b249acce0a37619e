package fsm_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

func placement(index uint32, replicas ...string) *fsmpb.MemberPlacement {
	return &fsmpb.MemberPlacement{Index: index, Replicas: replicas, Initial: replicas, Uid: "u"}
}

func drainingOf(t *testing.T, m *fsm.Meta, name string) []bool {
	t.Helper()
	d, ok := m.Destination(name)
	if !ok {
		t.Fatalf("no destination %s", name)
	}
	var out []bool
	for _, p := range d.Members {
		out = append(out, p.Draining)
	}
	return out
}

func TestResizeDestination_AddsMembersAndDrainsFromActive(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: dest("q", 2, 1)})
	before, _ := f.m.Destination("q")

	f.ok(&fsmpb.ResizeDestination{Name: "q", Add: []*fsmpb.MemberPlacement{placement(2, "n3")}, Active: 3})
	if got := drainingOf(t, f.m, "q"); len(got) != 3 || got[0] || got[1] || got[2] {
		t.Fatalf("after growing to 3: draining %v", got)
	}
	if len(before.Members) != 2 {
		t.Fatal("resize changed a destination a reader already held")
	}
	f.ok(&fsmpb.ResizeDestination{Name: "q", Active: 1})
	if got := drainingOf(t, f.m, "q"); got[0] || !got[1] || !got[2] {
		t.Fatalf("after shrinking to 1: draining %v; want false, true, true", got)
	}
	// Growing again takes the draining members back before adding any.
	f.ok(&fsmpb.ResizeDestination{Name: "q", Active: 2})
	if got := drainingOf(t, f.m, "q"); got[0] || got[1] || !got[2] {
		t.Fatalf("after growing back to 2: draining %v; want false, false, true", got)
	}
}

func TestResizeDestination_RejectsInvalidAndChangesNothing(t *testing.T) {
	cases := []struct {
		name string
		cmd  *fsmpb.ResizeDestination
		want error
	}{
		{"unknown destination", &fsmpb.ResizeDestination{Name: "nope", Active: 1}, fsm.ErrUnknownDestination},
		{"no active member", &fsmpb.ResizeDestination{Name: "q", Active: 0}, fsm.ErrInvalidSettings},
		{"more active than members", &fsmpb.ResizeDestination{Name: "q", Active: 3}, fsm.ErrInvalidSettings},
		{"index not continuing", &fsmpb.ResizeDestination{Name: "q", Add: []*fsmpb.MemberPlacement{placement(3, "n1")}, Active: 3}, fsm.ErrInvalidSettings},
		{"wrong replica count", &fsmpb.ResizeDestination{Name: "q", Add: []*fsmpb.MemberPlacement{placement(2, "n1", "n2")}, Active: 3}, fsm.ErrInvalidSettings},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newMeta(t)
			f.ok(&fsmpb.CreateDestination{Destination: dest("q", 2, 1)})
			before := metaState(t, f.m)
			if r := f.do(c.cmd); !errors.Is(r.Err, c.want) {
				t.Fatalf("got %v; want %v", r.Err, c.want)
			}
			if !bytes.Equal(withoutApplied(t, before), withoutApplied(t, metaState(t, f.m))) {
				t.Fatal("a rejected resize changed the state")
			}
		})
	}
}

func TestRemoveMember_OnlyTheLastAndOnlyDraining(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: dest("q", 3, 1)})
	if r := f.do(&fsmpb.RemoveMember{Name: "q", Index: 2}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Fatalf("removing an active member: %v", r.Err)
	}
	f.ok(&fsmpb.ResizeDestination{Name: "q", Active: 1})
	if r := f.do(&fsmpb.RemoveMember{Name: "q", Index: 1}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Fatalf("removing a draining member that is not the last: %v", r.Err)
	}
	f.ok(&fsmpb.RemoveMember{Name: "q", Index: 2})
	f.ok(&fsmpb.RemoveMember{Name: "q", Index: 1})
	if got := drainingOf(t, f.m, "q"); len(got) != 1 || got[0] {
		t.Fatalf("after removing both drained members: %v", got)
	}
	if r := f.do(&fsmpb.RemoveMember{Name: "nope", Index: 0}); !errors.Is(r.Err, fsm.ErrUnknownDestination) {
		t.Fatalf("unknown destination: %v", r.Err)
	}
}
