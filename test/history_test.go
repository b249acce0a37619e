package test

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/cairnmq/cairn/client"
)

// drainPhase names the receipts of the final drain.
const drainPhase = "drain"

// history records every send, receive and acknowledgement of a workload
// with its outcome, and checks them against the promises of DESIGN.md once
// the faults have stopped and the queue is drained.
//
// A phase is the life of one consumer session: within a phase a message is
// received at most once (the tests never recover), and across phases a
// message received again must be marked redelivered with a higher delivery
// count.
type history struct {
	mu   sync.Mutex
	msgs map[string]*msgHistory
}

type msgHistory struct {
	id       string
	attempt  bool  // a send of this id was attempted
	sendOK   bool  // ... and returned success
	sendErr  error // ... or failed with this error
	receipts []*receipt
}

type ackOutcome int

const (
	ackNone   ackOutcome = iota // held, never acknowledged
	ackOK                       // Ack returned nil
	ackFailed                   // Ack returned an error: it may or may not have been stored
)

type receipt struct {
	phase         string
	redelivered   bool
	deliveryCount int
	ack           ackOutcome
	ackErr        error
}

func newHistory() *history { return &history{msgs: map[string]*msgHistory{}} }

func (h *history) get(id string) *msgHistory {
	m := h.msgs[id]
	if m == nil {
		m = &msgHistory{id: id}
		h.msgs[id] = m
	}
	return m
}

// sending records a send about to be attempted.
func (h *history) sending(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.get(id).attempt = true
}

// sent records a send's outcome.
func (h *history) sent(id string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.get(id)
	m.sendOK, m.sendErr = err == nil, err
}

// received records a message handed to the application in phase.
func (h *history) received(phase string, msg *client.Message) *receipt {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := &receipt{phase: phase, redelivered: msg.Redelivered, deliveryCount: msg.DeliveryCount}
	m := h.get(msg.ID)
	m.receipts = append(m.receipts, r)
	return r
}

// acked records the outcome of acknowledging a receipt.
func (h *history) acked(r *receipt, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		r.ack = ackOK
	} else {
		r.ack, r.ackErr = ackFailed, err
	}
}

// attempted is how many sends were attempted.
func (h *history) attempted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if m.attempt {
			n++
		}
	}
	return n
}

// historyStats summarise a history.
type historyStats struct {
	sentOK, sendUnknown, sendFailed int
	receipts                        map[string]int // per phase
	redeliveredInPhase              map[string]int
	acked, ackFailed, held          int
}

func (h *history) stats() historyStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := historyStats{receipts: map[string]int{}, redeliveredInPhase: map[string]int{}}
	for _, m := range h.msgs {
		switch {
		case m.sendOK:
			st.sentOK++
		case errors.Is(m.sendErr, client.ErrDeliveryUnknown):
			st.sendUnknown++
		case m.sendErr != nil:
			st.sendFailed++
		}
		for _, r := range m.receipts {
			st.receipts[r.phase]++
			if r.redelivered {
				st.redeliveredInPhase[r.phase]++
			}
			if r.phase == drainPhase {
				continue
			}
			switch r.ack {
			case ackOK:
				st.acked++
			case ackFailed:
				st.ackFailed++
			default:
				st.held++
			}
		}
	}
	return st
}

func (st historyStats) String() string {
	return fmt.Sprintf("sends: %d ok, %d unknown, %d failed; receipts per phase %v (redelivered %v); before the drain %d acked, %d acks failed, %d held unacknowledged",
		st.sentOK, st.sendUnknown, st.sendFailed, st.receipts, st.redeliveredInPhase, st.acked, st.ackFailed, st.held)
}

// violation is one broken promise.
type violation struct{ kind, detail string }

// check returns the broken promises, checking:
//   - every send that returned ok is consumed: acknowledged (Ack returned
//     nil), or received in the drain; one whose last Ack failed may be
//     either (promise 1);
//   - a message received and not acknowledged comes again, marked
//     redelivered with a higher delivery count (promise 3);
//   - no message comes after its Ack returned nil (promise 2);
//   - no message comes twice in one phase (one consumer session, never
//     recovered), in particular in the drain;
//   - no message comes that was never sent, or whose send failed with a
//     definite (not "unknown") error (promise 5);
//   - the first receipt has Redelivered exactly when DeliveryCount > 1.
func (h *history) check() []violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.msgs))
	for id := range h.msgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var vs []violation
	add := func(kind, format string, args ...any) {
		vs = append(vs, violation{kind, fmt.Sprintf(format, args...)})
	}
	for _, id := range ids {
		m := h.msgs[id]
		rs := m.receipts
		if len(rs) > 0 && !m.attempt {
			add("unexpected", "%s: received in %s, never sent", id, rs[0].phase)
		}
		if len(rs) > 0 && m.sendErr != nil && !errors.Is(m.sendErr, client.ErrDeliveryUnknown) {
			add("unexpected", "%s: received in %s, but its send failed with %v", id, rs[0].phase, m.sendErr)
		}
		for i, r := range rs {
			if i == 0 {
				if r.deliveryCount < 1 || r.redelivered != (r.deliveryCount > 1) {
					add("wrongly-marked", "%s: first received in %s with redelivered=%v, delivery count %d", id, r.phase, r.redelivered, r.deliveryCount)
				}
				continue
			}
			prev := rs[i-1]
			if prev.phase == r.phase {
				add("duplicated", "%s: received twice in %s", id, r.phase)
			}
			if prev.ack == ackOK {
				add("acked-redelivered", "%s: acknowledged in %s, received again in %s", id, prev.phase, r.phase)
			}
			if !r.redelivered || r.deliveryCount <= prev.deliveryCount {
				add("wrongly-marked", "%s: received in %s (delivery count %d), again in %s with redelivered=%v, delivery count %d",
					id, prev.phase, prev.deliveryCount, r.phase, r.redelivered, r.deliveryCount)
			}
		}
		if !m.sendOK && len(rs) == 0 {
			continue // never stored, or stored with an unknown outcome
		}
		if len(rs) == 0 {
			add("lost", "%s: its send returned ok; never received", id)
			continue
		}
		last := rs[len(rs)-1]
		if last.phase != drainPhase && last.ack == ackNone {
			add("lost", "%s: received in %s (redelivered=%v, delivery count %d) and not acknowledged; never received again",
				id, last.phase, last.redelivered, last.deliveryCount)
		}
	}
	return vs
}

// report fails t with the violations, a few of each kind.
func (h *history) report(t *testing.T) {
	t.Helper()
	vs := h.check()
	t.Logf("history: %v", h.stats())
	if len(vs) == 0 {
		return
	}
	byKind := map[string][]string{}
	var kinds []string
	for _, v := range vs {
		if byKind[v.kind] == nil {
			kinds = append(kinds, v.kind)
		}
		byKind[v.kind] = append(byKind[v.kind], v.detail)
	}
	for _, k := range kinds {
		ds := byKind[k]
		t.Errorf("%d %s messages", len(ds), k)
		for i, d := range ds {
			if i == 10 {
				t.Errorf("  ... and %d more", len(ds)-i)
				break
			}
			t.Errorf("  %s", d)
		}
	}
}

// TestHistoryCheck checks the checker: a clean history passes and each
// kind of broken promise is found.
func TestHistoryCheck(t *testing.T) {
	t.Parallel()
	unknown := fmt.Errorf("%w: reset", client.ErrDeliveryUnknown)
	definite := fmt.Errorf("%w: not sent", client.ErrUnavailable)
	msg := func(id string, redelivered bool, count int) *client.Message {
		return &client.Message{ID: id, Redelivered: redelivered, DeliveryCount: count}
	}
	// step is one event: send (err), receive in phase (with its marks and
	// ack outcome).
	type step struct {
		id      string
		send    bool
		sendErr error
		phase   string
		redel   bool
		count   int
		ack     ackOutcome
	}
	send := func(id string, err error) step { return step{id: id, send: true, sendErr: err} }
	recv := func(id, phase string, redel bool, count int, ack ackOutcome) step {
		return step{id: id, phase: phase, redel: redel, count: count, ack: ack}
	}
	for _, c := range []struct {
		name  string
		steps []step
		want  []string // violation kinds, in order
	}{
		{"clean", []step{
			send("a", nil), send("b", nil), send("c", nil), send("d", unknown), send("e", unknown), send("f", nil),
			recv("a", "p1", false, 1, ackOK),
			recv("b", "p1", false, 1, ackNone), recv("b", "p2", true, 3, ackOK),
			recv("c", "p1", false, 1, ackNone), recv("c", drainPhase, true, 2, ackNone),
			recv("d", drainPhase, false, 1, ackNone),
			recv("f", "p1", false, 1, ackFailed),
		}, nil},
		{"lost, never received", []step{send("a", nil)}, []string{"lost"}},
		{"lost after a receive", []step{send("a", nil), recv("a", "p1", false, 1, ackNone)}, []string{"lost"}},
		{"never sent", []step{recv("x", drainPhase, false, 1, ackNone)}, []string{"unexpected"}},
		{"definite send failure received", []step{send("a", definite), recv("a", drainPhase, false, 1, ackNone)}, []string{"unexpected"}},
		{"acknowledged, then again", []step{send("a", nil), recv("a", "p1", false, 1, ackOK), recv("a", drainPhase, true, 2, ackNone)}, []string{"acked-redelivered"}},
		{"again without the mark", []step{send("a", nil), recv("a", "p1", false, 1, ackNone), recv("a", drainPhase, false, 1, ackNone)}, []string{"wrongly-marked"}},
		{"again, count not raised", []step{send("a", nil), recv("a", "p1", false, 1, ackNone), recv("a", drainPhase, true, 1, ackNone)}, []string{"wrongly-marked"}},
		{"first receipt marked wrongly", []step{send("a", nil), recv("a", drainPhase, true, 1, ackNone)}, []string{"wrongly-marked"}},
		{"twice in the drain", []step{send("a", nil), recv("a", drainPhase, false, 1, ackNone), recv("a", drainPhase, true, 2, ackNone)}, []string{"duplicated"}},
	} {
		h := newHistory()
		for _, s := range c.steps {
			if s.send {
				h.sending(s.id)
				h.sent(s.id, s.sendErr)
				continue
			}
			r := h.received(s.phase, msg(s.id, s.redel, s.count))
			switch s.ack {
			case ackOK:
				h.acked(r, nil)
			case ackFailed:
				h.acked(r, unknown)
			}
		}
		var got []string
		for _, v := range h.check() {
			got = append(got, v.kind)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: violations %v, want %v (%v)", c.name, got, c.want, h.check())
		}
	}
}
