package frontend

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnmq/cairn/destination"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// MaxTxBytes bounds what one transaction's sends hold on the front-end.
const MaxTxBytes = 64 << 20

// txBuffer is the sends of a transacted session's open transaction, by the
// member chosen for each when it was sent. They live on the front-end
// only: a front-end that dies loses them, and the client's next commit
// fails as rolled back.
type txBuffer struct {
	sends map[string][]*fsmpb.Message
	bytes int
}

func (c *connection) transacted(no uint64) (*session, error) {
	s, err := c.session(no)
	if err == nil && s.mode != clientpb.AckMode_ACK_MODE_TRANSACTED {
		err = fmt.Errorf("%w: session %d is not transacted", transport.ErrMalformed, no)
	}
	return s, err
}

// txSend checks a transacted send and holds it: the member is chosen now,
// so the client knows every member its transaction touches.
func (c *connection) txSend(requestID uint64, op *clientpb.TxSend) {
	req := op.GetSend()
	if req == nil {
		c.reply(requestID, fmt.Errorf("%w: TxSend without messages", transport.ErrMalformed), nil)
		return
	}
	c.mu.Lock()
	_, err := c.transacted(op.Session)
	c.mu.Unlock()
	if err == nil {
		err = c.n.Authorize(c.ctx, fsm.ActionSend, req.Destination)
	}
	if err == nil {
		err = c.n.ValidateSend(req)
	}
	if err != nil {
		c.reply(requestID, err, nil)
		return
	}
	// Resolving may create the destination and wait for the meta group.
	go func() {
		ctx, cancel := context.WithTimeout(c.ctx, destination.RouteWindow)
		defer cancel()
		d, idx, err := c.n.SendTarget(ctx, req)
		if err != nil {
			c.reply(requestID, err, nil)
			return
		}
		if idx < 0 {
			idx = c.n.ChooseMember(d)
		} else if d.Members[idx].Draining {
			c.reply(requestID, fmt.Errorf("%w: member %s is draining; send to %s", transport.ErrUnavailable, fsm.MemberName(d.Name, uint32(idx)), d.Name), nil)
			return
		}
		name := fsm.MemberName(d.Name, uint32(idx))
		msgs, _ := c.n.BuildMessages(d, req)
		size := 0
		for _, m := range msgs {
			size += int(fsm.MessageSize(m))
		}
		c.mu.Lock()
		s, err := c.transacted(op.Session)
		if err == nil {
			if s.tx == nil {
				s.tx = &txBuffer{sends: map[string][]*fsmpb.Message{}}
			}
			if s.tx.bytes+size > MaxTxBytes {
				err = fmt.Errorf("%w: the transaction would hold %d bytes of sends, over %d; commit smaller transactions", transport.ErrInvalidArgument, s.tx.bytes+size, MaxTxBytes)
			} else {
				s.tx.sends[name] = append(s.tx.sends[name], msgs...)
				s.tx.bytes += size
			}
		}
		c.mu.Unlock()
		if err != nil {
			c.reply(requestID, err, nil)
			return
		}
		resp := &clientpb.SendResponse{}
		for _, m := range msgs {
			resp.Results = append(resp.Results, &clientpb.SendResult{Id: m.Id, Member: name})
		}
		c.reply(requestID, nil, &clientpb.Reply{Result: &clientpb.Reply_TxSend{TxSend: resp}})
	}()
}

// commit commits a transacted session's transaction. It is carried out on
// its own goroutine, to the end even if the client goes away meanwhile.
// A transaction that did not commit returns the session's deliveries, as
// a rollback does, and the reply carries their watermarks.
func (c *connection) commit(requestID uint64, op *clientpb.Commit) {
	c.mu.Lock()
	s, err := c.transacted(op.Session)
	var buf *txBuffer
	if err == nil {
		buf, s.tx = s.tx, nil
	}
	c.mu.Unlock()
	if err == nil && op.Tx == "" {
		err = fmt.Errorf("%w: a commit needs a transaction id", transport.ErrMalformed)
	}
	if err != nil {
		c.reply(requestID, err, nil)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*destination.RouteWindow)
		defer cancel()
		var sends map[string][]*fsmpb.Message
		held := 0
		if buf != nil {
			sends = buf.sends
			for _, msgs := range sends {
				held += len(msgs)
			}
		}
		var committed bool
		var err error
		if op.Sends != nil && *op.Sends != uint32(held) {
			// Most likely a reconnect the client's session saw too late
			// (its link ended just after a send's answer): the sends held
			// before it were on the connection it left, and committing
			// what is here would drop them unseen.
			err = fmt.Errorf("%w: this node holds %d sends for the transaction, the client counted %d: the connection reconnected while the transaction was under way, or a send's answer was lost; do the transaction again", transport.ErrTransactionRolledBack, held, *op.Sends)
		} else {
			committed, err = c.n.CommitTx(ctx, s.id, op.Tx, op.Primary, sends, op.Deliveries)
		}
		if committed {
			c.reply(requestID, nil, &clientpb.Reply{Result: &clientpb.Reply_Commit{Commit: &clientpb.CommitResult{Committed: true}}})
			return
		}
		if errors.Is(err, transport.ErrCommitUnknown) {
			c.reply(requestID, err, nil)
			return
		}
		c.recoverThen(op.Session, func(result *clientpb.RecoverResult, _ error) {
			c.reply(requestID, err, recoverReply(result))
		})
	}()
}

func (c *connection) rollback(requestID, no uint64) {
	c.mu.Lock()
	s, err := c.transacted(no)
	if err == nil {
		s.tx = nil
	}
	c.mu.Unlock()
	if err != nil {
		c.reply(requestID, err, nil)
		return
	}
	c.recover(requestID, no)
}

func (c *connection) txOutcome(requestID uint64, op *clientpb.TxOutcome) {
	go func() {
		ctx, cancel := context.WithTimeout(c.ctx, destination.RouteWindow)
		defer cancel()
		committed, err := c.n.TxDecision(ctx, op.Primary, op.Tx)
		if err != nil {
			c.reply(requestID, fmt.Errorf("%w: transaction %s: its primary %s did not answer: %v", transport.ErrCommitUnknown, op.Tx, op.Primary, err), nil)
			return
		}
		c.reply(requestID, nil, &clientpb.Reply{Result: &clientpb.Reply_Commit{Commit: &clientpb.CommitResult{Committed: committed}}})
	}()
}
