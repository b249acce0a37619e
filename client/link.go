package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// link is one stream to one node. A Connection lives on a link; when the
// link is lost the connection opens another (reconnect.go) and re-creates
// its sessions and consumers on it.
type link struct {
	c    *Connection
	gen  uint64 // which link of the connection this is, from 1
	addr string // as dialled
	conn *pooledConn
	api  clientpb.ClientServiceClient
	// stream is set once, before readLoop starts.
	stream clientpb.ClientService_ConnectClient
	cancel context.CancelFunc
	// id, node and peers come from the Hello reply; they are written under
	// mu, and read without it only once the link is installed.
	id, node string
	peers    []string
	// maxFrame is the largest frame the server reads (0: it takes sends
	// only as unary calls).
	maxFrame int

	sendMu sync.Mutex
	// sendClosed is set, under sendMu, once the stream is half-closed.
	sendClosed bool

	mu          sync.Mutex
	nextRequest uint64
	replies     map[uint64]func(*clientpb.Reply, error)
	downErr     error // why the link ended; set once
	down        chan struct{}
	readDone    chan struct{}
	goodbye     *clientpb.Goodbye

	// lastHeard is when the last frame came, in Unix nanoseconds.
	lastHeard atomic.Int64
}

// silenceLimit is how long a link waits without a frame (the server sends a
// heartbeat every second) before it counts the server as lost. It is
// shorter than the cluster's failure detection (about 5 s), so a client of
// a paused or cut-off node drops its prefetched messages before the cluster
// releases them to other sessions.
const silenceLimit = 3 * time.Second

// grpcDial connects to addr, over TLS when o.TLS is set, with o.User's
// password on every call when it is.
func grpcDial(addr string, o *Options) (*grpc.ClientConn, error) {
	if err := o.checkCredentials(); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	var opts []grpc.DialOption
	if o.User != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(basicAuth{o.User, o.Password, o.Source}))
	}
	return grpc.NewClient(addr, append(append(transport.DialOptions(), opts...),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxWireBytes), grpc.MaxCallSendMsgSize(maxWireBytes)),
	)...)
}

// openLink connects to addr and says Hello, with clientID. The link's
// frames go to c from the moment it opens, though c uses it for the
// application's requests only once it is installed (or, for a send link,
// once direct.go holds it).
func (c *Connection) openLink(ctx context.Context, addr string, gen uint64, clientID string) (*link, error) {
	pc, err := nodeConns.acquire(addr, &c.opts)
	if err != nil {
		return nil, err
	}
	cc := pc.cc
	sctx, cancel := context.WithCancel(context.Background())
	l := &link{
		c: c, gen: gen, addr: addr, conn: pc, api: clientpb.NewClientServiceClient(cc), cancel: cancel,
		replies: make(map[uint64]func(*clientpb.Reply, error)), down: make(chan struct{}), readDone: make(chan struct{}),
	}
	fail := func(err error) (*link, error) {
		cancel()
		nodeConns.release(pc)
		return nil, err
	}
	// The stream lives as long as the link; only its opening is bounded.
	opened := make(chan error, 1)
	go func() {
		s, err := l.api.Connect(sctx)
		l.stream = s
		opened <- err
	}()
	dctx, dcancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer dcancel()
	// A node that leaves the stream or the Hello unanswered for DialTimeout
	// (not a caller that gave up) gets a new connection for the next link.
	unanswered := func() {
		if dctx.Err() != nil && ctx.Err() == nil {
			nodeConns.broke(pc)
		}
	}
	select {
	case err := <-opened:
		if cause := nodeConns.abandonedFor(pc); err != nil && cause != nil {
			return fail(cause) // closed under the link as it opened
		}
		if err != nil {
			return fail(transport.FromStatus(err))
		}
	case <-dctx.Done():
		unanswered()
		return fail(fmt.Errorf("no answer within %v", c.opts.DialTimeout))
	}
	l.lastHeard.Store(time.Now().UnixNano())
	go l.readLoop()
	// Until the Hello is answered, DialTimeout bounds the wait (a node
	// checking a password says nothing meanwhile); the silence of an open
	// link is watched from then on.
	reply, err := l.request(dctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{ClientId: clientID, ClientInstance: c.instance}}})
	if err != nil {
		if dctx.Err() != nil && ctx.Err() == nil {
			err = l.lostErr(fmt.Errorf("no answer within %v", c.opts.DialTimeout))
		}
		unanswered()
		l.close(err)
		return nil, err
	}
	h := reply.GetHello()
	// Under mu: the reader may be reporting the link lost meanwhile.
	l.mu.Lock()
	l.id, l.node, l.peers, l.maxFrame = h.ConnectionId, h.NodeId, h.ClientAddrs, int(h.MaxFrameBytes)
	l.mu.Unlock()
	l.lastHeard.Store(time.Now().UnixNano())
	go l.watchSilence()
	return l, nil
}

func (l *link) readLoop() {
	defer close(l.readDone)
	for {
		f, err := l.stream.Recv()
		if err != nil {
			if cause := nodeConns.abandonedFor(l.conn); cause != nil {
				l.c.linkDown(l, cause)
				return
			}
			if !errors.Is(err, io.EOF) && status.Code(err) != codes.Canceled && !transport.ServerAnswered(err) {
				// Not the node ending the stream, nor the client: the
				// connection under it failed.
				nodeConns.broke(l.conn)
			}
			cause := transport.FromStatus(err)
			if transport.NoProgress(err) {
				cause = stuckError{cause}
			}
			l.c.linkDown(l, cause)
			return
		}
		l.lastHeard.Store(time.Now().UnixNano())
		l.conn.heard()
		switch fr := f.Frame.(type) {
		case *clientpb.ServerFrame_Reply:
			l.mu.Lock()
			done := l.replies[fr.Reply.RequestId]
			delete(l.replies, fr.Reply.RequestId)
			l.mu.Unlock()
			if done != nil {
				done(fr.Reply, transport.FromProto(fr.Reply.Error))
			}
		case *clientpb.ServerFrame_Deliveries:
			if k := l.c.consumer(fr.Deliveries.Consumer); k != nil {
				k.deliver(l.gen, fr.Deliveries.Messages)
			}
		case *clientpb.ServerFrame_ConsumerClosed:
			if k := l.c.consumer(fr.ConsumerClosed.Consumer); k != nil {
				k.failOn(l.gen, transport.FromProto(fr.ConsumerClosed.Error))
			}
		case *clientpb.ServerFrame_Goodbye:
			// Nothing more goes out on this link: the node refuses the
			// sends that came before the half-close, then ends the stream.
			// A send that sees the Goodbye finds the stream half-closed.
			l.sendMu.Lock()
			l.mu.Lock()
			l.goodbye = fr.Goodbye
			l.mu.Unlock()
			l.closeSendLocked()
			l.sendMu.Unlock()
		}
	}
}

// watchSilence counts the server as lost when it has not been heard from
// for silenceLimit.
func (l *link) watchSilence() {
	t := time.NewTicker(silenceLimit / 6)
	defer t.Stop()
	for {
		select {
		case <-l.down:
			return
		case <-t.C:
		}
		if quiet := time.Since(time.Unix(0, l.lastHeard.Load())); quiet > silenceLimit {
			cause := fmt.Errorf("no word from the server for %v", quiet.Round(time.Millisecond))
			if l.conn.quiet() > silenceLimit {
				nodeConns.abandon(l.conn, cause) // silent on every link
			}
			l.c.linkDown(l, cause)
			return
		}
	}
}

// close ends the link: requests waiting on it fail with err. It reports
// false if the link had already ended.
func (l *link) close(err error) bool {
	l.mu.Lock()
	if l.downErr != nil {
		l.mu.Unlock()
		return false
	}
	l.downErr = err
	replies := l.replies
	l.replies = nil
	close(l.down)
	l.mu.Unlock()
	l.cancel()
	nodeConns.release(l.conn)
	for _, done := range replies {
		done(nil, err)
	}
	return true
}

// stuckError is the cause of a link's end that any new link would meet
// again (transport.NoProgress): its connection does not reconnect.
type stuckError struct{ error }

func (e stuckError) Unwrap() error { return e.error }

// lostErr is the error requests on a lost link fail with. A stuck link's
// is not ErrLostServer: no node was lost, and reconnecting would not help.
func (l *link) lostErr(cause error) error {
	l.mu.Lock()
	id, node := l.id, l.node
	l.mu.Unlock()
	if errors.As(cause, new(stuckError)) {
		if id == "" {
			return fmt.Errorf("cairn: connection to %s refused: %w", l.addr, cause)
		}
		return fmt.Errorf("cairn: connection %s to node %s failed, and a reconnect would fail the same way, so it does not reconnect: %w", id, node, cause)
	}
	if id == "" {
		return fmt.Errorf("%w: connection to %s lost before it was opened: %w", ErrLostServer, l.addr, cause)
	}
	return fmt.Errorf("%w: connection %s to node %s lost: %w", ErrLostServer, id, node, cause)
}

// saidGoodbye reports whether the node said it is ending the link.
func (l *link) saidGoodbye() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.goodbye != nil
}

func (l *link) isDown() bool {
	select {
	case <-l.down:
		return true
	default:
		return false
	}
}

// send writes a frame; gRPC streams take one writer at a time.
func (l *link) send(f *clientpb.ClientFrame) error {
	if l.isDown() {
		return l.lostErr(ErrLostServer)
	}
	l.sendMu.Lock()
	err := errSendClosed
	if !l.sendClosed {
		err = l.stream.Send(f)
	}
	l.sendMu.Unlock()
	if err != nil {
		if errors.Is(err, io.EOF) {
			// The node ended the stream (a refused Hello): why is the
			// status its reader gets.
			select {
			case <-l.readDone:
				l.mu.Lock()
				down := l.downErr
				l.mu.Unlock()
				if down != nil {
					return down
				}
			case <-time.After(time.Second):
			}
		}
		return l.lostErr(err)
	}
	return nil
}

// closeSend half-closes the stream: later frames fail with errSendClosed.
func (l *link) closeSend() {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	l.closeSendLocked()
}

func (l *link) closeSendLocked() {
	l.sendClosed = true
	_ = l.stream.CloseSend()
}

// errSendClosed fails a frame on a half-closed link: its node said
// Goodbye, or the client is closing the link.
var errSendClosed = errors.New("the link is closing (its node said goodbye, or the client closed it)")

// unsentError is the error of a request that never left: the link was
// down or half-closed before the frame was written.
type unsentError struct{ error }

func (e unsentError) Unwrap() error { return e.error }

// requestAsync sends a frame; done gets its reply (with the reply's error,
// typed) or the error that ended the link, an unsentError if the frame was
// not written. It runs on the link's reader goroutine and must not block.
func (l *link) requestAsync(f *clientpb.ClientFrame, done func(*clientpb.Reply, error)) {
	l.mu.Lock()
	if l.downErr != nil {
		err := l.downErr
		l.mu.Unlock()
		done(nil, unsentError{err})
		return
	}
	l.nextRequest++
	f.RequestId = l.nextRequest
	l.replies[f.RequestId] = done
	l.mu.Unlock()
	if err := l.send(f); err != nil {
		if l.forget(f.RequestId) {
			// A failed stream Send wrote nothing: gRPC queues a message
			// whole or not at all (and ends the stream when it fails).
			done(nil, unsentError{err})
		}
	}
}

// request sends a frame and waits for its reply.
func (l *link) request(ctx context.Context, f *clientpb.ClientFrame) (*clientpb.Reply, error) {
	type answer struct {
		r   *clientpb.Reply
		err error
	}
	ch := make(chan answer, 1)
	l.requestAsync(f, func(r *clientpb.Reply, err error) { ch <- answer{r, err} })
	select {
	case a := <-ch:
		return a.r, a.err
	case <-ctx.Done():
		l.forget(f.RequestId)
		return nil, ctx.Err()
	}
}

// forget drops a request's callback; false if it was already called.
func (l *link) forget(id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.replies[id]
	delete(l.replies, id)
	return ok
}
