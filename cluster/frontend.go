package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
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

// wireError maps the errors of the layers below to the typed errors the
// client API carries, keeping their text.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	var target error
	switch {
	case errors.Is(err, transport.ErrUnavailable), errors.Is(err, transport.ErrUnknownDestination),
		errors.Is(err, transport.ErrInvalidName), errors.Is(err, transport.ErrDeliveryUnknown),
		errors.Is(err, transport.ErrLostServer), errors.Is(err, transport.ErrMalformed),
		errors.Is(err, transport.ErrInvalidArgument), errors.Is(err, transport.ErrMessageTooLarge),
		errors.Is(err, transport.ErrDestinationFull), errors.Is(err, transport.ErrDestinationExists),
		errors.Is(err, transport.ErrClientIDInUse), errors.Is(err, transport.ErrUnknownSession),
		errors.Is(err, transport.ErrDestinationDeleted),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, fsm.ErrInvalidName):
		target = transport.ErrInvalidName
	case errors.Is(err, fsm.ErrDestinationExists):
		target = transport.ErrDestinationExists
	case errors.Is(err, fsm.ErrUnknownDestination):
		target = transport.ErrUnknownDestination
	case errors.Is(err, fsm.ErrMemberFull):
		target = transport.ErrDestinationFull
	case errors.Is(err, fsm.ErrSealed):
		target = transport.ErrUnavailable
	case errors.Is(err, fsm.ErrInvalidMessage), errors.Is(err, fsm.ErrInvalidSettings), errors.Is(err, fsm.ErrDuplicateMessageID):
		target = transport.ErrInvalidArgument
	case errors.Is(err, fsm.ErrMalformed):
		target = transport.ErrMalformed
	case errors.Is(err, fsm.ErrUnknownSession), errors.Is(err, fsm.ErrSessionOwned):
		target = transport.ErrLostServer
	case errors.Is(err, member.ErrNotLeader), errors.Is(err, member.ErrStopped), errors.Is(err, member.ErrOutcomeUnknown), errors.Is(err, member.ErrBusy):
		target = transport.ErrUnavailable
	default:
		return err
	}
	return &typedError{kind: target, err: err}
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

// candidates describes a destination's members for the router: where
// each is hosted, and its load as its host last reported it.
func (n *Node) candidates(d *fsmpb.Destination) []destination.Candidate {
	out := make([]destination.Candidate, len(d.Members))
	for i := range d.Members {
		name := fsm.MemberName(d.Name, uint32(i))
		r, node := n.host(name)
		c := destination.Candidate{Index: i, Local: r != nil, Available: !d.Members[i].Draining && (r != nil || (node != "" && n.gossip.alive(node)))}
		if r != nil {
			c.Pending, c.Consumers = r.Stats().Pending, r.Consumers()
		} else if c.Available {
			st := n.loads.get(n, name)
			c.Pending, c.Consumers = int(st.pending), st.consumers
		}
		out[i] = c
	}
	return out
}

// route chooses the member for a send or a consumer.
func (n *Node) route(d *fsmpb.Destination, idx int, choose func([]destination.Candidate, uint64) (int, bool)) (string, error) {
	if idx >= 0 {
		return fsm.MemberName(d.Name, uint32(idx)), nil
	}
	i, ok := choose(n.candidates(d), n.rotation.Add(1))
	if !ok {
		i = anyMember(d, make([]bool, len(d.Members)), n.rotation.Add(1))
	}
	return fsm.MemberName(d.Name, uint32(i)), nil
}

// anyMember is the router's choice when no member has a host now (an
// election, a restart): one not failed, not draining if it can, in
// rotation from start; the command then waits for its host.
func anyMember(d *fsmpb.Destination, failed []bool, start uint64) int {
	n := uint64(len(d.Members))
	fallback := -1
	for k := range n {
		i := int((start + k) % n)
		switch {
		case failed[i]:
		case !d.Members[i].Draining:
			return i
		case fallback < 0:
			fallback = i
		}
	}
	return max(fallback, 0)
}

// pinConsumer chooses the member a new consumer of addr is pinned to.
func (n *Node) pinConsumer(ctx context.Context, addr string) (string, error) {
	d, idx, err := n.memberOf(ctx, addr, true)
	if err != nil {
		return "", err
	}
	return n.route(d, idx, destination.ForConsumer)
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
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, member.ErrOutcomeUnknown) {
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

// enqueue stores a send on a member of d (member idx, or one the router
// chooses for a plain name) and returns the member's name. It looks for a
// host and resends as described below for window (routeWindow; 0 for one
// try).
//
// For a plain name the router moves on to another member, transparently,
// when the one it chose is known not to have taken the send: no host, a
// host gossip holds dead, a relay refused before a byte left. Each
// member gets one try per round; only when every member has failed does
// the send wait and start a new round, until routeWindow.
//
// A send whose outcome is unknown (it may have reached the member) is never
// given to another member. When every message carries a dedup id
// (idempotent), it is sent again to the same member until routeWindow: the
// member's replicated dedup window drops a second copy, so the producer
// gets a definite answer. Otherwise the unknown outcome is returned.
//
// An idempotent send to a plain name goes to the member its first dedup id
// names (dedupMember), not to the one the router prefers: a client that
// lost its front-end mid-send resends through another node, and only the
// same member's window can drop the copy.
func (n *Node) enqueue(ctx context.Context, d *fsmpb.Destination, idx int, cmd *fsmpb.Enqueue, idempotent bool, window time.Duration) (string, fsm.Result, error) {
	if idx >= 0 && d.Members[idx].Draining {
		return fsm.MemberName(d.Name, uint32(idx)), fsm.Result{}, fmt.Errorf("%w: member %s is draining (an update is removing it); send to %s", transport.ErrUnavailable, fsm.MemberName(d.Name, uint32(idx)), d.Name)
	}
	deadline := time.Now().Add(window)
	failed := make([]bool, len(d.Members))
	resendTo := -1 // the member a send of unknown outcome must go to again
	if idempotent && idx < 0 {
		resendTo = dedupMember(d, cmd.Messages[0].DedupId)
	}
	mayBeStored := false // an earlier try's outcome is unknown
	for {
		i := idx
		switch {
		case i >= 0:
		case resendTo >= 0:
			i = resendTo
		default:
			i = n.chooseMember(d, failed)
		}
		name := fsm.MemberName(d.Name, uint32(i))
		try := deadline
		if idx < 0 && resendTo < 0 && slices.Contains(failed, false) {
			try = time.Now() // one try: another member may take it at once
		}
		res, err := n.submitBy(ctx, name, cmd, try)
		notSent := errors.Is(err, transport.ErrUnavailable) || errors.Is(err, fsm.ErrSealed)
		switch {
		case err == nil:
			return name, res, nil
		case mayBeStored && (ctx.Err() != nil || !time.Now().Before(deadline)):
			// An earlier try may have stored it: whatever this one says,
			// the outcome stays unknown.
			return name, res, fmt.Errorf("%w: resent with its dedup id until %v, without an answer: %v", member.ErrOutcomeUnknown, routeWindow, err)
		case ctx.Err() != nil, !time.Now().Before(deadline):
			return name, res, err
		case resendTo >= 0 && notSent:
			// No host for the member yet: wait and send it again.
		case errors.Is(err, member.ErrOutcomeUnknown):
			if !idempotent {
				return name, res, err
			}
			resendTo, mayBeStored = i, true
			n.log.Info("resending a send of unknown outcome; the member's dedup window drops a second copy", "member", name, "id", cmd.Messages[0].Id, "err", err)
		case notSent && idx < 0:
			failed[i] = true
			if slices.Contains(failed, false) {
				continue
			}
			clear(failed)
		default:
			return name, res, err
		}
		select {
		case <-ctx.Done():
			if mayBeStored {
				return name, fsm.Result{}, fmt.Errorf("%w: %v", member.ErrOutcomeUnknown, ctx.Err())
			}
			return name, fsm.Result{}, ctx.Err()
		case <-n.stopped:
			err := fmt.Errorf("%w: node %s is stopping", transport.ErrNodeStopping, n.cfg.NodeID)
			if mayBeStored {
				err = fmt.Errorf("%w: %v", member.ErrOutcomeUnknown, err)
			}
			return name, fsm.Result{}, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dedupMember is the member, among those not draining, that a dedup id
// names; -1 if every member is draining. It depends only on the id and the
// destination's members, so every node names the same one.
func dedupMember(d *fsmpb.Destination, dedupID string) int {
	var open []int
	for i, m := range d.Members {
		if !m.Draining {
			open = append(open, i)
		}
	}
	if len(open) == 0 {
		return -1
	}
	h := fnv.New64a()
	h.Write([]byte(dedupID))
	return open[h.Sum64()%uint64(len(open))]
}

// chooseMember is the router's choice for a send among the members not
// failed in this round.
func (n *Node) chooseMember(d *fsmpb.Destination, failed []bool) int {
	cands := n.candidates(d)
	for i := range cands {
		cands[i].Available = cands[i].Available && !failed[i]
	}
	if i, ok := destination.ForSend(cands, n.rotation.Add(1)); ok {
		return i
	}
	return anyMember(d, failed, n.rotation.Add(1))
}
