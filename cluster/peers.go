package cluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// The peer API's error codes (peerpb.Error.code), and what each says of
// the command: the peer boundary's table, read back by fromPeerError.
const (
	codeNotLeader      = "NOT_LEADER"      // not sent: the node does not host the member (Leader names who leads)
	codeNoMember       = "NO_MEMBER"       // not sent: no replica of the member on the node
	codeUnavailable    = "UNAVAILABLE"     // not sent: refused before it reached a log
	codeOutcomeUnknown = "OUTCOME_UNKNOWN" // unknown: it may be in the log, unanswered
)

// peerError is a failure reported by, or on the way to, another node.
type peerError struct {
	kind   error // destination.ErrNotSent or destination.ErrOutcomeUnknown: what the relayed command's outcome is
	node   string
	leader string // the member's leader as the peer knows it
	msg    string
}

func (e *peerError) Error() string {
	return fmt.Sprintf("node %s: %s", e.node, e.msg)
}
func (e *peerError) Unwrap() error { return e.kind }

func fromPeerError(node string, e *peerpb.Error) error {
	kind := destination.ErrNotSent
	if e.Code == codeOutcomeUnknown {
		kind = destination.ErrOutcomeUnknown
	}
	return &peerError{kind: kind, node: node, leader: e.Leader, msg: e.Message}
}

// peers holds this node's connections to the other nodes' peer services.
type peers struct {
	n  *Node
	mu sync.Mutex
	// conns are by address, so a node that moves gets a new connection.
	conns   map[string]*grpc.ClientConn
	streams map[string]*proposeStream
}

func newPeers(n *Node) *peers {
	return &peers{n: n, conns: make(map[string]*grpc.ClientConn), streams: make(map[string]*proposeStream)}
}

// client returns a client of node's peer service.
func (p *peers) client(node string) (peerpb.PeerServiceClient, error) {
	addr := p.n.peerAddr(node)
	if addr == "" {
		return nil, &peerError{kind: destination.ErrNotSent, node: node, msg: "its peer address is not known here"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cc, ok := p.conns[addr]
	if !ok {
		var err error
		opts := append(transport.DialOptions(),
			p.n.dialCreds(node),
			// A peer that vanished without closing its connections (a
			// partition, a pulled cable) is noticed in seconds, not at the
			// operating system's TCP timeout.
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: peerKeepalive, Timeout: peerKeepalive, PermitWithoutStream: true}),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPeerFrame), grpc.MaxCallSendMsgSize(maxPeerFrame)),
		)
		if d := p.n.cfg.Dial; d != nil {
			opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d(ctx, "tcp", a) }))
		}
		cc, err = grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, &peerError{kind: destination.ErrNotSent, node: node, msg: err.Error()}
		}
		p.conns[addr] = cc
	}
	return peerpb.NewPeerServiceClient(cc), nil
}

// proposeStream is the ordered stream of member commands to one host.
type proposeStream struct {
	node   string
	cancel context.CancelFunc
	stream peerpb.PeerService_ProposeClient
	sendMu sync.Mutex

	mu      sync.Mutex
	next    uint64
	pending map[uint64]func(*peerpb.ProposeResponse, error)
	// sent is when each pending command was sent.
	sent map[uint64]time.Time
	dead bool
	// gaveUp is set when watch ended the stream for a late answer.
	gaveUp bool
}

// relayTimeout bounds the wait for a relayed command's answer. A healthy
// host answers within a commit (milliseconds); one that stopped answering
// (paused, partitioned) has lost its leadership to another replica long
// before this, so its stream is given up and what was in flight is reported
// unknown rather than waited on until the connection's keepalive notices.
const relayTimeout = 5 * time.Second

func (p *peers) proposeStream(node string) (*proposeStream, error) {
	p.mu.Lock()
	s := p.streams[node]
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	c, err := p.client(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	open := make(chan error, 1)
	var stream peerpb.PeerService_ProposeClient
	go func() {
		var err error
		stream, err = c.Propose(ctx)
		open <- err
	}()
	select {
	case err = <-open:
	case <-time.After(peerOpenTimeout):
		err = fmt.Errorf("no answer within %v", peerOpenTimeout)
	}
	if err != nil {
		cancel()
		return nil, &peerError{kind: destination.ErrNotSent, node: node, msg: "opening the command stream: " + err.Error()}
	}
	s = &proposeStream{node: node, cancel: cancel, stream: stream, pending: make(map[uint64]func(*peerpb.ProposeResponse, error)), sent: make(map[uint64]time.Time)}
	p.mu.Lock()
	if old := p.streams[node]; old != nil {
		p.mu.Unlock()
		cancel()
		return old, nil
	}
	p.streams[node] = s
	p.mu.Unlock()
	go s.receive(p)
	go s.watch(ctx)
	return s, nil
}

// watch cancels the stream when a command waits too long for its answer;
// the receiver then fails every command in flight.
func (s *proposeStream) watch(ctx context.Context) {
	t := time.NewTicker(relayTimeout / 5)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		late := false
		for _, at := range s.sent {
			if time.Since(at) > relayTimeout {
				late = true
				break
			}
		}
		s.gaveUp = late
		s.mu.Unlock()
		if late {
			s.cancel()
			return
		}
	}
}

// peerKeepalive is how often an idle peer connection is pinged, and how
// long a ping may go unanswered before the connection is dropped.
const peerKeepalive = 5 * time.Second

// peerOpenTimeout bounds opening a stream to a peer.
const peerOpenTimeout = 3 * time.Second

func (s *proposeStream) receive(p *peers) {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.fail(p, err)
			return
		}
		s.mu.Lock()
		done := s.pending[resp.Id]
		delete(s.pending, resp.Id)
		delete(s.sent, resp.Id)
		s.mu.Unlock()
		if done != nil {
			done(resp, nil)
		}
	}
}

// fail ends the stream: every command in flight may or may not have been
// applied.
func (s *proposeStream) fail(p *peers, cause error) {
	p.mu.Lock()
	if p.streams[s.node] == s {
		delete(p.streams, s.node)
	}
	p.mu.Unlock()
	s.mu.Lock()
	s.dead = true
	pending := s.pending
	s.pending = nil
	why := "the command stream broke: " + cause.Error()
	if s.gaveUp {
		why = fmt.Sprintf("no answer within %v", relayTimeout)
	}
	s.mu.Unlock()
	s.cancel()
	for _, done := range pending {
		done(nil, &peerError{kind: destination.ErrOutcomeUnknown, node: s.node, msg: why})
	}
}

// propose sends one member command to node, in order with the others sent
// to it. done gets the host's answer, on the stream's reader goroutine.
func (p *peers) propose(node, memberName string, body proto.Message, done func(*peerpb.ProposeResponse, error)) {
	s, err := p.proposeStream(node)
	if err != nil {
		done(nil, err)
		return
	}
	cmd, err := fsm.NewCommand(body)
	if err != nil {
		done(nil, err)
		return
	}
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		done(nil, &peerError{kind: destination.ErrNotSent, node: node, msg: "the command stream is closed"})
		return
	}
	s.next++
	id := s.next
	s.pending[id] = done
	s.sent[id] = time.Now()
	s.mu.Unlock()
	s.sendMu.Lock()
	err = s.stream.Send(&peerpb.ProposeRequest{Id: id, Member: memberName, Command: cmd})
	if err != nil {
		// Under sendMu: gRPC forbids CloseSend during another Send.
		s.stream.CloseSend()
	}
	s.sendMu.Unlock()
	if err != nil {
		// The receiver fails the pending commands, this one included, as it
		// sees the stream end.
		s.cancel()
	}
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.streams {
		s.cancel()
	}
	for _, cc := range p.conns {
		cc.Close()
	}
	p.streams, p.conns = map[string]*proposeStream{}, map[string]*grpc.ClientConn{}
}

// toResult turns a peer's result back into the state machine's.
func toResult(r *peerpb.Result) fsm.Result {
	if r == nil {
		return fsm.Result{}
	}
	out := fsm.Result{Acked: int(r.Acked), Rejected: r.Rejected, Returned: int(r.Returned), Watermark: r.Watermark, Removed: int(r.Removed), Committed: r.Committed}
	if r.Reject != "" {
		out.Err = fsm.Rejection(r.Reject, r.RejectMessage)
	}
	for _, e := range r.Enqueued {
		out.Enqueued = append(out.Enqueued, fsm.Enqueued{ID: e.Id, Duplicate: e.Duplicate})
	}
	return out
}

// fromResult encodes a state machine result for a peer.
func fromResult(r fsm.Result) *peerpb.Result {
	out := &peerpb.Result{Acked: uint32(r.Acked), Rejected: r.Rejected, Returned: uint32(r.Returned), Watermark: r.Watermark, Removed: uint32(r.Removed), Committed: r.Committed}
	if r.Err != nil {
		out.Reject, out.RejectMessage = fsm.RejectionCode(r.Err), r.Err.Error()
	}
	for _, e := range r.Enqueued {
		out.Enqueued = append(out.Enqueued, &peerpb.Enqueued{Id: e.ID, Duplicate: e.Duplicate})
	}
	return out
}
