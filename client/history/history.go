// Package history records what a workload did against a Cairn cluster (each
// send, receive, acknowledgement and commit, with its outcome) and checks
// the record against the promises of Cairn's design once the faults have
// stopped and the destinations are drained. `cairn verify` and the
// project's failover tests use it.
package history

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cairnmq/cairn/client"
)

// DrainPhase names the receipts of the final drain.
const DrainPhase = "drain"

// AckOutcome is what became of a receipt's acknowledgement.
type AckOutcome int

const (
	AckNone   AckOutcome = iota // held, never acknowledged (or its transaction rolled back)
	AckOK                       // acknowledged: Ack or Commit returned nil
	AckFailed                   // Ack or Commit failed: it may or may not have happened
)

// Receipt is one message handed to the application.
type Receipt struct {
	Phase         string
	Redelivered   bool
	DeliveryCount int
	Ack           AckOutcome
	AckErr        error
}

// Message is the history of one message id.
type Message struct {
	Attempt  bool  // a send of this id was attempted
	SendOK   bool  // ... and returned success (its transaction committed)
	SendErr  error // ... or failed with this error
	Receipts []*Receipt
}

// tx is a transaction: the sends and receipts its commit decides.
type tx struct {
	sends    []string
	receipts []txReceipt
	decided  bool
	err      error // its commit's, once decided
}

// txReceipt is a receipt of message id in a transaction.
type txReceipt struct {
	id string
	r  *Receipt
}

// History is a concurrent record of a workload.
//
// A phase is the life of one consumer session between reconnects: with
// StrictPhases, a message received twice within one phase is a violation
// (the session never recovered). Across phases a message received again
// must be marked redelivered with a higher delivery count.
type History struct {
	// StrictPhases reports a message received twice in one phase.
	StrictPhases bool
	// NonDurable is the history of a non-durable subscriber, which gets
	// only what is published while it is subscribed (a reconnect
	// subscribes it anew) and is never drained: a message that never came
	// is not lost, nor is a transaction of which some came partial; every
	// other rule holds, so a copy that comes again unmarked is still a
	// duplicate.
	NonDurable bool

	mu   sync.Mutex
	msgs map[string]*Message
	txs  map[string]*tx
}

// New returns an empty history.
func New() *History {
	return &History{msgs: map[string]*Message{}, txs: map[string]*tx{}}
}

func (h *History) get(id string) *Message {
	m := h.msgs[id]
	if m == nil {
		m = &Message{}
		h.msgs[id] = m
	}
	return m
}

func (h *History) tx(id string) *tx {
	t := h.txs[id]
	if t == nil {
		t = &tx{}
		h.txs[id] = t
	}
	return t
}

// Sending records a send about to be attempted.
func (h *History) Sending(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.get(id).Attempt = true
}

// Sent records a send's outcome.
func (h *History) Sent(id string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.get(id)
	m.SendOK, m.SendErr = err == nil, err
}

// SentInTx records a send of transaction txID, whose outcome its commit
// decides.
func (h *History) SentInTx(txID, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.get(id).Attempt = true
	t := h.tx(txID)
	t.sends = append(t.sends, id)
}

// Received records a message handed to the application in phase.
func (h *History) Received(phase string, msg *client.Message) *Receipt {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := &Receipt{Phase: phase, Redelivered: msg.Redelivered, DeliveryCount: msg.DeliveryCount}
	m := h.get(msg.ID)
	m.Receipts = append(m.Receipts, r)
	return r
}

// ReceivedInTx records a message received in transaction txID.
func (h *History) ReceivedInTx(txID, phase string, msg *client.Message) {
	r := h.Received(phase, msg)
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tx(txID)
	t.receipts = append(t.receipts, txReceipt{id: msg.ID, r: r})
}

// Acked records the outcome of acknowledging a receipt.
func (h *History) Acked(r *Receipt, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ack(r, err)
}

func ack(r *Receipt, err error) {
	if err == nil {
		r.Ack = AckOK
	} else {
		r.Ack, r.AckErr = AckFailed, err
	}
}

// Committed records a transaction's outcome: nil (committed), an error
// wrapping client.ErrTransactionRolledBack (nothing happened), or another
// (it may or may not have).
func (h *History) Committed(txID string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tx(txID)
	t.decided, t.err = true, err
	rolledBack := errors.Is(err, client.ErrTransactionRolledBack)
	for _, id := range t.sends {
		m := h.get(id)
		switch {
		case err == nil:
			m.SendOK = true
		case rolledBack:
			m.SendErr = err
		default:
			m.SendErr = fmt.Errorf("%w: %v", client.ErrDeliveryUnknown, err)
		}
	}
	for _, tr := range t.receipts {
		if !rolledBack {
			ack(tr.r, err)
		}
	}
}

// Attempted is how many sends were attempted.
func (h *History) Attempted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if m.Attempt {
			n++
		}
	}
	return n
}

// Messages returns a copy of every message's history, by id.
func (h *History) Messages() map[string]*Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*Message, len(h.msgs))
	for id, m := range h.msgs {
		c := *m
		c.Receipts = make([]*Receipt, len(m.Receipts))
		for i, r := range m.Receipts {
			rc := *r
			c.Receipts[i] = &rc
		}
		out[id] = &c
	}
	return out
}

// Stats summarise a history.
type Stats struct {
	// SendRolledBack counts the sends of rolled-back transactions: they
	// did not fail, they were taken back; SendFailed counts the others
	// that ended in a definite error.
	SentOK, SendUnknown, SendFailed, SendRolledBack int
	Receipts                                        map[string]int // per phase
	Redelivered                                     map[string]int // per phase
	Acked, AckFailed, Held                          int
	// Committed, RolledBack and TxUnknown count the decided transactions
	// by their commit's outcome.
	Committed, RolledBack, TxUnknown int
}

// Stats counts the history's events.
func (h *History) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := Stats{Receipts: map[string]int{}, Redelivered: map[string]int{}}
	for _, m := range h.msgs {
		switch {
		case m.SendOK:
			st.SentOK++
		case errors.Is(m.SendErr, client.ErrDeliveryUnknown):
			st.SendUnknown++
		case errors.Is(m.SendErr, client.ErrTransactionRolledBack):
			st.SendRolledBack++
		case m.SendErr != nil:
			st.SendFailed++
		}
		for _, r := range m.Receipts {
			st.Receipts[r.Phase]++
			if r.Redelivered {
				st.Redelivered[r.Phase]++
			}
			if r.Phase == DrainPhase {
				continue
			}
			switch r.Ack {
			case AckOK:
				st.Acked++
			case AckFailed:
				st.AckFailed++
			default:
				st.Held++
			}
		}
	}
	for _, t := range h.txs {
		switch {
		case !t.decided:
		case t.err == nil:
			st.Committed++
		case errors.Is(t.err, client.ErrTransactionRolledBack):
			st.RolledBack++
		default:
			st.TxUnknown++
		}
	}
	return st
}

func (st Stats) String() string {
	return fmt.Sprintf("sends: %d ok, %d unknown, %d failed, %d rolled back; receipts per phase %v (redelivered %v); before the drain %d acked, %d acks failed, %d held unacknowledged",
		st.SentOK, st.SendUnknown, st.SendFailed, st.SendRolledBack, st.Receipts, st.Redelivered, st.Acked, st.AckFailed, st.Held)
}

// Violation is one broken promise: Kind is one of lost, duplicated,
// acked-redelivered, unexpected, wrongly-marked, wrong-count and
// partial-transaction.
type Violation struct {
	Kind, ID, Detail string
}

func (v Violation) String() string { return v.ID + ": " + v.Detail }

// Check returns the broken promises, checking:
//   - every send that returned ok is consumed: acknowledged, or received in
//     the drain; one whose last acknowledgement failed may be either
//     (promise 1: lost; not for a NonDurable history);
//   - no message comes after its acknowledgement returned nil (promise 2:
//     acked-redelivered);
//   - a message received again is marked redelivered with a higher delivery
//     count, and a second copy never comes unmarked (promise 3 and 5:
//     wrongly-marked, duplicated); with StrictPhases, none comes twice in
//     one phase, and never twice in the drain;
//   - no message comes that was never sent, or whose send failed with a
//     definite error (a rolled-back transaction's included) (promise 5:
//     unexpected);
//   - the k-th receipt of a message carries a delivery count of at least k
//     (wrong-count);
//   - a transaction is applied whole (promise 4: partial-transaction; not
//     for a NonDurable history): its sends all received and its receipts'
//     messages never received again (its acknowledgements applied), or its
//     sends none received and its receipts' messages all received again.
//     This judges a commit whose outcome is unknown, which the rules
//     above cannot; a committed or rolled-back one broken in part breaks
//     them too.
func (h *History) Check() []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.msgs))
	for id := range h.msgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var vs []Violation
	add := func(kind, id, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, ID: id, Detail: fmt.Sprintf(format, args...)})
	}
	for _, id := range ids {
		m := h.msgs[id]
		rs := m.Receipts
		if len(rs) > 0 && !m.Attempt {
			add("unexpected", id, "received in %s, never sent", rs[0].Phase)
		}
		if len(rs) > 0 && m.SendErr != nil && !errors.Is(m.SendErr, client.ErrDeliveryUnknown) {
			add("unexpected", id, "received in %s, but its send failed with %v", rs[0].Phase, m.SendErr)
		}
		for i, r := range rs {
			if r.DeliveryCount < i+1 {
				add("wrong-count", id, "receipt %d (in %s) carries delivery count %d", i+1, r.Phase, r.DeliveryCount)
			}
			if i == 0 {
				if r.DeliveryCount < 1 || r.Redelivered != (r.DeliveryCount > 1) {
					add("wrongly-marked", id, "first received in %s with redelivered=%v, delivery count %d", r.Phase, r.Redelivered, r.DeliveryCount)
				}
				continue
			}
			prev := rs[i-1]
			switch {
			case prev.Phase == r.Phase && (h.StrictPhases || r.Phase == DrainPhase):
				add("duplicated", id, "received twice in %s", r.Phase)
			case !r.Redelivered && r.DeliveryCount == 1:
				add("duplicated", id, "a second copy: received in %s, and again in %s as new", prev.Phase, r.Phase)
			}
			if prev.Ack == AckOK {
				add("acked-redelivered", id, "acknowledged in %s, received again in %s", prev.Phase, r.Phase)
			}
			if !r.Redelivered || r.DeliveryCount <= prev.DeliveryCount {
				add("wrongly-marked", id, "received in %s (delivery count %d), again in %s with redelivered=%v, delivery count %d",
					prev.Phase, prev.DeliveryCount, r.Phase, r.Redelivered, r.DeliveryCount)
			}
		}
		if (!m.SendOK && len(rs) == 0) || h.NonDurable {
			continue // never stored, stored with an unknown outcome, or may be missed
		}
		if len(rs) == 0 {
			add("lost", id, "its send returned ok; never received")
			continue
		}
		last := rs[len(rs)-1]
		if last.Phase != DrainPhase && last.Ack == AckNone {
			add("lost", id, "received in %s (redelivered=%v, delivery count %d) and not acknowledged; never received again",
				last.Phase, last.Redelivered, last.DeliveryCount)
		}
	}
	txIDs := make([]string, 0, len(h.txs))
	for id, t := range h.txs {
		if t.decided && !h.NonDurable {
			txIDs = append(txIDs, id)
		}
	}
	sort.Strings(txIDs)
	for _, id := range txIDs {
		if why := h.partial(h.txs[id]); why != "" {
			add("partial-transaction", id, "%s", why)
		}
	}
	return vs
}

// partial says how transaction t was applied in part, or "" if it was
// applied whole or not at all: its sends received, and its receipts'
// messages received again (their acknowledgement undone). h.mu held.
func (h *History) partial(t *tx) string {
	seen := slices.DeleteFunc(slices.Clone(t.sends), func(s string) bool { return len(h.msgs[s].Receipts) == 0 })
	var back []string
	for _, tr := range t.receipts {
		rs := h.msgs[tr.id].Receipts
		if i := slices.Index(rs, tr.r); i >= 0 && i < len(rs)-1 {
			back = append(back, tr.id)
		}
	}
	applied := len(seen) == len(t.sends) && len(back) == 0
	undone := len(seen) == 0 && len(back) == len(t.receipts)
	if applied || undone {
		return ""
	}
	return fmt.Sprintf("%d of its %d sends were received (%s); %d of its %d receipts came again (%s)",
		len(seen), len(t.sends), strings.Join(seen, ", "), len(back), len(t.receipts), strings.Join(back, ", "))
}

// Report writes the violations to w, grouped by kind with up to examples of
// each, and returns how many there are.
func Report(w io.Writer, vs []Violation, examples int) int {
	byKind := map[string][]Violation{}
	var kinds []string
	for _, v := range vs {
		if byKind[v.Kind] == nil {
			kinds = append(kinds, v.Kind)
		}
		byKind[v.Kind] = append(byKind[v.Kind], v)
	}
	for _, k := range kinds {
		fmt.Fprintf(w, "%d %s\n", len(byKind[k]), k)
		for i, v := range byKind[k] {
			if i == examples {
				fmt.Fprintf(w, "  ... and %d more\n", len(byKind[k])-i)
				break
			}
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
	return len(vs)
}
