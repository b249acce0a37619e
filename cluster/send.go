package cluster

// A client's send on the front-end: checked, its messages built, and
// stored on a member as the router's SendPlan says (enqueue).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Send limits.
const (
	// MaxSendBatch bounds the messages of one Send request.
	MaxSendBatch = 1000
	// MaxIDLength bounds message ids and dedup ids.
	MaxIDLength = 256
	// DefaultPriority is JMS's default message priority.
	DefaultPriority = 4
)

// Expirations are kept in Unix nanoseconds: bounding them at the year 2200
// keeps every computation far from int64's limit.
const (
	maxExpirationUnixMs = 7258118400000 // 2200-01-01
	maxTTLMillis        = 100 * 365 * 24 * 3600 * 1000
)

func (n *Node) validateSend(req *clientpb.SendRequest) error {
	if len(req.Messages) == 0 {
		return fmt.Errorf("%w: a send carries at least one message", transport.ErrMalformed)
	}
	if len(req.Messages) > MaxSendBatch {
		return fmt.Errorf("%w: %d messages in one send; at most %d", transport.ErrMalformed, len(req.Messages), MaxSendBatch)
	}
	for i, m := range req.Messages {
		if m == nil {
			return fmt.Errorf("%w: message %d of the request is empty", transport.ErrMalformed, i)
		}
		what := m.Id
		if what == "" {
			what = fmt.Sprintf("%d of the request", i)
		}
		size, err := frontend.MessageSize(m, what)
		if err != nil {
			return err
		}
		switch {
		case size > n.cfg.MaxMessageBytes:
			return fmt.Errorf("%w: message %s is %d bytes with its properties; this node accepts at most %d (--max-message-bytes)", transport.ErrMessageTooLarge, what, size, n.cfg.MaxMessageBytes)
		case proto.Size(m) > transport.MaxEncodedMessage(n.maxWire()):
			// Its delivery would not fit a frame of its own: many short
			// properties cost more on the wire than their text.
			return fmt.Errorf("%w: message %s is %d bytes encoded, with its %d properties; this node delivers messages of at most %d encoded bytes", transport.ErrMessageTooLarge, what, proto.Size(m), len(m.Properties)+len(m.TypedProperties), transport.MaxEncodedMessage(n.maxWire()))
		case len(m.Properties)+len(m.TypedProperties) > n.cfg.MaxProperties:
			return fmt.Errorf("%w: message %s has %d properties; this node accepts at most %d (--max-properties)", transport.ErrInvalidArgument, what, len(m.Properties)+len(m.TypedProperties), n.cfg.MaxProperties)
		case m.Priority > fsm.MaxPriority:
			return fmt.Errorf("%w: message %s has priority %d; priorities go from 0 to %d", transport.ErrInvalidArgument, what, m.Priority, fsm.MaxPriority)
		case m.TtlMs < 0 || m.ExpirationUnixMs < 0:
			return fmt.Errorf("%w: message %s has a negative time to live or expiration", transport.ErrInvalidArgument, what)
		case m.TtlMs > maxTTLMillis || m.ExpirationUnixMs > maxExpirationUnixMs:
			return fmt.Errorf("%w: message %s has a time to live or expiration beyond the year 2200", transport.ErrInvalidArgument, what)
		case len(m.Id) > MaxIDLength || len(m.DedupId) > MaxIDLength:
			return fmt.Errorf("%w: message %s has an id or dedup id over %d bytes", transport.ErrInvalidArgument, what, MaxIDLength)
		case len(m.CorrelationId) > MaxIDLength || len(m.Type) > MaxIDLength || len(m.ReplyTo) > MaxIDLength:
			return fmt.Errorf("%w: message %s has a correlation id, type or reply-to over %d bytes", transport.ErrInvalidArgument, what, MaxIDLength)
		}
	}
	return nil
}

// sendTarget is the destination a send goes to, a queue made on first
// use, or a publish, a topic; and the member it names (-1 for any).
func (n *Node) sendTarget(ctx context.Context, req *clientpb.SendRequest) (*fsmpb.Destination, int, error) {
	k := fsmpb.DestinationKind_DESTINATION_KIND_QUEUE
	if req.Publish {
		k = fsmpb.DestinationKind_DESTINATION_KIND_TOPIC
	}
	return n.memberOfKind(ctx, req.Destination, k)
}

// send enqueues a request's messages on one member and waits for the commit.
func (n *Node) send(ctx context.Context, req *clientpb.SendRequest) (*clientpb.SendResponse, error) {
	if err := n.validateSend(req); err != nil {
		return nil, err
	}
	d, idx, err := n.sendTarget(ctx, req)
	if err != nil {
		return nil, err
	}
	msgs, idempotent := n.buildMessages(d, req)
	window := destination.RouteWindow
	if req.Direct {
		window = 0
	}
	name, res, err := n.enqueue(ctx, d, idx, &fsmpb.Enqueue{Messages: msgs}, idempotent, window)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, destination.ErrOutcomeUnknown) {
			resent := "it was not resent (only messages with a dedup id are)"
			switch {
			case idempotent && req.Direct:
				resent = "it was a direct send (one try); the client may resend it through its own node"
			case idempotent:
				resent = "resending it with its dedup id got no answer either"
			}
			return nil, fmt.Errorf("%w: message %s on member %s may or may not have been enqueued (%v); %s", transport.ErrDeliveryUnknown, msgs[0].Id, name, err, resent)
		}
		return nil, frontend.WireError(err)
	}
	resp := &clientpb.SendResponse{Results: make([]*clientpb.SendResult, len(res.Enqueued))}
	resp.HostNode, resp.HostAddr = n.directHost(d, idx, name)
	for i, e := range res.Enqueued {
		resp.Results[i] = &clientpb.SendResult{Id: e.ID, Member: name, Duplicate: e.Duplicate}
	}
	return resp, nil
}

// buildMessages makes a send's messages as stored: ids given where missing,
// priority and expiration decided now by this node's clock. idempotent is
// true when every message has a dedup id.
func (n *Node) buildMessages(d *fsmpb.Destination, req *clientpb.SendRequest) (msgs []*fsmpb.Message, idempotent bool) {
	now := n.cfg.Clock()
	msgs = make([]*fsmpb.Message, len(req.Messages))
	idempotent = true
	for i, m := range req.Messages {
		fm := &fsmpb.Message{
			Id: m.Id, Body: m.Body, Properties: m.Properties, Priority: DefaultPriority, DedupId: m.DedupId,
			TypedProperties: frontend.StoredProperties(m.TypedProperties), CorrelationId: m.CorrelationId, Type: m.Type, ReplyTo: m.ReplyTo,
		}
		if fm.Id == "" {
			fm.Id = "ID:" + newID(16)
		}
		if m.PrioritySet {
			fm.Priority = m.Priority
		}
		switch {
		case m.ExpirationUnixMs > 0:
			fm.Expiration = m.ExpirationUnixMs * int64(time.Millisecond)
		case m.TtlMs > 0:
			fm.Expiration = now.Add(time.Duration(m.TtlMs) * time.Millisecond).UnixNano()
		case d.TtlNs > 0:
			fm.Expiration = now.Add(time.Duration(d.TtlNs)).UnixNano()
		}
		idempotent = idempotent && fm.DedupId != ""
		msgs[i] = fm
	}
	return msgs, idempotent
}

// enqueue runs cmd on a member of d (member idx, or the router's choice
// when idx is -1) as the router's SendPlan says, within window, and
// returns the member it went to last.
func (n *Node) enqueue(ctx context.Context, d *fsmpb.Destination, idx int, cmd *fsmpb.Enqueue, idempotent bool, window time.Duration) (string, fsm.Result, error) {
	if idx >= 0 && d.Members[idx].Draining {
		return fsm.MemberName(d.Name, uint32(idx)), fsm.Result{}, fmt.Errorf("%w: member %s is draining (an update is removing it); send to %s", transport.ErrUnavailable, fsm.MemberName(d.Name, uint32(idx)), d.Name)
	}
	var body proto.Message = cmd
	if d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC {
		body = &fsmpb.Publish{Messages: cmd.Messages}
	}
	deadline := time.Now().Add(window)
	cands := n.candidates(d)
	plan := destination.PlanSend(cands, idx, idempotent, cmd.Messages[0].DedupId)
	for ; ; cands = n.candidates(d) {
		i, patient := plan.Next(cands, n.rotation.Add(1))
		name := fsm.MemberName(d.Name, uint32(i))
		try := deadline
		if !patient {
			try = time.Now() // one try: another member may take it at once
		}
		res, tried := n.submitBy(ctx, name, body, try)
		step, err := plan.After(tried, ctx.Err() != nil || !time.Now().Before(deadline))
		switch step {
		case destination.Done:
			return name, res, err
		case destination.Again:
			continue
		}
		if destination.OutcomeOf(tried) == destination.Unknown {
			n.log.Info("resending a send of unknown outcome; the member's dedup window drops a second copy", "member", name, "id", cmd.Messages[0].Id, "err", tried)
		}
		select {
		case <-ctx.Done():
			return name, fsm.Result{}, plan.Abandon(ctx.Err())
		case <-n.stopped:
			return name, fsm.Result{}, plan.Abandon(fmt.Errorf("%w: node %s is stopping", transport.ErrNodeStopping, n.cfg.NodeID))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
