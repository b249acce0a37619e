package cluster

import (
	"context"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// mover is the member.Mover of this node's replicas: it finds where a
// member's dead and stranded messages go, and stores them there through
// the router, wherever the target is hosted.
type mover struct{ n *Node }

// Target is, for dead messages, a member of the destination's dead-letter
// queue (created on first use, whatever --no-auto-create says: an operator
// who set max-deliveries asked for it); for stranded ones, the member of
// the same destination with consumers and the fewest pending messages per
// consumer.
func (m mover) Target(ctx context.Context, member string, dead bool) string {
	name, idx, err := fsm.ParseAddress(member)
	if err != nil {
		return ""
	}
	d, ok := m.n.meta.destination(name)
	if !ok {
		return ""
	}
	if dead {
		dlq := d.DeadLetterQueue
		if dlq == "" {
			dlq = name + ".DLQ"
		}
		dd, err := m.n.ensure(ctx, dlq)
		if err != nil {
			m.n.log.Warn("dead-letter queue unavailable; dead messages wait", "queue", dlq, "member", member, "err", err)
			return ""
		}
		return fsm.MemberName(dlq, uint32(m.n.chooseMember(dd, make([]bool, len(dd.Members)))))
	}
	cands := m.n.candidates(d)
	for i := range cands {
		cands[i].Available = cands[i].Available && cands[i].Consumers > 0 && i != idx
	}
	i, ok := destination.ForSend(cands, rotation.Add(1))
	if !ok {
		return ""
	}
	return fsm.MemberName(name, uint32(i))
}

// Store enqueues moved messages on their target.
func (m mover) Store(ctx context.Context, target string, msgs []*fsmpb.Message) error {
	_, err := m.n.submit(ctx, target, &fsmpb.Enqueue{Messages: msgs})
	return err
}
