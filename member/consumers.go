package member

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairnmq/cairn/fsm/selector"

	"github.com/cairnmq/cairn/fsm"
)

// Consumer receives a member's deliveries.
type Consumer struct {
	// ID is unique among the member's consumers.
	ID      string
	Session string
	// Selector, if set, keeps from the consumer the messages it does not
	// select: they wait for another consumer.
	Selector *selector.Selector
	// Push hands committed deliveries to the consumer's connection, in order.
	// It must not block. It returns false if the consumer is gone; the
	// deliveries then go back to pending, marked redelivered.
	Push func([]fsm.Delivery) bool
	// Gone, if set, is called when the replica detaches the consumer by
	// itself: its session is no longer open on the member
	// (fsm.ErrUnknownSession), or the replica stopped hosting the member
	// (ErrNotLeader). It must not block.
	Gone func(error)
}

type consumerState struct {
	*Consumer
	credit int
	// attachPushed is the highest delivery id pushed to the consumer when it
	// attached (the session's deliveries above its pushedUpTo). A Deliver
	// proposed for an earlier attachment of the same consumer that was
	// applied before this one attached is among them and must not be given
	// back when its result comes in.
	attachPushed uint64
}

// dropConsumers detaches every consumer when this replica stops hosting the
// member; each is told (Gone with ErrNotLeader) so it can attach to the new
// host, where its deliveries are replicated.
func (r *Replica) dropConsumers() {
	r.mu.Lock()
	cs := r.consumers
	r.consumers, r.order, r.next = make(map[string]*consumerState), nil, 0
	r.mu.Unlock()
	for _, c := range cs {
		if c.Gone != nil {
			c.Gone(fmt.Errorf("%w: member %s is no longer hosted here", ErrNotLeader, r.cfg.Name))
		}
	}
}

// HoldsDeadSessions reports whether a session of the member belongs to a
// front-end that is no longer alive (SweepSessions releases them).
func (r *Replica) HoldsDeadSessions() bool {
	return len(r.deadSessions()) > 0
}

func (r *Replica) deadSessions() (dead []string) {
	r.host.fsm.read(r.key, func(m *fsm.Member) {
		for _, s := range m.Sessions() {
			if !r.cfg.OwnerLive(s.Owner) {
				dead = append(dead, s.ID)
			}
		}
	})
	return dead
}

// SweepSessions releases every session whose owner is no longer alive, so
// its unacknowledged messages return to pending, marked redelivered.
func (r *Replica) SweepSessions(ctx context.Context) error {
	dead := r.deadSessions()
	for _, id := range dead {
		if err := r.Release(ctx, id); err != nil {
			return fmt.Errorf("release session %s: %w", id, err)
		}
	}
	if len(dead) > 0 {
		r.log.Info("released the sessions of front-ends that are gone", "sessions", len(dead))
	}
	return nil
}

// AddConsumer attaches a consumer with credit for that many messages. Its
// session must be open (OpenSession).
func (r *Replica) AddConsumer(c *Consumer, credit int) error {
	return r.AttachConsumer(c, credit, ^uint64(0))
}

// AttachConsumer attaches a consumer that has seen its deliveries on this
// member up to pushedUpTo. Its deliveries above it were committed by an
// earlier host that failed before pushing them: they are pushed first (not
// redelivered: the consumer never saw them), within the credit. Those of
// the session's other consumers are theirs alone.
func (r *Replica) AttachConsumer(c *Consumer, credit int, pushedUpTo uint64) error {
	select {
	case <-r.stop:
		return ErrStopped
	default:
	}
	var unseen []fsm.Delivery
	if pushedUpTo != ^uint64(0) {
		r.host.fsm.read(r.key, func(m *fsm.Member) { unseen = m.DeliveriesAfter(c.Session, c.ID, pushedUpTo) })
		unseen = r.host.fsm.deliveriesWithBodies(r.key, unseen)
	}
	r.mu.Lock()
	if _, ok := r.consumers[c.ID]; ok {
		r.mu.Unlock()
		return fmt.Errorf("member %s: consumer %s is already attached", r.cfg.Name, c.ID)
	}
	unseen = slices.DeleteFunc(unseen, func(d fsm.Delivery) bool { _, back := r.returning[d.DeliveryID]; return back })
	cs := &consumerState{Consumer: c, credit: credit - len(unseen)}
	for _, d := range unseen {
		cs.attachPushed = max(cs.attachPushed, d.DeliveryID)
	}
	r.consumers[c.ID] = cs
	r.order = append(r.order, c.ID)
	r.mu.Unlock()
	if len(unseen) > 0 && !c.Push(unseen) {
		r.RemoveConsumer(c.ID)
		return fmt.Errorf("member %s: consumer %s left while attaching", r.cfg.Name, c.ID)
	}
	r.kick()
	return nil
}

// Credit allows n more messages to the consumer.
func (r *Replica) Credit(consumerID string, n int) {
	r.mu.Lock()
	if c := r.consumers[consumerID]; c != nil {
		c.credit += n
	}
	r.mu.Unlock()
	r.kick()
}

// RemoveConsumer detaches a consumer; deliveries that commit afterwards go
// back to pending, unless the consumer attached again and was pushed them.
func (r *Replica) RemoveConsumer(consumerID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.consumers[consumerID]; !ok {
		return
	}
	delete(r.consumers, consumerID)
	for i, id := range r.order {
		if id == consumerID {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
}

// Consumers counts the attached consumers.
func (r *Replica) Consumers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.consumers)
}
