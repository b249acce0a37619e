package cluster

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// SendAsync: every callback comes once, the messages are stored in the
// order they were sent (one batch in flight per producer), and sends that
// queue up behind a batch leave together: far fewer commits than messages.
func TestSendAsync_OrderKeptAndBatched(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	c := dial(t, n)
	p := mustProducer(t, mustSession(t, c, client.AutoAck), "async")
	const total = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	calls := make([]int, total)
	wg.Add(total)
	for i := range total {
		p.SendAsync(&client.Message{Body: fmt.Appendf(nil, "m%04d", i)}, func(r client.Receipt, err error) {
			mu.Lock()
			calls[i]++
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not every SendAsync callback came within 30 s")
	}
	if len(errs) > 0 {
		t.Fatalf("%d async sends failed, the first: %v", len(errs), errs[0])
	}
	for i, n := range calls {
		if n != 1 {
			t.Fatalf("message %d: %d callbacks, want 1", i, n)
		}
	}
	// Each batch is one Enqueue entry: with 2000 messages queued at once
	// the log grows by a handful of entries, not 2000. Read before the
	// consumer comes, whose deliveries and acks are entries too.
	r, ok := n.groups.replica("async#0")
	if !ok {
		t.Fatal("no replica of async#0 on the node")
	}
	if idx := r.Raft().LastIndex(); idx > total/10 {
		t.Errorf("%d messages took the member's log to index %d: the async sends did not travel in batches", total, idx)
	}
	k := mustConsumer(t, ctx, mustSession(t, dial(t, n), client.AutoAck), "async")
	for i, m := range recvN(t, k, total) {
		if want := fmt.Sprintf("m%04d", i); string(m.Body) != want {
			t.Fatalf("message %d is %s, want %s: the producer's order was not kept", i, m.Body, want)
		}
	}
}

// An async send that fails gets its error in its callback: here a message
// larger than the node accepts.
func TestSendAsync_ErrorReachesTheCallback(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir(), withMaxMessageBytes(1000)))
	p := mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "asyncerr")
	got := make(chan error, 1)
	p.SendAsync(&client.Message{Body: []byte(strings.Repeat("x", 2000))}, func(_ client.Receipt, err error) { got <- err })
	select {
	case err := <-got:
		wantErr(t, "oversized async send", err, client.ErrMessageTooLarge)
	case <-time.After(10 * time.Second):
		t.Fatal("no callback for a failed async send")
	}
}
