package transport

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// An outbox sends its items in order; what it never sent, stop hands back
// in order: the item whose send failed first, then those queued after it.
// Nothing is pushed once it is stopped.
func TestOutbox_StopHandsBackWhatWasNeverSent(t *testing.T) {
	o := NewOutbox[int]()
	if !o.Push(1, 2, 3) || !o.Push(4) {
		t.Fatal("push refused on an open outbox")
	}
	var sent []int
	broken := errors.New("stream broke")
	err := o.Run(context.Background(), func(i int) error {
		if i == 3 {
			return broken
		}
		sent = append(sent, i)
		return nil
	})
	if !errors.Is(err, broken) || !slices.Equal(sent, []int{1, 2}) {
		t.Fatalf("run = %v, sent %v; want the send's error after 1 and 2", err, sent)
	}
	if o.Push(5) {
		t.Fatal("push taken after run ended")
	}
	if got := o.Stop(); !slices.Equal(got, []int{3, 4}) {
		t.Fatalf("stop = %v; want [3 4], the failed item first", got)
	}
	if got := o.Stop(); len(got) != 0 {
		t.Fatalf("second stop = %v; want nothing", got)
	}
}

// A drained outbox ends its run with nothing left; a stopped one ends it
// at once, leaving what it had queued to stop's caller.
func TestOutbox_RunEndsWhenDrainedOrStopped(t *testing.T) {
	o := NewOutbox[int]()
	o.Push(1, 2)
	o.CloseAfterFlush()
	var sent []int
	if err := o.Run(context.Background(), func(i int) error { sent = append(sent, i); return nil }); err != nil || !slices.Equal(sent, []int{1, 2}) {
		t.Fatalf("run after closeAfterFlush = %v, sent %v", err, sent)
	}
	if got := o.Stop(); len(got) != 0 {
		t.Fatalf("a drained outbox hands back %v", got)
	}

	o = NewOutbox[int]()
	done := make(chan error, 1)
	block := make(chan struct{})
	go func() {
		done <- o.Run(context.Background(), func(int) error { <-block; return nil })
	}()
	o.Push(1, 2, 3)
	// 1 is being sent; 2 and 3 wait.
	deadline := time.Now().Add(5 * time.Second)
	for {
		o.mu.Lock()
		waiting := len(o.items)
		o.mu.Unlock()
		if waiting == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d items waiting; want 2 behind the one being sent", waiting)
		}
		time.Sleep(time.Millisecond)
	}
	if got := o.Stop(); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("stop while 1 is being sent = %v; want [2 3], not the one in flight", got)
	}
	close(block)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after stop = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not end once stopped")
	}
}
