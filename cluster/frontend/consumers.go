package frontend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairnmq/cairn/fsm/selector"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// consumerGone tells the client that the server ended one of its consumers.
func (c *connection) consumerGone(k *consumer, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k.closed {
		return
	}
	k.detach(c.n)
	c.out.Push(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_ConsumerClosed{ConsumerClosed: &clientpb.ConsumerClosed{Consumer: k.no, Error: transport.ToProto(err)}}})
}

// createConsumer registers the consumer at once, in frame order, then
// attaches it on its own goroutine: attaching may create a destination and
// open the session on a member.
func (c *connection) createConsumer(requestID uint64, op *clientpb.CreateConsumer) {
	prefetch := int(op.Prefetch)
	if prefetch == 0 {
		prefetch = DefaultPrefetch
	}
	sel, err := selector.Parse(op.Selector)
	if err != nil {
		c.reply(requestID, fmt.Errorf("%w: %v", transport.ErrInvalidSelector, err), nil)
		return
	}
	if op.Subscribe != nil {
		sel = nil // the subscription's selector chooses what it stores
	}
	owner := c.n.TemporaryOwner(op.Destination)
	if owner != "" && owner != c.n.Owner()+"/"+c.id {
		c.reply(requestID, fmt.Errorf("%w: %s is another connection's temporary queue; only that connection consumes from it", transport.ErrInvalidArgument, op.Destination), nil)
		return
	}
	if owner == "" {
		if err := c.n.Authorize(c.ctx, fsm.ActionReceive, op.Destination); err != nil {
			c.reply(requestID, err, nil)
			return
		}
	}
	c.mu.Lock()
	s, err := c.session(op.Session)
	switch {
	case err != nil:
	case prefetch > MaxPrefetch:
		err = fmt.Errorf("%w: prefetch %d is over %d", transport.ErrInvalidArgument, prefetch, MaxPrefetch)
	case c.consumers[op.Consumer] != nil:
		err = fmt.Errorf("%w: consumer %d already exists", transport.ErrMalformed, op.Consumer)
	case len(c.consumers) >= c.n.Limits().ConsumersPerConnection:
		err = fmt.Errorf("%w: the connection has %d consumers, the most this node allows one connection (--max-consumers); close some first", transport.ErrLimitReached, len(c.consumers))
	}
	var k *consumer
	if err == nil {
		c.consumersMade++
		k = &consumer{no: op.Consumer, id: fmt.Sprintf("%s/c%d", c.id, c.consumersMade), session: s, selector: sel}
		s.consumers[k.no] = k
		c.consumers[k.no] = k
	}
	c.mu.Unlock()
	if err != nil {
		c.reply(requestID, err, nil)
		return
	}
	go func() {
		dest, err := op.Destination, error(nil)
		if op.Subscribe != nil {
			dest, err = c.subscribe(k, op)
		}
		if err == nil {
			err = c.attach(k, dest, prefetch)
		}
		if err != nil {
			c.mu.Lock()
			if c.consumers[k.no] == k {
				delete(c.consumers, k.no)
			}
			delete(k.session.consumers, k.no)
			if k.subscription != "" {
				c.n.DropDestination(k.subscription)
				k.subscription = ""
			}
			c.mu.Unlock()
			c.reply(requestID, err, nil)
			return
		}
		c.reply(requestID, nil, &clientpb.Reply{Result: &clientpb.Reply_CreateConsumer{CreateConsumer: &clientpb.CreateConsumerResult{Member: k.member}}})
	}()
}

// createTemporaryQueue makes a temporary queue that lives as long as the
// connection.
func (c *connection) createTemporaryQueue(requestID uint64) {
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	name, err := c.n.CreateTemporaryQueue(ctx, c.id)
	if err != nil {
		c.reply(requestID, err, nil)
		return
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.temporary = append(c.temporary, name)
	}
	c.mu.Unlock()
	if closed {
		c.n.DropDestination(name)
		return
	}
	c.reply(requestID, nil, &clientpb.Reply{Result: &clientpb.Reply_TemporaryQueue{TemporaryQueue: &clientpb.TemporaryQueueResult{Name: name}}})
}

// subscribe finds or makes the consumer's subscription; a non-durable
// unshared one is the consumer's, deleted when it closes.
func (c *connection) subscribe(k *consumer, op *clientpb.CreateConsumer) (string, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	name, err := c.n.Subscribe(ctx, op.Destination, op.Subscribe, c.clientID, op.Selector)
	if err != nil {
		return "", err
	}
	if !op.Subscribe.Durable && !op.Subscribe.Shared {
		c.mu.Lock()
		k.subscription = name
		closed := k.closed
		c.mu.Unlock()
		if closed {
			c.n.DropDestination(name)
			return "", fmt.Errorf("%w: consumer %d was closed while it was being created", transport.ErrUnknownSession, k.no)
		}
	}
	return name, nil
}

func (c *connection) attach(k *consumer, dest string, prefetch int) error {
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	name, err := c.n.PinConsumer(ctx, dest)
	if err != nil {
		return err
	}
	s := k.session
	group := c.n.MemberGroup(name) // before the open: a renewal after it shows
	// Opening a session it holds already changes nothing on a member, so a
	// failover of the member's host while the consumer is created (as when
	// a client re-creates its consumers after a reconnect) costs a slower
	// answer, not a consumer lost.
	if _, err := c.n.SubmitRepeatableWait(ctx, name, &fsmpb.OpenSession{Session: s.id, Owner: c.n.Owner()}); err != nil {
		return WireError(err)
	}
	c.mu.Lock()
	if c.closed || c.sessions[s.no] != s {
		c.mu.Unlock()
		// The session ended while this consumer was attaching, and its
		// release did not know this member: release it here.
		c.n.ReleaseSession(name, s.id, nil)
		return fmt.Errorf("%w: session %d was closed while its consumer was being created", transport.ErrUnknownSession, s.no)
	}
	s.members[name] = true
	if k.closed {
		c.mu.Unlock()
		return fmt.Errorf("%w: consumer %d was closed while it was being created", transport.ErrUnknownSession, k.no)
	}
	a := newAttachment(c, k, name, group, prefetch)
	k.member, k.att = name, a
	c.mu.Unlock()
	// Outside c.mu: the first link may push deliveries, which take it.
	if err := a.start(ctx); err != nil {
		a.detach()
		return err
	}
	return nil
}

// push hands committed deliveries to the client, in frames within the
// node's frame limit; false means the consumer is gone and they go back to
// pending, unseen.
func (c *connection) push(k *consumer, ds []fsm.Delivery) bool {
	msgs := make([]*clientpb.Delivery, len(ds))
	dest, _, _ := fsm.ParseAddress(k.member)
	if topic := fsm.TopicOf(dest); topic != "" {
		dest = topic // a subscriber's messages come from its topic, as JMSDestination says
	}
	for i, d := range ds {
		msgs[i] = delivery(k.member, dest, d)
	}
	runs := transport.Batches(msgs, c.n.MaxWire())
	frames := make([]*clientpb.ServerFrame, len(runs))
	for i, run := range runs {
		frames[i] = &clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Deliveries{Deliveries: &clientpb.Deliveries{Consumer: k.no, Messages: run}}}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// After a Goodbye the client takes nothing more: deliveries go back.
	return !k.closed && !c.closed && c.closing == nil && c.out.Push(frames...)
}

func nsToMs(ns int64) int64 {
	if ns == 0 {
		return 0
	}
	return ns / 1e6
}

// closeConsumer detaches a consumer. Its deliveries are pushed under c.mu,
// so once it is marked closed no delivery to it follows the reply.
func (c *connection) closeConsumer(requestID uint64, op *clientpb.CloseConsumer) {
	c.mu.Lock()
	k, ok := c.consumers[op.Consumer]
	var a *attachment
	if ok {
		k.detach(c.n)
		delete(c.consumers, k.no)
		delete(k.session.consumers, k.no)
		a = k.att
	}
	c.mu.Unlock()
	if !ok {
		c.reply(requestID, fmt.Errorf("%w: consumer %d is not open on this connection", transport.ErrUnknownSession, op.Consumer), nil)
		return
	}
	if a != nil {
		a.giveBackUnpushed()
	}
	c.reply(requestID, nil, nil)
}

// returnDeliveries gives back deliveries a session never handed out: the
// application never saw them, so they are neither counted nor marked.
func (c *connection) returnDeliveries(requestID uint64, op *clientpb.ReturnDeliveries) {
	s, byMember, _, err := c.sessionRefs(op.Session, op.Deliveries)
	if err != nil {
		c.reply(requestID, err, nil)
		return
	}
	f := newFanout(len(byMember), func(err error) { c.reply(requestID, err, nil) })
	for _, g := range byMember {
		// Deliveries the session no longer holds were released already.
		c.n.SubmitAsync(g.member, &fsmpb.Return{Session: s.id, DeliveryIds: g.ids, Unseen: true}, func(res fsm.Result, err error) { f.finish(err) })
	}
}

func (c *connection) credit(op *clientpb.Credit) {
	c.mu.Lock()
	k := c.consumers[op.Consumer]
	var a *attachment
	if k != nil && !k.closed {
		a = k.att
	}
	c.mu.Unlock()
	if a != nil && op.Messages > 0 {
		a.grant(int(op.Messages))
	}
}

// refGroup is the deliveries of one member that a request names.
type refGroup struct {
	member string
	ids    []uint64
}

// sessionRefs finds an open session and groups the delivery references of a
// request by member. References to members the session is not open on (any
// more: a deleted queue) are returned apart: the session holds none of them.
func (c *connection) sessionRefs(no uint64, refs []*clientpb.DeliveryRef) (*session, map[string]*refGroup, []*clientpb.DeliveryRef, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(no)
	if err != nil {
		return nil, nil, nil, err
	}
	out := map[string]*refGroup{}
	var foreign []*clientpb.DeliveryRef
	for _, ref := range refs {
		g := out[ref.Member]
		if g == nil {
			if !s.members[ref.Member] {
				foreign = append(foreign, ref)
				continue
			}
			g = &refGroup{member: ref.Member}
			out[ref.Member] = g
		}
		g.ids = append(g.ids, ref.DeliveryId)
	}
	return s, out, foreign, nil
}

func (c *connection) acknowledge(requestID uint64, op *clientpb.Acknowledge) {
	s, byMember, foreign, err := c.sessionRefs(op.Session, op.Deliveries)
	if err != nil {
		c.reply(requestID, err, nil)
		return
	}
	var mu sync.Mutex
	result := &clientpb.AcknowledgeResult{Rejected: foreign}
	f := newFanout(len(byMember), func(err error) {
		if err == nil && len(result.Rejected) > 0 {
			err = fmt.Errorf("%w: %d of the acknowledged messages no longer belong to this session (returned by a recover, the session's end or a failover, or expired)", transport.ErrLostServer, len(result.Rejected))
		}
		c.reply(requestID, err, &clientpb.Reply{Result: &clientpb.Reply_Acknowledge{Acknowledge: result}})
	})
	for name, g := range byMember {
		c.n.SubmitAsync(g.member, &fsmpb.Ack{Session: s.id, DeliveryIds: g.ids}, func(res fsm.Result, err error) {
			if err == nil && errors.Is(res.Err, fsm.ErrUnknownSession) {
				res.Rejected, res.Err = g.ids, nil
			}
			if errors.Is(err, destination.ErrOutcomeUnknown) {
				// As docs/ARCHITECTURE.md has it: the client cannot tell whether these
				// are acknowledged; if not, they come again, marked.
				err = fmt.Errorf("%w: the acknowledgement of %d message(s) of %s may not have been applied (%v); any that was not will be redelivered, marked", transport.ErrLostServer, len(g.ids), g.member, err)
			}
			mu.Lock()
			for _, id := range res.Rejected {
				result.Rejected = append(result.Rejected, &clientpb.DeliveryRef{Member: name, DeliveryId: id})
			}
			mu.Unlock()
			f.finish(errors.Join(err, res.Err))
		})
	}
}

func (c *connection) recover(requestID, no uint64) {
	c.recoverThen(no, func(result *clientpb.RecoverResult, err error) {
		c.reply(requestID, err, recoverReply(result))
	})
}

func recoverReply(result *clientpb.RecoverResult) *clientpb.Reply {
	if result == nil {
		return nil
	}
	return &clientpb.Reply{Result: &clientpb.Reply_Recover{Recover: result}}
}

// recoverThen recovers the session on every member it is open on, then
// calls done with the watermarks of those that recovered.
func (c *connection) recoverThen(no uint64, done func(*clientpb.RecoverResult, error)) {
	c.mu.Lock()
	s, err := c.session(no)
	var members []string
	var attempt uint64 // the same for every member and every try
	if err == nil {
		members = membersOf(s)
		s.recovers++
		attempt = s.recovers
	}
	c.mu.Unlock()
	if err != nil {
		done(nil, err)
		return
	}
	var mu sync.Mutex
	result := &clientpb.RecoverResult{}
	f := newFanout(len(members), func(err error) { done(result, err) })
	for _, name := range members {
		c.n.SubmitRepeatable(name, &fsmpb.Recover{Session: s.id, Attempt: attempt}, func(res fsm.Result, err error) {
			if err == nil && res.Err == nil {
				mu.Lock()
				result.Watermarks = append(result.Watermarks, &clientpb.Watermark{Member: name, FirstValid: res.Watermark})
				mu.Unlock()
			}
			f.finish(errors.Join(err, res.Err))
		})
	}
}
