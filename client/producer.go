package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

const defaultPriority = 4

// Producer sends messages to one destination.
type Producer struct {
	s          *Session
	dest       string
	priority   int
	ttl        time.Duration
	idempotent bool
	// publish: dest is a topic (Session.Publisher).
	publish bool
	async   asyncSends
}

// asyncSends are the sends of SendAsync not yet on their way, and whether a
// batch is in flight.
type asyncSends struct {
	mu       sync.Mutex
	queue    []asyncSend
	inFlight bool
}

type asyncSend struct {
	m    *Message
	done func(Receipt, error)
}

// A batch of asynchronous sends is at most this many messages or bodies of
// this many bytes (one message at least).
const (
	asyncBatchMessages = 512
	asyncBatchBytes    = 512 << 10
)

// Receipt is what the server answered for one sent message.
type Receipt struct {
	ID     string
	Member string
	// Duplicate is true when the message's DedupID was already in the
	// member's window: this copy was dropped and ID is the stored message's.
	Duplicate bool
}

// SetPriority sets the priority (0 to 9, default 4) of the messages sent.
func (p *Producer) SetPriority(priority int) error {
	if priority < 0 || priority > 9 {
		return fmt.Errorf("%w: priority %d; priorities go from 0 to 9", ErrInvalidArgument, priority)
	}
	p.priority = priority
	return nil
}

// SetTimeToLive sets how long sent messages live (0: the destination's
// default, which is forever unless the destination has a ttl).
func (p *Producer) SetTimeToLive(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: negative time to live", ErrInvalidArgument)
	}
	p.ttl = d
	return nil
}

// SetIdempotent makes every message sent without a DedupID carry its
// message id as one. The server then resends a send whose outcome it could
// not learn (its member's host died mid-request) to the same member, whose
// replicated dedup window drops a second copy: Send returns a definite
// answer instead of ErrDeliveryUnknown, and no message is stored twice
// within the member's dedup window (2 minutes by default).
func (p *Producer) SetIdempotent(on bool) { p.idempotent = on }

// NewMessageID returns a fresh message id.
func NewMessageID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "ID:" + hex.EncodeToString(b)
}

// Send sends one message and returns once a quorum of the member's replicas
// stored it. On ErrDeliveryUnknown the message may or may not have been
// stored; the error names its id and member.
func (p *Producer) Send(ctx context.Context, m *Message) (Receipt, error) {
	rs, err := p.SendBatch(ctx, []*Message{m})
	if err != nil {
		return Receipt{}, err
	}
	return rs[0], nil
}

// SendAsync sends m without waiting for it: done is called once, with its
// receipt or the error Send would have returned, from a goroutine of the
// producer's. Asynchronous sends queue up behind the one batch in flight and
// leave together, in one request and one commit, so the producer's order is
// kept and the batches grow with the load; each waits at most the
// connection's RequestTimeout. The caller bounds how many it leaves
// unconfirmed (a window), since nothing here does. In a transacted
// session, Commit and Rollback wait until every asynchronous send has
// completed and its done returned, so done must not commit or roll back
// its own session.
func (p *Producer) SendAsync(m *Message, done func(Receipt, error)) {
	if s := p.s; s.mode == Transacted {
		s.asyncSends.add()
		appDone := done
		done = func(r Receipt, err error) {
			defer s.asyncSends.done()
			appDone(r, err)
		}
	}
	a := &p.async
	a.mu.Lock()
	a.queue = append(a.queue, asyncSend{m, done})
	start := !a.inFlight
	a.inFlight = true
	a.mu.Unlock()
	if start {
		go p.flushAsync()
	}
}

// flushAsync sends the queued asynchronous sends, a batch at a time, until
// none is left.
func (p *Producer) flushAsync() {
	a := &p.async
	for {
		a.mu.Lock()
		n, bytes := 0, 0
		for n < len(a.queue) && n < asyncBatchMessages && (n == 0 || bytes+len(a.queue[n].m.Body) <= asyncBatchBytes) {
			bytes += len(a.queue[n].m.Body)
			n++
		}
		if n == 0 {
			a.inFlight = false
			a.mu.Unlock()
			return
		}
		batch := slices.Clone(a.queue[:n])
		a.queue = slices.Delete(a.queue, 0, n)
		a.mu.Unlock()
		ms := make([]*Message, n)
		for i, s := range batch {
			ms[i] = s.m
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.s.conn.opts.RequestTimeout)
		rs, err := p.SendBatch(ctx, ms)
		cancel()
		for i, s := range batch {
			if err != nil {
				s.done(Receipt{}, err)
			} else {
				s.done(rs[i], nil)
			}
		}
	}
}

// SendBatch sends messages together to one member, in one commit.
//
// While the connection reconnects, SendBatch waits for it as long as ctx
// and ReconnectBlockingTime allow. A send that could not leave because the
// connection's node was lost is sent again after the reconnect; one that
// may have reached the node is sent again only when every message carries
// a dedup id (SetIdempotent), and otherwise fails with ErrDeliveryUnknown.
func (p *Producer) SendBatch(ctx context.Context, ms []*Message) ([]Receipt, error) {
	c := p.s.conn
	if err := c.closedErr(); err != nil {
		return nil, err
	}
	req, idempotent, err := p.request(ms)
	if err != nil {
		return nil, err
	}
	if p.s.mode == Transacted {
		return p.txSend(ctx, req, ms)
	}
	b := &batchSend{c: c, dest: p.dest, req: req, id: ms[0].ID, idempotent: idempotent}
	for {
		resp, again, err := b.try(ctx)
		switch {
		case again:
			continue
		case err != nil:
			return nil, err
		case len(resp.GetResults()) != len(ms):
			return nil, fmt.Errorf("%w: message %s: the node answered with %d results for %d messages", ErrDeliveryUnknown, ms[0].ID, len(resp.GetResults()), len(ms))
		}
		c.learnRoute(p.dest, resp)
		out := make([]Receipt, len(resp.Results))
		for i, r := range resp.Results {
			out[i] = Receipt{ID: r.Id, Member: r.Member, Duplicate: r.Duplicate}
			ms[i].Member = r.Member
		}
		return out, nil
	}
}

// request is the SendRequest of ms, giving each an id (and, idempotent,
// its id as dedup id) if it has none; idempotent says every message
// carries a dedup id. A property of a type the wire has not is refused.
func (p *Producer) request(ms []*Message) (req *clientpb.SendRequest, idempotent bool, err error) {
	req = &clientpb.SendRequest{Destination: p.dest, Messages: make([]*clientpb.Message, len(ms)), Publish: p.publish}
	idempotent = true
	for i, m := range ms {
		if m.ID == "" {
			m.ID = NewMessageID()
		}
		if p.idempotent && m.DedupID == "" {
			m.DedupID = m.ID
		}
		idempotent = idempotent && m.DedupID != ""
		props, typed, err := wireProperties(m.Properties)
		if err != nil {
			return nil, false, fmt.Errorf("message %s: %w", m.ID, err)
		}
		req.Messages[i] = &clientpb.Message{
			Id: m.ID, Body: m.Body, Properties: props, TypedProperties: typed, DedupId: m.DedupID,
			CorrelationId: m.CorrelationID, Type: m.Type, ReplyTo: m.ReplyTo,
			Priority: uint32(p.priority), PrioritySet: true, TtlMs: p.ttl.Milliseconds(),
		}
	}
	return req, idempotent, nil
}

// batchSend is one SendBatch's tries of req, whose first message is id.
type batchSend struct {
	c          *Connection
	dest       string
	req        *clientpb.SendRequest
	id         string
	idempotent bool
	// mayBeStored: an earlier try may have stored the messages, so the
	// send's outcome can no longer be "not sent".
	mayBeStored bool
}

// try sends req once: straight to the destination's host when the
// connection knows it, else through the connection's node. again says to
// try once more (the link was lost and the send is safe to repeat).
func (b *batchSend) try(ctx context.Context) (resp *clientpb.SendResponse, again bool, err error) {
	l, direct := b.c.sendLinkFor(b.dest)
	onSendLink := l != nil
	if !onSendLink {
		if l, err = b.c.awaitLink(ctx); err != nil {
			if b.mayBeStored {
				return nil, false, fmt.Errorf("%w: message %s may or may not have been enqueued; resending it after the connection's node was lost failed: %w", ErrDeliveryUnknown, b.id, err)
			}
			return nil, false, fmt.Errorf("message %s was not sent: %w", b.id, err)
		}
		if l.isDown() {
			// Lost before the send: it would fail without leaving.
			// Whoever ended it reconnects.
			return nil, true, nil
		}
	}
	b.req.Direct = onSendLink
	resp, answered, serr := sendOn(ctx, l, b.req, b.id)
	if serr == nil {
		return resp, false, nil
	}
	if onSendLink && !answered && errors.Is(serr, ErrDeliveryUnknown) {
		// The connection's node would have named the member.
		serr = fmt.Errorf("%w (sent straight to the host of member %s, node %s)", serr, direct.member, direct.node)
	}
	again, err = b.failed(ctx, l, onSendLink, answered, serr)
	return nil, again, err
}

// failed says, after a try on l failed with serr, whether to try again or
// what the send's error is.
func (b *batchSend) failed(ctx context.Context, l *link, onSendLink, answered bool, serr error) (again bool, err error) {
	unknown := errors.Is(serr, ErrDeliveryUnknown)
	notSent := errors.Is(serr, ErrUnavailable)
	// A node that says it is stopping did not store the messages; one
	// that said Goodbye takes no more frames (the link is half-closed).
	stopping := errors.Is(serr, transport.ErrNodeStopping) || (notSent && l.saidGoodbye())
	final := func() error {
		if b.mayBeStored && notSent {
			return fmt.Errorf("%w: message %s may or may not have been enqueued by an earlier try: %v", ErrDeliveryUnknown, b.id, serr)
		}
		return serr
	}
	// The caller's own deadline says nothing against the host.
	hostFailed := ctx.Err() == nil || l.isDown()
	if onSendLink && (notSent || unknown) && hostFailed {
		// The host is lost, stopping or no longer one (its node tries
		// once, SendRequest.direct): the connection's node takes the
		// destination's sends, and waits for an election if need be.
		b.c.dropRoute(b.dest, l, serr)
		if ctx.Err() == nil && (notSent || b.idempotent) {
			b.mayBeStored = b.mayBeStored || !notSent
			return true, nil
		}
	}
	if ctx.Err() != nil || (answered && !stopping) || !(notSent || b.idempotent) {
		return false, final()
	}
	// The node is lost or stopping. Resending is safe, since it never
	// left or the dedup ids make a copy harmless; the server sends a
	// message with a dedup id to the member its id names, whichever
	// node forwards it.
	b.mayBeStored = b.mayBeStored || !notSent
	b.c.opts.Logger.Info("cairn: resending after the connection's node was lost", "message", b.id, "err", serr)
	if !stopping {
		b.c.linkDown(l, serr)
		return true, nil
	}
	// A stopping node answers the sends it is serving before it ends
	// the link; closing the link now would cut those off.
	if err := b.c.awaitLinkEnd(ctx, l, serr); err != nil {
		return false, final()
	}
	return true, nil
}

// sendOn sends a request once on link l: as a frame on its stream when the
// server reads such frames and this one fits, which saves a call per send,
// and otherwise as a unary call. answered is true when the error is the
// server's (or gRPC's refusal of an oversized request), which trying again
// elsewhere would not change. Otherwise the error wraps ErrUnavailable when
// the send certainly did not leave, and ErrDeliveryUnknown when it may
// have.
func sendOn(ctx context.Context, l *link, req *clientpb.SendRequest, id string) (resp *clientpb.SendResponse, answered bool, err error) {
	// Sized with the largest request id the link may give it: a frame over
	// the node's limit would end the whole connection.
	f := &clientpb.ClientFrame{RequestId: math.MaxUint64, Op: &clientpb.ClientFrame_Send{Send: &clientpb.Send{Request: req}}}
	if deadline, ok := ctx.Deadline(); ok {
		// At least 1 ms: 0 would mean no limit.
		f.GetSend().TimeoutMs = max(time.Until(deadline).Milliseconds(), 1)
	}
	if l.maxFrame == 0 || proto.Size(f) > l.maxFrame {
		resp, err := l.api.Send(ctx, req)
		if err != nil {
			serr, answered := sendError(err, id)
			return nil, answered, serr
		}
		return resp, true, nil
	}
	reply, err := l.request(ctx, f)
	var unsent unsentError
	switch {
	case reply != nil:
		return reply.GetSend(), true, err
	// The cause is text only, as in sendError: the link's error may wrap
	// ErrUnavailable, which here means "not sent".
	case errors.As(err, &unsent):
		return nil, false, fmt.Errorf("%w: message %s was not sent: %v", ErrUnavailable, id, err)
	default:
		return nil, false, fmt.Errorf("%w: message %s may or may not have been enqueued: %v", ErrDeliveryUnknown, id, err)
	}
}

// sendError types a failed unary send. The server's own answers are typed
// already, and answered; so is gRPC's refusal of an oversized request,
// which a resend would meet again. A failure of the call itself is a known
// non-delivery only when the request never left (the connection could not
// be made), and unknown otherwise.
func sendError(err error, id string) (typed error, answered bool) {
	typed = transport.FromStatus(err)
	if transport.ServerAnswered(err) || errors.Is(typed, ErrMessageTooLarge) {
		return typed, true
	}
	st, _ := status.FromError(err)
	if st.Code() == codes.Unavailable && strings.Contains(st.Message(), "while dialing") {
		return fmt.Errorf("%w: message %s was not sent: %v", ErrUnavailable, id, st.Message()), false
	}
	return fmt.Errorf("%w: message %s may or may not have been enqueued: %v", ErrDeliveryUnknown, id, typed), false
}
