package member

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// maxDeliverBatch bounds the messages of one Deliver command, so one
// consumer with a large prefetch does not make one huge entry.
const maxDeliverBatch = 256

// dispatchLoop feeds consumers while this replica hosts the member. It wakes
// on every applied entry and every credit or consumer change, and proposes
// Deliver commands without waiting for earlier ones to commit: the
// reserved set keeps one message out of two commands.
func (r *Replica) dispatchLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		}
		for r.Leading() && r.dispatchOnce() {
		}
	}
}

type pick struct {
	c   *consumerState
	ids []string
}

// dealer deals message ids, in order, one at a time to the consumers with
// credit, starting with a different consumer each round, each up to its
// credit and maxDeliverBatch.
type dealer struct {
	picks []pick
	room  []int
	want  int // room left in all
	k     int
	// selective: a consumer with room has a selector, so each message is
	// read (fields) to choose who may take it.
	selective bool
	fields    fsm.MessageFields
}

// newDealerLocked returns nil when no consumer has credit. r.mu is held.
func (r *Replica) newDealerLocked() *dealer {
	d := &dealer{}
	n := len(r.order)
	for i := range n {
		c := r.consumers[r.order[(r.next+i)%n]]
		if c.credit > 0 {
			room := min(c.credit, maxDeliverBatch)
			d.picks = append(d.picks, pick{c: c})
			d.room = append(d.room, room)
			d.want += room
			d.selective = d.selective || c.Selector != nil
		}
	}
	if len(d.picks) == 0 {
		return nil
	}
	r.next = (r.next + 1) % n
	return d
}

// deal gives the message id to the next consumer with room that selects
// it (none may: it then stays pending); it reports whether any room is
// left. msg is the message, read only by a selective dealer (nil else).
func (d *dealer) deal(id string, msg *fsmpb.Message) bool {
	if d.selective {
		d.fields.Reset(msg)
	}
	for j := range len(d.picks) {
		i := (d.k + j) % len(d.picks)
		if d.room[i] == 0 {
			continue
		}
		if sel := d.picks[i].c.Selector; sel != nil && !sel.Match(d.fields.Get) {
			continue
		}
		d.picks[i].ids = append(d.picks[i].ids, id)
		d.room[i]--
		d.want--
		d.k = i + 1
		break
	}
	return d.want > 0
}

// reserveLocked takes the dealt messages out of the next rounds and their
// count out of the consumers' credit; it returns the non-empty picks.
// r.mu is held.
func (r *Replica) reserveLocked(d *dealer) []pick {
	var dealt []pick
	for _, p := range d.picks {
		if len(p.ids) == 0 {
			continue
		}
		p.c.credit -= len(p.ids)
		for _, id := range p.ids {
			r.reserved[id] = struct{}{}
		}
		dealt = append(dealt, p)
	}
	return dealt
}

// deliveries are the Deliver commands of picks.
func (r *Replica) deliveries(picks []pick, now int64) []command {
	cmds := make([]command, len(picks))
	start := time.Now()
	for i, p := range picks {
		cmds[i] = command{member: r.key, body: &fsmpb.Deliver{Session: p.c.Session, Consumer: p.c.ID, Now: now, MessageIds: p.ids}, done: func(res fsm.Result, err error) {
			r.delivered(p, start, res, err)
		}}
	}
	return cmds
}

// dispatchOnce proposes one round of deliveries of the pending messages.
// It reports whether it proposed anything.
func (r *Replica) dispatchOnce() bool {
	r.submitMu.Lock()
	defer r.submitMu.Unlock()
	now := r.now().UnixNano()
	r.mu.Lock()
	d := r.newDealerLocked()
	if d == nil {
		r.mu.Unlock()
		return false
	}
	r.host.fsm.read(r.key, func(m *fsm.Member) {
		if d.selective {
			m.ScanPendingMessages(now, func(msg *fsmpb.Message) bool {
				if _, busy := r.reserved[msg.Id]; busy {
					return true
				}
				return d.deal(msg.Id, msg)
			})
			return
		}
		m.ScanPending(now, func(id []byte) bool {
			if _, busy := r.reserved[string(id)]; busy {
				return true
			}
			return d.deal(string(id), nil)
		})
	})
	picks := r.reserveLocked(d)
	r.mu.Unlock()
	r.host.prop.submit(r.deliveries(picks, now)...)
	return len(picks) > 0
}

// submitEnqueue proposes c and, when consumers wait with credit and no
// message could be delivered before c's, the Deliver of its messages in the
// same Raft entry, so they are pushed when c commits (member/DESIGN.md).
// The messages not dealt then wait in undealt until c is applied: a later
// send's deal takes them first.
func (r *Replica) submitEnqueue(c *fsmpb.Enqueue, done func(fsm.Result, error)) {
	// Encoded here rather than by prop.submit, before submitMu is taken:
	// the bodies are the costly part, and concurrent sends encode theirs
	// side by side.
	send, err := newProposal(r.key, c, nil)
	if err != nil {
		done(fsm.Result{}, err)
		return
	}
	r.submitMu.Lock()
	defer r.submitMu.Unlock()
	r.mu.Lock()
	picks, u := r.dealEnqueueLocked(c)
	r.mu.Unlock()
	send.done = func(res fsm.Result, err error) {
		r.applied(u)
		done(res, err)
		r.kick()
	}
	r.host.prop.queueGroup(append([]proposal{send}, r.host.prop.prepare(r.deliveries(picks, c.Now)...)...))
}

// undealt are the messages of an Enqueue proposed and not yet applied that
// were not dealt as it was proposed.
type undealt struct{ msgs []*fsmpb.Message }

// applied forgets u, the undealt messages of an Enqueue now applied (they
// are pending in the member, where the dispatcher deals them, unless
// rejected) or failed (they are nowhere).
func (r *Replica) applied(u *undealt) {
	if u == nil {
		return
	}
	r.mu.Lock()
	r.undealt = slices.DeleteFunc(r.undealt, func(v *undealt) bool { return v == u })
	r.mu.Unlock()
}

// dealEnqueueLocked deals c's messages to the consumers with credit, after
// the undealt messages of the Enqueues before it, if nothing else may come
// before them: no pending message waits unreserved and no command ahead
// may make one pending. It returns the picks, and c's messages left
// undealt (the expired ones are never delivered), which it adds to
// r.undealt (nil if none). r.mu is held.
func (r *Replica) dealEnqueueLocked(c *fsmpb.Enqueue) ([]pick, *undealt) {
	picks, left := r.dealLocked(c)
	if len(left) == 0 {
		return picks, nil
	}
	u := &undealt{msgs: left}
	r.undealt = append(r.undealt, u)
	return picks, u
}

// dealLocked is dealEnqueueLocked's deal, which leaves r.undealt as it is.
func (r *Replica) dealLocked(c *fsmpb.Enqueue) (picks []pick, left []*fsmpb.Message) {
	live := func(m *fsmpb.Message) bool { return m.Expiration == 0 || m.Expiration > c.Now }
	dealt := make([]bool, len(c.Messages))
	if d := r.enqueueDealerLocked(c.Now); d != nil {
		free := func(m *fsmpb.Message) bool {
			_, busy := r.reserved[m.Id]
			return !busy && live(m)
		}
		// In the order the member will keep them pending: by priority, then
		// as they came, the Enqueues before c first. Walking the ten
		// priorities costs no sort and no copy under the locks.
		for p := fsm.MaxPriority; p >= 0 && d.want > 0; p-- {
			for _, u := range r.undealt {
				for _, m := range u.msgs {
					if d.want > 0 && int(m.Priority) == p && free(m) {
						d.deal(m.Id, m)
					}
				}
			}
			for i, m := range c.Messages {
				if d.want > 0 && int(m.Priority) == p && free(m) {
					before := d.want
					d.deal(m.Id, m)
					dealt[i] = d.want < before
				}
			}
		}
		picks = r.reserveLocked(d)
	}
	for i, m := range c.Messages {
		if !dealt[i] && live(m) {
			left = append(left, m)
		}
	}
	return picks, left
}

// enqueueDealerLocked is a dealer for a new Enqueue's messages, or nil when
// something may have to be delivered before them (a command ahead, a
// pending message not reserved) or no consumer has credit.
func (r *Replica) enqueueDealerLocked(now int64) *dealer {
	if r.ahead > 0 {
		return nil
	}
	waiting := false
	r.host.fsm.read(r.key, func(m *fsm.Member) {
		m.ScanPending(now, func(id []byte) bool {
			_, busy := r.reserved[string(id)]
			waiting = !busy
			return busy
		})
	})
	if waiting {
		return nil
	}
	return r.newDealerLocked()
}

// addsPending reports whether a command may make messages pending (stored,
// returned, woken, or committed by a transaction); unknown ones may.
func addsPending(body proto.Message) bool {
	switch c := body.(type) {
	case *fsmpb.TxPrepare:
		return c.OnePhase // its only participant commits it at once
	case *fsmpb.Ack, *fsmpb.Deliver, *fsmpb.Expire, *fsmpb.Purge, *fsmpb.OpenSession, *fsmpb.Seal, *fsmpb.Moved:
		return false
	}
	return true
}

// delivered runs on the proposer's result goroutine, in log order, so each
// consumer gets its deliveries in the order they were made.
func (r *Replica) delivered(p pick, start time.Time, res fsm.Result, err error) {
	if err == nil {
		err = res.Err
	}
	got := res.Delivered
	if err != nil {
		got = nil
	}
	got = r.host.fsm.deliveriesWithBodies(r.key, got)
	r.mu.Lock()
	for _, id := range p.ids {
		delete(r.reserved, id)
	}
	live := r.consumers[p.c.ID] == p.c
	if live {
		p.c.credit += len(p.ids) - len(got)
	}
	r.mu.Unlock()
	if errors.Is(err, fsm.ErrUnknownSession) && live {
		// The session was released under the consumer: it would be
		// refused forever, so it goes, and its connection is told.
		r.RemoveConsumer(p.c.ID)
		if p.c.Gone != nil {
			p.c.Gone(err)
		}
		return
	}
	if err != nil && !errors.Is(err, ErrStopped) {
		r.log.Debug("deliver not applied", "consumer", p.c.ID, "err", err)
	}
	if len(got) > 0 && (!live || !p.c.Push(got)) {
		ids := make([]uint64, len(got))
		for i, d := range got {
			ids[i] = d.DeliveryID
		}
		r.GiveBack(p.c.Session, ids)
	} else if o := r.cfg.Observer; o != nil && len(got) > 0 {
		o.Pushed(time.Since(start))
	}
	r.kick()
}

// expireTick removes expired messages, and ends redelivery delays, while
// this replica hosts the member; it runs every ExpiryInterval.
// The decision uses the leader's clock and travels in the Expire command.
func (r *Replica) expireTick() {
	if r.Leading() {
		r.ExpireNow()
		r.wakeDue()
	}
}

// expireBatch bounds the ids of one Expire command.
const expireBatch = 1000

// ExpireNow proposes the removal of every message expired by the leader's
// clock now. It returns how many were removed.
func (r *Replica) ExpireNow() int {
	removed := 0
	for {
		now := r.now().UnixNano()
		var ids []string
		r.host.fsm.read(r.key, func(m *fsm.Member) { ids = m.ExpiredBy(now, expireBatch) })
		if len(ids) == 0 {
			return removed
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := r.proposeResult(ctx, &fsmpb.Expire{Now: now, MessageIds: ids})
		cancel()
		if err != nil {
			r.log.Warn("expiring messages failed", "err", err)
			return removed
		}
		removed += res.Removed
		if len(ids) < expireBatch {
			return removed
		}
	}
}
