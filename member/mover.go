package member

import (
	"context"
	"errors"
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
	// member of the same destination that has consumers (any other active
	// member when member drains). "" means none now.
	Target(ctx context.Context, member string, dead bool) string
	// Store enqueues msgs on the member target and returns once they are
	// stored, or dropped by target's dedup window as copies of an earlier
	// try. An error wrapping ErrTargetGone says target refused them for
	// good and certainly stored none: the move needs another target.
	Store(ctx context.Context, target string, msgs []*fsmpb.Message) error
	// Draining tells whether member is being removed from its destination:
	// it seals itself and moves all its pending messages at once.
	Draining(member string) bool
	// Drained is called once a sealed, draining member holds nothing;
	// nextDelivery is the id its next delivery would have had.
	Drained(ctx context.Context, member string, nextDelivery uint64)
}

// ErrTargetGone: a move's target takes no more messages (it drains, or no
// longer exists).
var ErrTargetGone = errors.New("move target takes no more messages")

// Moves are batched: at most moveBatch messages, and no more than
// moveBatchBytes of bodies and properties after the first, per Store.
const (
	moveBatch      = 100
	moveBatchBytes = 1 << 20
)

// MoveDedupID is the dedup id a moved message carries to its target: unique
// to this stay of the message on this member's group (sequences are never
// reused within a group, and a group id is never reused: it carries the
// destination's and the member's uids), so a retried move is dropped as a
// copy while a message that comes back later and moves again is not.
func MoveDedupID(group string, seq uint64) string {
	return fmt.Sprintf("moved:%s:%d", group, seq)
}

// moveRounds bounds the batches one tick moves, so a large backlog moves at
// up to moveRounds*moveBatch messages per tick without starving the rest of
// the loop.
const moveRounds = 20

// moveTick runs every ExpiryInterval: while this replica
// hosts the member, it decides the transactions
// its front-ends left prepared (resolvePrepared), sends dead messages to
// the dead-letter queue and, after ForwardDelay without consumers, forwards
// stranded pending messages to a member that has consumers; a draining
// member seals itself, moves all its pending messages at once and reports
// when it is empty. Each move is Move (taken out of delivery, replicated),
// Store on the target under a dedup id, then Moved: a new leader finds the
// moves under way and finishes them, so each message moves exactly once.
// (Redelivery delays end in the expiry loop, which never waits on another
// member.) One goroutine at a time runs it.
func (r *Replica) moveTick() {
	if r.Leading() {
		r.resolvePrepared()
	}
	if !r.Leading() || r.cfg.Mover == nil {
		r.strandedSince = time.Time{}
		return
	}
	r.strandedSince = r.moveOnce(r.strandedSince)
}

// idle reports whether the member holds nothing and is not draining: its
// leader then has nothing to expire, wake, resolve or move.
func (r *Replica) idle() bool {
	var st fsm.Stats
	var sealed bool
	r.host.fsm.read(r.key, func(m *fsm.Member) { st, sealed = m.Stats(), m.Sealed() })
	return st.Pending+st.Delivered+st.Delayed+st.Moving+st.Prepared == 0 && !sealed &&
		(r.cfg.Mover == nil || !r.cfg.Mover.Draining(r.cfg.Name))
}

// wakeDue ends the redelivery delays that are over by the leader's clock.
func (r *Replica) wakeDue() {
	now := r.now().UnixNano()
	var next int64
	r.host.fsm.read(r.key, func(m *fsm.Member) { next = m.NextWake() })
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
	draining := r.cfg.Mover.Draining(r.cfg.Name)
	var sealed bool
	r.host.fsm.read(r.key, func(m *fsm.Member) { sealed = m.Sealed() })
	if draining != sealed {
		if _, err := r.proposeResult(ctx, &fsmpb.Seal{Sealed: draining}); err != nil {
			r.log.Warn("sealing a draining member (or unsealing one taken back) failed", "draining", draining, "err", err)
			return strandedSince
		}
	}

	for range moveRounds {
		var dead []string
		var pending int
		r.host.fsm.read(r.key, func(m *fsm.Member) {
			dead = m.DeadWaiting(moveBatch)
			pending = m.Stats().Pending
		})
		progress := len(dead) > 0 && r.startMove(ctx, dead, true)
		switch {
		case draining && pending > 0:
			progress = r.movePending(ctx) || progress
		case r.cfg.ForwardDelay <= 0 || pending == 0 || r.Consumers() > 0:
			strandedSince = time.Time{}
		case strandedSince.IsZero():
			strandedSince = time.Now()
		case time.Since(strandedSince) >= r.cfg.ForwardDelay:
			progress = r.movePending(ctx) || progress
		}
		progress = r.finishMoves(ctx) || progress
		if !progress || ctx.Err() != nil {
			break
		}
	}

	if draining {
		var st fsm.Stats
		r.host.fsm.read(r.key, func(m *fsm.Member) { st = m.Stats() })
		if st.Pending+st.Delivered+st.Delayed+st.Moving > 0 {
			return strandedSince
		}
		// The local read may lag the log; a committed Seal, applied after
		// everything before it, says what the sealed member really holds.
		res, err := r.proposeResult(ctx, &fsmpb.Seal{Sealed: true})
		if err == nil && res.Held == 0 {
			r.cfg.Mover.Drained(ctx, r.cfg.Name, res.Watermark)
		}
	}
	return strandedSince
}

// movePending starts moving a batch of pending messages to another member.
func (r *Replica) movePending(ctx context.Context) bool {
	var ids []string
	r.host.fsm.read(r.key, func(m *fsm.Member) {
		m.ScanPending(r.now().UnixNano(), func(id []byte) bool {
			ids = append(ids, string(id))
			return len(ids) < moveBatch
		})
	})
	return len(ids) > 0 && r.startMove(ctx, ids, false)
}

// startMove takes messages out of delivery, to move where the Mover says.
func (r *Replica) startMove(ctx context.Context, ids []string, dead bool) bool {
	target := r.cfg.Mover.Target(ctx, r.cfg.Name, dead)
	if target == "" || target == r.cfg.Name {
		return false
	}
	res, err := r.proposeResult(ctx, &fsmpb.Move{Target: target, MessageIds: ids})
	if err != nil {
		r.log.Warn("starting to move messages failed", "to", target, "err", err)
		return false
	}
	r.log.Info("moving messages", "to", target, "messages", res.Moved, "dead", dead)
	return res.Moved > 0
}

// finishMoves stores a batch of the messages under way on their target and
// removes them here; a batch whose target refused it for good gets a new
// target.
func (r *Replica) finishMoves(ctx context.Context) bool {
	var aside []fsm.Aside
	var err error
	r.host.fsm.read(r.key, func(m *fsm.Member) {
		aside = m.AsideMessages(moveBatch)
		for i := range aside {
			if aside[i].Message, err = r.host.fsm.withBody(aside[i].Message, aside[i].Body); err != nil {
				return
			}
			aside[i].Body = fsm.BodyRef{}
		}
	})
	if err != nil {
		if !errors.Is(err, errBodiesClosed) {
			r.host.fsm.fatal(fmt.Errorf("moving messages: %w", err))
		}
		return false
	}
	type key struct {
		target string
		dead   bool
	}
	batches := map[key][]fsm.Aside{}
	for _, a := range aside {
		if a.Target != "" {
			k := key{a.Target, a.Dead}
			batches[k] = append(batches[k], a)
		}
	}
	progress := false
	for k, batch := range batches {
		var msgs []*fsmpb.Message
		var ids []string
		var size int64
		for _, a := range batch {
			if len(msgs) > 0 && size+fsm.MessageSize(a.Message) > moveBatchBytes {
				break
			}
			m := proto.Clone(a.Message).(*fsmpb.Message)
			m.DedupId = MoveDedupID(r.cfg.GroupID, a.Seq)
			m.DeliveryCount, m.Redelivered = a.DeliveryCount, a.Redelivered
			msgs = append(msgs, m)
			ids = append(ids, a.Message.Id)
			size += fsm.MessageSize(a.Message)
		}
		err := r.cfg.Mover.Store(ctx, k.target, msgs)
		if errors.Is(err, ErrTargetGone) {
			next := r.cfg.Mover.Target(ctx, r.cfg.Name, k.dead)
			if next == "" || next == k.target {
				continue
			}
			if _, err := r.proposeResult(ctx, &fsmpb.Move{Target: next, MessageIds: ids, Retarget: true}); err != nil {
				r.log.Warn("moving messages: giving them a new target failed", "from", k.target, "to", next, "err", err)
				continue
			}
			r.log.Info("moving messages: their target takes no more; moving them elsewhere", "from", k.target, "to", next, "messages", len(ids), "err", err)
			progress = true
			continue
		}
		stored := ids
		switch {
		case errors.Is(err, fsm.ErrDuplicateMessageID):
			stored, err = r.storeOneByOne(ctx, k.target, msgs)
		case err != nil:
			stored = nil
		}
		if err != nil {
			r.log.Warn("moving messages: storing them on their target failed; trying again", "to", k.target, "messages", len(msgs)-len(stored), "err", err)
		}
		if len(stored) == 0 {
			continue
		}
		if err := r.propose(ctx, &fsmpb.Moved{MessageIds: stored}); err != nil {
			r.log.Warn("moving messages: stored on their target, removing them here failed; trying again", "to", k.target, "err", err)
			continue
		}
		progress = true
	}
	return progress
}

// storeOneByOne stores a batch that the target refused because it already
// holds a message with one of its ids, one message at a time, and returns
// the ids it may remove here. A message whose id the target holds is taken
// as stored: message ids are unique, so that is this message, stored by an
// earlier move whose dedup id the target has forgotten.
func (r *Replica) storeOneByOne(ctx context.Context, target string, msgs []*fsmpb.Message) ([]string, error) {
	var done []string
	var last error
	for _, m := range msgs {
		err := r.cfg.Mover.Store(ctx, target, []*fsmpb.Message{m})
		if errors.Is(err, fsm.ErrDuplicateMessageID) {
			r.log.Warn("moving a message its target already holds (same id): taking it as stored", "to", target, "id", m.Id)
			err = nil
		}
		if err != nil {
			last = err
			continue
		}
		done = append(done, m.Id)
	}
	return done, last
}
