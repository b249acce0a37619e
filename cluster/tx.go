package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// txDecision asks a transaction's primary for its decision, recording
// rollback there if none was made: only a front-end that saw every
// participant prepared decides commit, so a transaction nobody decided yet
// can safely be rolled back. It is the member.Resolver of the cluster.
func (n *Node) txDecision(ctx context.Context, primary, tx string) (bool, error) {
	if _, i, err := fsm.ParseAddress(primary); err != nil || i < 0 {
		return false, fmt.Errorf("%w: transaction primary %q is not a member address", transport.ErrMalformed, primary)
	}
	res, err := n.submitTx(ctx, primary, &fsmpb.TxDecide{Tx: tx, Record: true, Now: n.cfg.Clock().UnixNano()})
	if err == nil {
		err = res.Err
	}
	return res.Committed, err
}

// submitTx submits a transaction command until it gets an answer from the
// member's state machine or ctx ends. Every transaction command may be
// applied twice: a prepare applied already answers as the first did, a
// decision applied already changes nothing, and a recorded decision is
// given back, so an outcome the transport lost is simply asked again.
func (n *Node) submitTx(ctx context.Context, name string, body proto.Message) (fsm.Result, error) {
	for {
		res, err := n.submit(ctx, name, body)
		if err == nil || ctx.Err() != nil || errors.Is(err, transport.ErrNodeStopping) {
			return res, err
		}
		n.log.Debug("a transaction command got no answer; sending it again", "member", name, "err", err)
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Decision implements member.Resolver.
func (n *Node) Decision(ctx context.Context, primary, tx string) (bool, error) {
	return n.txDecision(ctx, primary, tx)
}

// commitTx carries out a transaction: one TxPrepare that commits at once
// when it touches one member, two-phase commit otherwise, with the
// decision recorded by the primary's group. It reports whether the
// transaction committed; when it did not, the error wraps
// ErrTransactionRolledBack (nothing of it happened) or ErrCommitUnknown.
func (n *Node) commitTx(ctx context.Context, session, tx, primary string, sends map[string][]*fsmpb.Message, acks []*clientpb.DeliveryRef) (bool, error) {
	parts, names := txParts(session, tx, primary, n.cfg.Clock().UnixNano(), sends, acks)
	for name, p := range parts {
		// Sends to a topic's member were publishes (the front-end
		// resolved them so): they go to its subscriptions at the commit.
		dest, _, _ := fsm.ParseAddress(name)
		if d, ok := n.meta.Destination(dest); ok && d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC {
			p.Publish = true
		}
	}
	switch {
	case len(names) == 0:
		return true, nil
	case names[0] != primary:
		return false, fmt.Errorf("%w: %w: the transaction's primary is %q, the first of its members %v", transport.ErrTransactionRolledBack, transport.ErrMalformed, primary, names)
	case len(names) == 1:
		p := parts[primary]
		p.OnePhase = true
		res, err := n.submitTx(ctx, primary, p)
		return n.txResult(tx, res, err)
	}

	// Phase one: every participant prepares.
	refused := n.prepareAll(ctx, names, parts)
	// The decision, recorded by the primary: the first recorded stands.
	res, err := n.submitTx(ctx, primary, &fsmpb.TxDecide{Tx: tx, Commit: refused == nil, Record: true, Now: n.cfg.Clock().UnixNano()})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		if refused != nil {
			// Nobody can record commit now; the primary's host rolls the
			// transaction back once it times out.
			return false, fmt.Errorf("%w: %v", transport.ErrTransactionRolledBack, refused)
		}
		return false, fmt.Errorf("%w: transaction %s: its primary %s did not record the decision: %v", transport.ErrCommitUnknown, tx, primary, err)
	}
	commit := res.Committed
	// Phase two: every other participant applies it; one that misses it
	// asks the primary once the transaction times out there.
	var wg sync.WaitGroup
	for _, name := range names[1:] {
		wg.Go(func() {
			if _, err := n.submitTx(ctx, name, &fsmpb.TxDecide{Tx: tx, Commit: commit, Now: n.cfg.Clock().UnixNano()}); err != nil {
				n.log.Warn("a participant did not apply a transaction's decision; it will ask the primary", "tx", tx, "member", name, "commit", commit, "err", err)
			}
		})
	}
	wg.Wait()
	if !commit {
		if refused == nil {
			refused = errors.New("the primary had recorded rollback first (the transaction timed out)")
		}
		return false, fmt.Errorf("%w: %v", transport.ErrTransactionRolledBack, refused)
	}
	return true, nil
}

// txParts splits a transaction's sends and acknowledgements into one
// TxPrepare per member, and lists the members in order.
func txParts(session, tx, primary string, now int64, sends map[string][]*fsmpb.Message, acks []*clientpb.DeliveryRef) (map[string]*fsmpb.TxPrepare, []string) {
	parts := map[string]*fsmpb.TxPrepare{}
	part := func(name string) *fsmpb.TxPrepare {
		p := parts[name]
		if p == nil {
			p = &fsmpb.TxPrepare{Tx: tx, Primary: primary, Session: session, Now: now}
			parts[name] = p
		}
		return p
	}
	for name, msgs := range sends {
		part(name).Messages = msgs
	}
	for _, ref := range acks {
		p := part(ref.Member)
		p.DeliveryIds = append(p.DeliveryIds, ref.DeliveryId)
	}
	names := make([]string, 0, len(parts))
	for name := range parts {
		names = append(names, name)
	}
	slices.Sort(names)
	return parts, names
}

// prepareAll has every participant prepare at once, and returns why those
// that refused did (nil when none did).
func (n *Node) prepareAll(ctx context.Context, names []string, parts map[string]*fsmpb.TxPrepare) error {
	var mu sync.Mutex
	var refused error
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			res, err := n.submitTx(ctx, name, parts[name])
			if err == nil {
				err = res.Err
			}
			if err != nil {
				mu.Lock()
				refused = errors.Join(refused, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return refused
}

// txResult reads the outcome of a one-phase commit.
func (n *Node) txResult(tx string, res fsm.Result, err error) (bool, error) {
	switch {
	case err == nil && res.Err == nil && res.Committed:
		return true, nil
	case err == nil && res.Err == nil:
		return false, fmt.Errorf("%w: the member did not commit it", transport.ErrTransactionRolledBack)
	case errors.Is(res.Err, fsm.ErrTxRefused):
		return false, fmt.Errorf("%w: %v", transport.ErrTransactionRolledBack, res.Err)
	case err != nil && (errors.Is(err, destination.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return false, fmt.Errorf("%w: transaction %s: %v", transport.ErrCommitUnknown, tx, err)
	case err != nil:
		// Certainly not applied (no host could take it).
		return false, fmt.Errorf("%w: %v", transport.ErrTransactionRolledBack, err)
	}
	return false, fmt.Errorf("%w: %v", transport.ErrTransactionRolledBack, res.Err)
}

var _ member.Resolver = (*Node)(nil)
