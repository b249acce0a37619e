package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
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

// clientErrors is the client boundary's table: the errors of the layers
// below and the client API's typed error each becomes (transport/errors.go
// then gives each its wire reason and gRPC code). The first match wins.
var clientErrors = []struct{ from, to error }{
	{fsm.ErrInvalidName, transport.ErrInvalidName},
	{fsm.ErrDestinationExists, transport.ErrDestinationExists},
	{fsm.ErrUnknownDestination, transport.ErrUnknownDestination},
	{fsm.ErrMemberFull, transport.ErrDestinationFull},
	{fsm.ErrSealed, transport.ErrUnavailable},
	{fsm.ErrInvalidMessage, transport.ErrInvalidArgument},
	{fsm.ErrInvalidSettings, transport.ErrInvalidArgument},
	{fsm.ErrDuplicateMessageID, transport.ErrInvalidArgument},
	{fsm.ErrMalformed, transport.ErrMalformed},
	{fsm.ErrUnknownSession, transport.ErrLostServer},
	{fsm.ErrSessionOwned, transport.ErrLostServer},
	{destination.ErrNotSent, transport.ErrUnavailable}, // member.ErrNotLeader, member.ErrBusy
	{member.ErrStopped, transport.ErrUnavailable},
	{destination.ErrOutcomeUnknown, transport.ErrUnavailable},
}

// wireError gives an error of the layers below the client API's type
// (clientErrors), keeping its text. One that has a client type already,
// or is its caller's context ending, is returned as it is.
func wireError(err error) error {
	if err == nil || transport.Typed(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for _, e := range clientErrors {
		if errors.Is(err, e.from) {
			return &typedError{kind: e.to, err: err}
		}
	}
	return err
}

// typedError gives an error of a lower layer the client API's type, keeping
// its text: "cairn: " and the lower layer's words.
type typedError struct{ kind, err error }

func (e *typedError) Error() string   { return "cairn: " + e.err.Error() }
func (e *typedError) Unwrap() []error { return []error{e.kind, e.err} }

// resolve finds a destination, creating it on first use unless the node runs
// with --no-auto-create.
func (n *Node) resolve(ctx context.Context, name string) (*fsmpb.Destination, error) {
	if d, ok := n.meta.destination(name); ok {
		return d, nil
	}
	if n.cfg.NoAutoCreate {
		return nil, fmt.Errorf("%w: %q does not exist and this node does not create destinations on first use (--no-auto-create); create it with: cairn queue create %s", transport.ErrUnknownDestination, name, name)
	}
	return n.ensure(ctx, name)
}

// ensure returns the destination name, creating it with the defaults if it
// does not exist.
func (n *Node) ensure(ctx context.Context, name string) (*fsmpb.Destination, error) {
	if d, ok := n.meta.destination(name); ok {
		return d, nil
	}
	d, err := n.createDestination(ctx, &clientpb.CreateDestinationRequest{Name: name})
	if errors.Is(err, transport.ErrDestinationExists) {
		if d, ok := n.meta.destination(name); ok {
			return d, nil
		}
	}
	return d, err
}

// memberOf resolves an address (NAME or NAME#I) to its destination and, for
// NAME#I, the member index (-1 for a plain name).
func (n *Node) memberOf(ctx context.Context, addr string, create bool) (*fsmpb.Destination, int, error) {
	name, idx, err := fsm.ParseAddress(addr)
	if err != nil {
		return nil, 0, wireError(err)
	}
	var d *fsmpb.Destination
	if _, exists := n.meta.destination(name); !exists && create && idx >= 0 {
		// NAME#I of a destination that does not exist yet: refuse before
		// creating one that would not have member I.
		if nodes := len(n.placementNodes(ctx)); idx >= nodes {
			return nil, 0, fmt.Errorf("%w: %s does not exist, and created now it would have %d members; %s names member %d", transport.ErrUnknownDestination, name, nodes, addr, idx)
		}
	}
	if create {
		d, err = n.resolve(ctx, name)
	} else if dd, ok := n.meta.destination(name); ok {
		d = dd
	} else {
		err = fmt.Errorf("%w: %q", transport.ErrUnknownDestination, name)
	}
	if err != nil {
		return nil, 0, err
	}
	if idx >= len(d.Members) {
		return nil, 0, fmt.Errorf("%w: %s has %d members (%s to %s); %s does not exist", transport.ErrUnknownDestination,
			name, len(d.Members), fsm.MemberName(name, 0), fsm.MemberName(name, uint32(len(d.Members)-1)), addr)
	}
	return d, idx, nil
}

// pinConsumer chooses the member a new consumer of addr is pinned to.
func (n *Node) pinConsumer(ctx context.Context, addr string) (string, error) {
	d, idx, err := n.memberOf(ctx, addr, true)
	if err != nil {
		return "", err
	}
	if idx < 0 {
		idx = destination.Pin(n.candidates(d), n.rotation.Add(1))
	}
	return fsm.MemberName(d.Name, uint32(idx)), nil
}

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
		size := len(m.Body)
		for k, v := range m.Properties {
			if k == "" {
				return fmt.Errorf("%w: message %s has a property with an empty name", transport.ErrInvalidArgument, what)
			}
			size += len(k) + len(v)
		}
		switch {
		case size > n.cfg.MaxMessageBytes:
			return fmt.Errorf("%w: message %s is %d bytes with its properties; this node accepts at most %d (--max-message-bytes)", transport.ErrMessageTooLarge, what, size, n.cfg.MaxMessageBytes)
		case proto.Size(m) > transport.MaxEncodedMessage(n.maxWire()):
			// Its delivery would not fit a frame of its own: many short
			// properties cost more on the wire than their text.
			return fmt.Errorf("%w: message %s is %d bytes encoded, with its %d properties; this node delivers messages of at most %d encoded bytes", transport.ErrMessageTooLarge, what, proto.Size(m), len(m.Properties), transport.MaxEncodedMessage(n.maxWire()))
		case m.Priority > fsm.MaxPriority:
			return fmt.Errorf("%w: message %s has priority %d; priorities go from 0 to %d", transport.ErrInvalidArgument, what, m.Priority, fsm.MaxPriority)
		case m.TtlMs < 0 || m.ExpirationUnixMs < 0:
			return fmt.Errorf("%w: message %s has a negative time to live or expiration", transport.ErrInvalidArgument, what)
		case m.TtlMs > maxTTLMillis || m.ExpirationUnixMs > maxExpirationUnixMs:
			return fmt.Errorf("%w: message %s has a time to live or expiration beyond the year 2200", transport.ErrInvalidArgument, what)
		case len(m.Id) > MaxIDLength || len(m.DedupId) > MaxIDLength:
			return fmt.Errorf("%w: message %s has an id or dedup id over %d bytes", transport.ErrInvalidArgument, what, MaxIDLength)
		}
	}
	return nil
}

// send enqueues a request's messages on one member and waits for the commit.
func (n *Node) send(ctx context.Context, req *clientpb.SendRequest) (*clientpb.SendResponse, error) {
	if err := n.validateSend(req); err != nil {
		return nil, err
	}
	d, idx, err := n.memberOf(ctx, req.Destination, true)
	if err != nil {
		return nil, err
	}
	msgs, idempotent := n.buildMessages(d, req)
	window := routeWindow
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
		return nil, wireError(err)
	}
	resp := &clientpb.SendResponse{Results: make([]*clientpb.SendResult, len(res.Enqueued))}
	resp.HostNode, resp.HostAddr = n.directHost(d, idx, name)
	for i, e := range res.Enqueued {
		resp.Results[i] = &clientpb.SendResult{Id: e.ID, Member: name, Duplicate: e.Duplicate}
	}
	return resp, nil
}

// directHost names the node hosting member name (its id and client
// address), when every send to the address asked for goes to that member
// (the destination has one member, or the address names it): the client
// then sends there directly (SendResponse.host_addr). Both are empty when
// the router spreads the sends, or no live host is known now; it never
// waits to learn one.
func (n *Node) directHost(d *fsmpb.Destination, idx int, name string) (node, addr string) {
	if idx < 0 && len(d.Members) != 1 {
		return "", ""
	}
	r, node, _ := n.knownHost(name)
	if r != nil {
		node = n.cfg.NodeID
	}
	if addr := n.clientAddrOf(node); addr != "" {
		return node, addr
	}
	return "", ""
}

// clientAddrOf is the client address of a node: this node's, or another's
// that gossip holds alive; empty when none is known.
func (n *Node) clientAddrOf(node string) string {
	if node == n.cfg.NodeID {
		return n.addrs.Client
	}
	if addr, ok := n.gossip.clientAddr(node); ok {
		return addr
	}
	return ""
}

// buildMessages makes a send's messages as stored: ids given where missing,
// priority and expiration decided now by this node's clock. idempotent is
// true when every message has a dedup id.
func (n *Node) buildMessages(d *fsmpb.Destination, req *clientpb.SendRequest) (msgs []*fsmpb.Message, idempotent bool) {
	now := n.cfg.Clock()
	msgs = make([]*fsmpb.Message, len(req.Messages))
	idempotent = true
	for i, m := range req.Messages {
		fm := &fsmpb.Message{Id: m.Id, Body: m.Body, Properties: m.Properties, Priority: DefaultPriority, DedupId: m.DedupId}
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
		res, tried := n.submitBy(ctx, name, cmd, try)
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
