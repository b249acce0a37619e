package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
)

// mover is the member.Mover of one of this node's replicas, of Raft group
// group (groupID): it finds where the member's dead and stranded messages
// go, and stores them there through the router, wherever the target is
// hosted.
type mover struct {
	n     *Node
	group string
}

// Target is, for dead messages, a member of the destination's dead-letter
// queue (created on first use, whatever --auto-create says: an operator
// who set max-deliveries asked for it); for stranded ones, the member of
// the same destination with consumers and the fewest pending messages per
// consumer.
func (m mover) Target(ctx context.Context, member string, dead bool) string {
	name, idx, err := fsm.ParseAddress(member)
	if err != nil {
		return ""
	}
	d, ok := m.n.meta.Destination(name)
	if !ok {
		return ""
	}
	if dead {
		dlq := deadLetterQueue(d)
		dd, err := m.n.ensure(ctx, dlq)
		if err != nil {
			m.n.log.Warn("dead-letter queue unavailable; dead messages wait", "queue", dlq, "member", member, "err", err)
			return ""
		}
		return fsm.MemberName(dlq, uint32(destination.ForSendAny(m.n.candidates(dd), m.n.rotation.Add(1))))
	}
	i, ok := destination.ForMove(m.n.candidates(d), idx, m.n.rotation.Add(1))
	if !ok {
		return ""
	}
	return fsm.MemberName(name, uint32(i))
}

// Draining is true for a member that a resize is removing or that is
// renewed, and for one already renewed, whose replicas stay sealed until
// they are destroyed: a send under its name goes to the new member.
func (m mover) Draining(member string) bool {
	name, idx, err := fsm.ParseAddress(member)
	d, ok := m.n.meta.Destination(name)
	return err == nil && ok && idx >= 0 && idx < len(d.Members) && (d.Members[idx].Draining || m.renewed(d, idx))
}

// renewed reports whether member idx of d is no longer the mover's: a
// renewal placed a new member under its name.
func (m mover) renewed(d *fsmpb.Destination, idx int) bool {
	return groupID(d, uint32(idx)) != m.group
}

// Drained places an empty renewing member anew (finishRenewal), or
// removes an empty draining member once it is the last one (the members'
// names must stay NAME#0 to NAME#n-1).
func (m mover) Drained(ctx context.Context, member string, nextDelivery uint64) {
	name, idx, err := fsm.ParseAddress(member)
	d, ok := m.n.meta.Destination(name)
	if err != nil || !ok || idx < 0 || idx >= len(d.Members) {
		return
	}
	if m.renewed(d, idx) {
		return
	}
	if d.Members[idx].Renewing {
		if err := m.n.finishRenewal(ctx, d, uint32(idx), nextDelivery); err != nil {
			m.n.log.Warn("placing a renewed member failed; trying again", "member", member, "err", err)
		}
		return
	}
	if idx != len(d.Members)-1 {
		return
	}
	if _, err := m.n.meta.Apply(ctx, &fsmpb.RemoveMember{Name: name, Index: uint32(idx)}); err != nil {
		m.n.log.Warn("removing a drained member failed; trying again", "member", member, "err", err)
		return
	}
	m.n.groups.poke()
	m.n.log.Info("drained member removed", "member", member)
}

// Store enqueues moved messages on their target. A target that no longer
// exists, drains, or answers that it is sealed certainly stored none of
// them: the move needs another target (member.ErrTargetGone).
func (m mover) Store(ctx context.Context, target string, msgs []*fsmpb.Message) error {
	name, idx, err := fsm.ParseAddress(target)
	d, ok := m.n.meta.Destination(name)
	if err != nil || !ok || idx < 0 || idx >= len(d.Members) || d.Members[idx].Draining {
		return fmt.Errorf("%w: %s no longer exists or drains", member.ErrTargetGone, target)
	}
	_, err = m.n.submit(ctx, target, &fsmpb.Enqueue{Messages: msgs})
	if errors.Is(err, fsm.ErrSealed) {
		return fmt.Errorf("%w: %v", member.ErrTargetGone, err)
	}
	return err
}

// deadLetterQueue is where d's dead messages go.
func deadLetterQueue(d *fsmpb.Destination) string {
	if d.DeadLetterQueue != "" {
		return d.DeadLetterQueue
	}
	return d.Name + ".DLQ"
}
