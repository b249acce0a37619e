package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// DecisionRetentionNs is how long a primary remembers a transaction's
// decision, for participants and clients that ask for it after a failover.
// A participant cut off from its primary for longer, with a transaction
// prepared, would get the answer "abort" for a committed transaction; ten
// minutes is far beyond the seconds a member group takes to elect a leader.
const DecisionRetentionNs = int64(10 * 60 * 1e9)

// tx is a transaction prepared on the member.
type tx struct {
	id, primary, session string
	preparedAt           int64
	// msgs are its sends (out marks those dropped as duplicates); they
	// count against the member's bytes but are not deliverable.
	msgs  []*fsmpb.Message
	out   []Enqueued
	bytes int64
	// acked are the deliveries it acknowledges, held until the decision.
	acked []ref
	// publish: a topic member's; its sends go to the subscriptions.
	publish bool
}

type decision struct {
	tx     string
	commit bool
	at     int64
}

// decisions are the decisions a primary recorded, oldest first out.
type decisions struct {
	byTx  map[string]*decision
	order []*decision
}

func (d *decisions) prune(now int64) {
	n := 0
	for n < len(d.order) && d.order[n].at <= now-DecisionRetentionNs {
		if d.byTx[d.order[n].tx] == d.order[n] {
			delete(d.byTx, d.order[n].tx)
		}
		n++
	}
	if n > 0 {
		d.order = slices.Delete(d.order, 0, n)
	}
}

func (d *decisions) record(txID string, commit bool, at int64) {
	r := &decision{tx: txID, commit: commit, at: at}
	d.byTx[txID] = r
	d.order = append(d.order, r)
}

func (m *Member) txPrepare(c *fsmpb.TxPrepare) Result {
	switch {
	case c.Tx == "" || c.Primary == "":
		return Result{Err: fmt.Errorf("%w: a transaction needs an id and a primary", ErrMalformed)}
	case c.Publish && m.fanOut == nil:
		return Result{Err: fmt.Errorf("%w: a transaction publishes to a topic's member, in its shared group", ErrMalformed)}
	}
	if m.txs[c.Tx] != nil {
		return Result{Enqueued: m.txs[c.Tx].out} // the same prepare again
	}
	if d, ok := m.decisions.byTx[c.Tx]; ok {
		if d.commit {
			return Result{Committed: true} // a late copy of a one-phase commit
		}
		return Result{Err: fmt.Errorf("%w: transaction %s was rolled back", ErrTxRefused, c.Tx)}
	}
	var acked []ref
	if len(c.DeliveryIds) > 0 {
		s := m.sessions[c.Session]
		if s == nil {
			return Result{Err: fmt.Errorf("%w: %w: %q", ErrTxRefused, ErrUnknownSession, c.Session)}
		}
		seen := make(map[uint64]bool, len(c.DeliveryIds))
		for _, id := range c.DeliveryIds {
			msg := s.deliveries[id]
			if msg == 0 || m.rec(msg).has(flagHeld) {
				return Result{Err: fmt.Errorf("%w: delivery %d is no longer the session's (recovered, released or expired)", ErrTxRefused, id)}
			}
			if !seen[id] {
				seen[id] = true
				acked = append(acked, msg)
			}
		}
	}
	out, add, err := m.admit(c.Messages, c.Now)
	if err != nil {
		return Result{Err: fmt.Errorf("%w: %w", ErrTxRefused, err)}
	}
	m.dedup.evict(c.Now, m.settings.DedupWindowNs)
	if c.OnePhase {
		// Recorded as any primary's decision, so a client that lost the
		// answer learns it, and a late copy of the prepare is not applied.
		m.decisions.prune(c.Now)
		m.decisions.record(c.Tx, true, c.Now)
		m.commitSends(c.Messages, out, c.Now, true, c.Publish)
		for _, msg := range acked {
			m.remove(msg)
		}
		m.counted.Acknowledged += uint64(len(acked))
		return Result{Enqueued: out, Acked: len(acked), Committed: true}
	}
	t := &tx{id: c.Tx, primary: c.Primary, session: c.Session, preparedAt: c.Now, msgs: c.Messages, out: out, bytes: add, acked: acked, publish: c.Publish}
	m.hold(t, true)
	return Result{Enqueued: out}
}

// hold registers a prepared transaction: its ids are taken, its bytes
// counted, its acknowledged deliveries held; withDedup records its dedup
// ids (not when restoring a snapshot, which holds them already).
func (m *Member) hold(t *tx, withDedup bool) {
	for i, msg := range t.msgs {
		if t.out[i].Duplicate {
			continue
		}
		m.txMsgIDs[msg.Id] = t.id
		if withDedup && msg.DedupId != "" {
			m.dedup.add(msg.DedupId, msg.Id, t.preparedAt, int(m.settings.DedupMaxIds))
		}
	}
	for _, r := range t.acked {
		rec := m.rec(r)
		rec.set(flagHeld, true)
		// It expires, if it must, once the transaction is decided.
		m.expiry.Delete(expiryItem(r, rec))
	}
	m.bytes += t.bytes
	m.preparedSends += t.sends()
	m.preparedAcks += len(t.acked)
	m.txs[t.id] = t
}

func (m *Member) txDecide(c *fsmpb.TxDecide) Result {
	commit := c.Commit
	if c.Record {
		m.decisions.prune(c.Now)
		if d, ok := m.decisions.byTx[c.Tx]; ok {
			commit = d.commit
		} else {
			m.decisions.record(c.Tx, commit, c.Now)
		}
	}
	t := m.txs[c.Tx]
	if t == nil {
		return Result{Committed: commit}
	}
	if !c.Record {
		// Remembered here too, so that a late copy of the prepare (a
		// resend that overtook nothing) is answered, not prepared again.
		m.decisions.prune(c.Now)
		m.decisions.record(c.Tx, commit, c.Now)
	}
	delete(m.txs, t.id)
	m.bytes -= t.bytes
	m.preparedSends -= t.sends()
	m.preparedAcks -= len(t.acked)
	for i, msg := range t.msgs {
		if !t.out[i].Duplicate {
			delete(m.txMsgIDs, msg.Id)
		}
	}
	for _, r := range t.acked {
		m.rec(r).set(flagHeld, false)
	}
	if commit {
		m.commitSends(t.msgs, t.out, c.Now, false, t.publish)
		for _, msg := range t.acked {
			m.remove(msg)
		}
		m.counted.Acknowledged += uint64(len(t.acked))
		return Result{Committed: true, Acked: len(t.acked)}
	}
	for i, msg := range t.msgs {
		if !t.out[i].Duplicate && msg.DedupId != "" {
			m.dedup.forget(msg.DedupId, msg.Id)
		}
	}
	for _, r := range t.acked {
		if rec := m.rec(r); rec.expiration != 0 {
			m.expiry.ReplaceOrInsert(expiryItem(r, rec))
		}
		m.requeue(r, c.Now)
	}
	return Result{Returned: len(t.acked)}
}

// commitSends makes a committed transaction's sends pending here or, for a
// publish, hands them to the subscriptions (fanOut); withDedup records
// their dedup ids here (the topic member's window, for a publish).
func (m *Member) commitSends(msgs []*fsmpb.Message, out []Enqueued, now int64, withDedup, publish bool) {
	if !publish || m.fanOut == nil {
		m.store(msgs, out, now, withDedup)
		return
	}
	for i, msg := range msgs {
		if withDedup && !out[i].Duplicate && msg.DedupId != "" {
			m.dedup.add(msg.DedupId, msg.Id, now, int(m.settings.DedupMaxIds))
		}
	}
	m.fanOut(msgs, out, now)
}

// holder is the prepared transaction that acknowledges the delivery r: an
// inspection, so it searches rather than have every record name its
// transaction.
func (m *Member) holder(r ref) string {
	for _, t := range m.txs {
		if slices.Contains(t.acked, r) {
			return t.id
		}
	}
	return ""
}

// sends counts the messages the transaction will enqueue.
func (t *tx) sends() int {
	n := 0
	for _, o := range t.out {
		if !o.Duplicate {
			n++
		}
	}
	return n
}

// Prepared is a transaction prepared on the member, for the host that
// finds its decision when its front-end is gone.
type Prepared struct {
	Tx, Primary string
	PreparedAt  int64
}

// PreparedTxs lists the transactions prepared on the member, oldest first.
func (m *Member) PreparedTxs() []Prepared {
	out := make([]Prepared, 0, len(m.txs))
	for _, t := range m.txs {
		out = append(out, Prepared{Tx: t.id, Primary: t.primary, PreparedAt: t.preparedAt})
	}
	slices.SortFunc(out, func(a, b Prepared) int {
		return cmp.Or(cmp.Compare(a.PreparedAt, b.PreparedAt), cmp.Compare(a.Tx, b.Tx))
	})
	return out
}

// Decision is the decision the member recorded as primary of tx, if any.
func (m *Member) Decision(txID string) (commit, ok bool) {
	d, ok := m.decisions.byTx[txID]
	if !ok {
		return false, false
	}
	return d.commit, true
}
