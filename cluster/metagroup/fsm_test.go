package metagroup

import (
	"context"
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
	a := &metaFSM{m: fsm.NewMeta(), changed: func() {}, corrupt: func(err error) { t.Errorf("corrupt: %v", err) }}
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
