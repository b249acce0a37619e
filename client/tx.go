package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// PossibleDuplicateProperty is set ("true") on the messages a transacted
// session sends after a commit whose outcome stayed unknown, until its next
// transaction ends: the application may be sending again what was
// committed. With dedup ids (Producer.SetIdempotent) such a message is
// still never enqueued twice.
const PossibleDuplicateProperty = "cairn.possible_duplicate"

// outcomePoll is how often a commit of unknown outcome asks again.
const outcomePoll = 200 * time.Millisecond

// txSend holds messages in the session's transaction, on its front-end.
func (p *Producer) txSend(ctx context.Context, req *clientpb.SendRequest, ms []*Message) ([]Receipt, error) {
	s := p.s
	s.mu.Lock()
	dup := s.possibleDup
	s.mu.Unlock()
	if dup {
		for i, m := range req.Messages {
			props := maps.Clone(m.Properties)
			if props == nil {
				props = map[string]string{}
			}
			props[PossibleDuplicateProperty] = "true"
			delete(m.TypedProperties, PossibleDuplicateProperty)
			req.Messages[i].Properties = props
			ms[i].Properties = maps.Clone(ms[i].Properties)
			if ms[i].Properties == nil {
				ms[i].Properties = map[string]any{}
			}
			ms[i].Properties[PossibleDuplicateProperty] = "true"
		}
	}
	l, err := s.conn.awaitLink(ctx)
	if err != nil {
		return nil, err
	}
	reply, err := l.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_TxSend{TxSend: &clientpb.TxSend{Session: s.no, Send: req}}})
	if err != nil {
		if reply == nil && !errors.As(err, new(unsentError)) {
			// The node may hold it: the transaction can no longer say what
			// it commits.
			s.mu.Lock()
			if s.txLost == "" {
				s.txLost = fmt.Sprintf("a send of the transaction may or may not have reached the node (%v)", err)
			}
			s.mu.Unlock()
		}
		return nil, err
	}
	results := reply.GetTxSend().GetResults()
	out := make([]Receipt, len(results))
	s.mu.Lock()
	for i, r := range results {
		out[i] = Receipt{ID: r.Id, Member: r.Member}
		ms[i].Member = r.Member
		s.txMembers[r.Member] = true
	}
	s.txSends += len(results)
	s.mu.Unlock()
	return out, nil
}

func newTxID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "TX:" + hex.EncodeToString(b)
}

// Commit commits the session's transaction: every message it sent becomes
// visible and every message it received is acknowledged, at once, whichever
// members they are on; a new transaction starts. If nothing happened it
// returns an error wrapping ErrTransactionRolledBack: the sends were
// dropped and the received messages come again, marked redelivered, and
// the application may do the same work again. That is always the case for
// the first commit after the connection reconnected in the middle of the
// transaction, or after a send whose answer never came. If the connection
// lost its node during the commit, Commit asks the transaction's primary
// member for the outcome, for up to ReconnectBlockingTime, and only then
// fails with ErrCommitUnknown. It first waits for the session's
// asynchronous sends to complete.
func (s *Session) Commit(ctx context.Context) error {
	if s.mode != Transacted {
		return fmt.Errorf("%w: session is not transacted", ErrInvalidArgument)
	}
	if err := s.awaitAsyncSends(ctx); err != nil {
		return err
	}
	s.handout.Lock()
	defer s.handout.Unlock()
	s.mu.Lock()
	lost := s.txLost
	held := slices.Clone(s.unacked)
	members := maps.Clone(s.txMembers)
	sends := uint32(s.txSends)
	s.committing = lost == ""
	s.mu.Unlock()
	if lost != "" {
		err := s.rollback(ctx)
		return errors.Join(fmt.Errorf("%w: %s; do it again", ErrTransactionRolledBack, lost), err)
	}
	defer func() {
		s.mu.Lock()
		s.committing = false
		s.mu.Unlock()
	}()
	refs := make([]*clientpb.DeliveryRef, len(held))
	for i, m := range held {
		refs[i] = m.ref()
		members[m.Member] = true
	}
	if len(members) == 0 {
		s.endTx(false)
		return nil
	}
	primary := slices.Sorted(maps.Keys(members))[0]
	tx := newTxID()
	l, err := s.conn.awaitLink(ctx)
	if err != nil {
		return err
	}
	reply, err := l.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_Commit{Commit: &clientpb.Commit{Session: s.no, Tx: tx, Primary: primary, Deliveries: refs, Sends: &sends}}})
	switch {
	case err == nil:
		s.endTx(false)
		return nil
	case reply != nil && errors.Is(err, ErrTransactionRolledBack):
		s.recovered(reply)
		s.endTx(false)
		return err
	case reply != nil && !errors.Is(err, ErrCommitUnknown):
		return err
	}
	return s.resolve(ctx, tx, primary, err)
}

// resolve learns the outcome of a commit that got no answer from its
// primary, through whichever node the connection reaches.
func (s *Session) resolve(ctx context.Context, tx, primary string, cause error) error {
	deadline := time.Now().Add(s.conn.opts.ReconnectBlockingTime)
	last := cause
	for time.Now().Before(deadline) && ctx.Err() == nil {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		reply, err := s.conn.request(wctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_TxOutcome{TxOutcome: &clientpb.TxOutcome{Tx: tx, Primary: primary}}})
		cancel()
		if err == nil {
			if reply.GetCommit().GetCommitted() {
				s.endTx(false)
				return nil
			}
			// The session's deliveries: released with a lost node, or
			// still held on this one.
			rerr := s.rollback(ctx)
			return errors.Join(fmt.Errorf("%w: transaction %s did not commit (%v)", ErrTransactionRolledBack, tx, cause), rerr)
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(outcomePoll):
		}
	}
	s.endTx(true)
	return fmt.Errorf("%w: transaction %s (primary %s) may or may not have committed: %v", ErrCommitUnknown, tx, primary, last)
}

// Rollback ends the session's transaction without doing any of it: its
// sends are dropped, and the messages it received come again, marked
// redelivered. A new transaction starts. It first waits for the session's
// asynchronous sends to complete.
func (s *Session) Rollback(ctx context.Context) error {
	if s.mode != Transacted {
		return fmt.Errorf("%w: session is not transacted", ErrInvalidArgument)
	}
	if err := s.awaitAsyncSends(ctx); err != nil {
		return err
	}
	s.handout.Lock()
	defer s.handout.Unlock()
	return s.rollback(ctx)
}

func (s *Session) rollback(ctx context.Context) error {
	reply, err := s.conn.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_Rollback{Rollback: &clientpb.Rollback{Session: s.no}}})
	s.recovered(reply)
	s.mu.Lock()
	dup := s.possibleDup // the work done again may still be a copy
	s.mu.Unlock()
	s.endTx(dup)
	return err
}

// awaitAsyncSends waits until every asynchronous send of the session has
// completed and its callback returned, so that a commit or rollback covers
// exactly the sends made before it, as JMS asks.
func (s *Session) awaitAsyncSends(ctx context.Context) error {
	select {
	case <-s.asyncSends.idle():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the session's asynchronous sends: %w", ctx.Err())
	}
}

// endTx starts a new transaction; possibleDup marks its sends.
func (s *Session) endTx(possibleDup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.unacked)
	s.unacked = nil
	clear(s.txMembers)
	s.txSends = 0
	s.txLost = ""
	s.possibleDup = possibleDup
}
