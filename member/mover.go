package member

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Mover carries messages from this member to another member. The cluster
// provides it: only the cluster knows a destination's other members, its
// dead-letter queue, and where each member is hosted.
type Mover interface {
	// Target chooses the member (NAME#I) messages of member should move to:
	// for dead ones a member of the dead-letter queue, for stranded ones a
	// member of the same destination that has consumers. "" means none now.
	Target(ctx context.Context, member string, dead bool) string
	// Store enqueues msgs on the member target and returns once they are
	// stored, or dropped by target's dedup window as copies of an earlier
	// try.
	Store(ctx context.Context, target string, msgs []*fsmpb.Message) error
	// Draining tells whether member is being removed from its destination:
	// it moves all its pending messages at once, consumers or not.
	Draining(member string) bool
	// Drained is called while a draining member holds nothing more.
	Drained(ctx context.Context, member string)
}

// Moves are batched: at most moveBatch messages, and no more than
// moveBatchBytes of bodies and properties after the first, per Store.
const (
	moveBatch      = 100
	moveBatchBytes = 1 << 20
)

// MoveDedupID is the dedup id a moved message carries to its target: unique
// to this stay of the message on this member (sequences are never reused),
// so a retried move is dropped as a copy while a message that comes back
// later and moves again is not.
func MoveDedupID(member string, seq uint64) string {
	return fmt.Sprintf("moved:%s:%d", member, seq)
}

// moveLoop, while this replica hosts the member, ends redelivery delays
// (Wake), sends dead messages to the dead-letter queue and, after
// ForwardDelay without consumers, forwards stranded pending messages to a
// member that has consumers; a draining member moves all its pending
// messages at once and reports when it is empty. Each move is Move (taken out of delivery,
// replicated), Store on the target under a dedup id, then Moved: a new
// leader finds the moves under way and finishes them, so each message
// moves exactly once.
func (r *Replica) moveLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.ExpiryInterval)
	defer t.Stop()
	var strandedSince time.Time
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if !r.Leading() {
			strandedSince = time.Time{}
			continue
		}
		r.wakeDue()
		if r.cfg.Mover == nil {
			continue
		}
		strandedSince = r.moveOnce(strandedSince)
	}
}

// wakeDue ends the redelivery delays that are over by the leader's clock.
func (r *Replica) wakeDue() {
	now := r.now().UnixNano()
	var next int64
	r.fsm.read(func(m *fsm.Member) { next = m.NextWake() })
	if next == 0 || next > now {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.propose(ctx, &fsmpb.Wake{Now: now}); err != nil {
		r.log.Warn("ending redelivery delays failed", "err", err)
	}
}

// moveOnce does one round of moving and returns when the member started
// stranding its messages (zero if it does not).
func (r *Replica) moveOnce(strandedSince time.Time) time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var aside []fsm.Aside
	var pending int
	r.fsm.read(func(m *fsm.Member) {
		aside = m.AsideMessages(moveBatch)
		pending = m.Stats().Pending
	})

	var dead []string
	for _, a := range aside {
		if a.Target == "" {
			dead = append(dead, a.Message.Id)
		}
	}
	if len(dead) > 0 {
		r.startMove(ctx, dead, true)
	}

	draining := r.cfg.Mover.Draining(r.cfg.Name)
	switch {
	case draining && pending > 0:
		r.movePending(ctx)
	case r.cfg.ForwardDelay <= 0 || pending == 0 || r.Consumers() > 0:
		strandedSince = time.Time{}
	case strandedSince.IsZero():
		strandedSince = time.Now()
	case time.Since(strandedSince) >= r.cfg.ForwardDelay:
		r.movePending(ctx)
	}

	r.finishMoves(ctx)
	if draining {
		var st fsm.Stats
		r.fsm.read(func(m *fsm.Member) { st = m.Stats() })
		if st.Pending+st.Delivered+st.Delayed+st.Moving == 0 {
			r.cfg.Mover.Drained(ctx, r.cfg.Name)
		}
	}
	return strandedSince
}

// movePending starts moving a batch of pending messages to another member.
func (r *Replica) movePending(ctx context.Context) {
	var ids []string
	r.fsm.read(func(m *fsm.Member) {
		m.ScanPending(r.now().UnixNano(), func(id string) bool {
			ids = append(ids, id)
			return len(ids) < moveBatch
		})
	})
	if len(ids) > 0 {
		r.startMove(ctx, ids, false)
	}
}

// startMove takes messages out of delivery, to move where the Mover says.
func (r *Replica) startMove(ctx context.Context, ids []string, dead bool) {
	target := r.cfg.Mover.Target(ctx, r.cfg.Name, dead)
	if target == "" || target == r.cfg.Name {
		return
	}
	res, err := r.proposeResult(ctx, &fsmpb.Move{Target: target, MessageIds: ids})
	if err != nil {
		r.log.Warn("starting to move messages failed", "to", target, "err", err)
		return
	}
	r.log.Info("moving messages", "to", target, "messages", res.Moved, "dead", dead)
}

// finishMoves stores the messages under way on their targets and removes
// them here.
func (r *Replica) finishMoves(ctx context.Context) {
	var aside []fsm.Aside
	r.fsm.read(func(m *fsm.Member) { aside = m.AsideMessages(moveBatch) })
	byTarget := map[string][]fsm.Aside{}
	for _, a := range aside {
		if a.Target != "" {
			byTarget[a.Target] = append(byTarget[a.Target], a)
		}
	}
	for target, batch := range byTarget {
		var msgs []*fsmpb.Message
		var ids []string
		size := 0
		for _, a := range batch {
			if len(msgs) > 0 && size+len(a.Message.Body) > moveBatchBytes {
				break
			}
			m := proto.Clone(a.Message).(*fsmpb.Message)
			m.DedupId = MoveDedupID(r.cfg.Name, a.Seq)
			m.DeliveryCount, m.Redelivered = a.DeliveryCount, a.Redelivered
			msgs = append(msgs, m)
			ids = append(ids, a.Message.Id)
			size += len(a.Message.Body)
		}
		if err := r.cfg.Mover.Store(ctx, target, msgs); err != nil {
			r.log.Warn("moving messages: storing them on their target failed; trying again", "to", target, "messages", len(msgs), "err", err)
			continue
		}
		if err := r.propose(ctx, &fsmpb.Moved{MessageIds: ids}); err != nil {
			r.log.Warn("moving messages: stored on their target, removing them here failed; trying again", "to", target, "err", err)
		}
	}
}
