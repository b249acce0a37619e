package member

import (
	"context"
	"errors"
	"time"

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

// dispatchOnce proposes one round of deliveries, the pending messages in
// order dealt one at a time to the consumers with credit, starting with a
// different consumer each round. It reports whether it proposed anything.
func (r *Replica) dispatchOnce() bool {
	now := r.now()
	r.mu.Lock()
	var picks []pick
	n := len(r.order)
	for i := range n {
		c := r.consumers[r.order[(r.next+i)%n]]
		if c.credit > 0 {
			picks = append(picks, pick{c: c})
		}
	}
	if len(picks) == 0 {
		r.mu.Unlock()
		return false
	}
	r.next = (r.next + 1) % n
	want := 0
	room := make([]int, len(picks))
	for i, p := range picks {
		room[i] = min(p.c.credit, maxDeliverBatch)
		want += room[i]
	}
	k := 0
	r.fsm.read(func(m *fsm.Member) {
		m.ScanPending(now.UnixNano(), func(id string) bool {
			if _, busy := r.reserved[id]; busy {
				return true
			}
			for room[k%len(picks)] == 0 {
				k++
			}
			i := k % len(picks)
			picks[i].ids = append(picks[i].ids, id)
			room[i]--
			want--
			k++
			return want > 0
		})
	})
	any := false
	for _, p := range picks {
		if len(p.ids) == 0 {
			continue
		}
		any = true
		p.c.credit -= len(p.ids)
		for _, id := range p.ids {
			r.reserved[id] = struct{}{}
		}
	}
	r.mu.Unlock()

	for _, p := range picks {
		if len(p.ids) == 0 {
			continue
		}
		p := p
		r.prop.submit(&fsmpb.Deliver{Session: p.c.Session, Now: now.UnixNano(), MessageIds: p.ids}, func(res fsm.Result, err error) {
			r.delivered(p, res, err)
		})
	}
	return any
}

// delivered runs on the proposer's result goroutine, in log order, so each
// consumer gets its deliveries in the order they were made.
func (r *Replica) delivered(p pick, res fsm.Result, err error) {
	if err == nil {
		err = res.Err
	}
	got := res.Delivered
	if err != nil {
		got = nil
	}
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
		// Not on this goroutine: it is the one that completes proposals.
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.Return(ctx, p.c.Session, ids); err != nil {
				r.log.Debug("returning deliveries of a consumer that left", "consumer", p.c.ID, "err", err)
			}
		}()
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
		r.fsm.read(func(m *fsm.Member) { ids = m.ExpiredBy(now, expireBatch) })
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
