package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// counts explains how a queue's counts, as its members' hosts hold them,
// differ from pending and delivered ("" when they do not).
func (tc *TestCluster) counts(dest string, pending, delivered int) string {
	var d *fsmpb.Destination
	for _, nd := range tc.nodes {
		if nd != nil {
			d, _ = nd.meta.Destination(dest)
			break
		}
	}
	if d == nil {
		return "no queue " + dest
	}
	p, dl := 0, 0
	for i := range d.Members {
		name := fmt.Sprintf("%s#%d", dest, i)
		host := tc.HostOf(name)
		if host == "" {
			return name + " has no host"
		}
		r, _ := tc.Node(host).groups.replica(name)
		st := r.Stats()
		p, dl = p+st.Pending, dl+st.Delivered
	}
	if p != pending || dl != delivered {
		return fmt.Sprintf("%s holds %d pending and %d delivered; want %d and %d", dest, p, dl, pending, delivered)
	}
	return ""
}

// recorder records a multi-node test's workload in client/history, the
// checker of every test of the promises: a message's body is its id, and
// each receipt is in the phase set last (history.DrainPhase for the final
// drain).
type recorder struct {
	*history.History
	mu       sync.Mutex
	phase    string
	receipts map[*client.Message]*history.Receipt
}

func newRecorder(phase string) *recorder {
	return &recorder{History: history.New(), phase: phase, receipts: map[*client.Message]*history.Receipt{}}
}

func (h *recorder) setPhase(phase string) {
	h.mu.Lock()
	h.phase = phase
	h.mu.Unlock()
}

// send sends one message, its body its id, and records the outcome.
func (h *recorder) send(ctx context.Context, p *client.Producer, body string) error {
	h.Sending(body)
	_, err := p.Send(ctx, &client.Message{ID: body, Body: []byte(body)})
	h.Sent(body, err)
	return err
}

// delivered records a message handed out.
func (h *recorder) delivered(m *client.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.receipts[m] = h.Received(h.phase, m)
}

// ack acknowledges one message (IndividualAck) and records the outcome.
func (h *recorder) ack(m *client.Message) error {
	err := m.Ack()
	h.mu.Lock()
	r := h.receipts[m]
	h.mu.Unlock()
	h.Acked(r, err)
	return err
}

// check fails t with the history's broken promises, if any.
func (h *recorder) check(t *testing.T) {
	t.Helper()
	if vs := h.Check(); len(vs) > 0 {
		var b strings.Builder
		history.Report(&b, vs, 10)
		t.Fatalf("history:\n%s", b.String())
	}
}

// receivedTimes is how many times the message of body was received.
func (h *recorder) receivedTimes(body string) int {
	if m := h.Messages()[body]; m != nil {
		return len(m.Receipts)
	}
	return 0
}

// stepCtx is a context for one step of a long test (testCtx's 20 s run
// from its creation, which a multi-node test outlives).
func stepCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
