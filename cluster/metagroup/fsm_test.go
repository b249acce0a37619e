package metagroup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A node that forwarded a meta command waits until its own replica applied
// it, so that its clients read their own writes; it waits no longer than
// that, and gives up with the context.
func TestMetaFSM_WaitAppliedReturnsOnceTheIndexIsApplied(t *testing.T) {
	a := &metaFSM{m: fsm.NewMeta(), changed: func() {}, corrupt: func(_ uint64, err error) { t.Errorf("corrupt: %v", err) }}
	data, err := fsm.Encode(fsm.MustCommand(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1"}}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.waitApplied(context.Background(), 7)
	}()
	a.Apply(&raft.Log{Index: 6, Type: raft.LogCommand, Data: data})
	select {
	case <-done:
		t.Fatal("waitApplied returned at index 6 of 7")
	case <-time.After(50 * time.Millisecond):
	}
	a.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: data})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waitApplied still waiting once index 7 was applied")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	a.waitApplied(ctx, 100)
	if time.Since(start) > time.Second {
		t.Fatal("waitApplied kept waiting after its context ended")
	}
}

// A meta entry the replica cannot apply stops the replica, not the node:
// corrupt is told once with its index, the entries after it change
// nothing and are answered ErrStopped, the replica refuses to snapshot,
// and the group says it is not ready and not caught up, with why.
func TestMetaFSM_UnappliableEntryStopsTheReplica(t *testing.T) {
	var told []uint64
	a := &metaFSM{m: fsm.NewMeta(), changed: func() {}, corrupt: func(index uint64, err error) {
		if !errors.Is(err, fsm.ErrCorrupt) {
			t.Errorf("corrupt told %v; want fsm.ErrCorrupt", err)
		}
		told = append(told, index)
	}}
	register := func(id string) []byte {
		data, err := fsm.Encode(fsm.MustCommand(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id}}))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: register("n1")})
	for i, data := range [][]byte{{0xc1, 0xff}, register("n2")} {
		if err, _ := a.Apply(&raft.Log{Index: uint64(i + 2), Type: raft.LogCommand, Data: data}).(error); !errors.Is(err, ErrStopped) {
			t.Fatalf("entry %d: %v; want ErrStopped", i+2, err)
		}
	}
	if len(told) != 1 || told[0] != 2 {
		t.Fatalf("corrupt told %v; want once, entry 2", told)
	}
	a.read(func(m *fsm.Meta) {
		if _, ok := m.Node("n2"); ok || m.Applied() != 1 {
			t.Fatalf("state applied to %d, n2 registered %v; want 1, false", m.Applied(), ok)
		}
	})
	if _, err := a.Snapshot(); !errors.Is(err, ErrStopped) {
		t.Fatalf("snapshot: %v; want ErrStopped", err)
	}
	mg := &Group{fsm: a}
	for name, check := range map[string]func() error{"Ready": mg.Ready, "CaughtUp": mg.CaughtUp} {
		if err := check(); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "entry 2") {
			t.Errorf("%s: %v; want ErrStopped naming entry 2", name, err)
		}
	}
}
