package fsm_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

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
