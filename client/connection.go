package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// maxWireBytes bounds what the client sends and accepts on the wire: the
// largest message a server accepts by default (1 MiB) has room, and a larger
// one is refused by the server with ErrMessageTooLarge.
const maxWireBytes = 64 << 20

// AckMode is a session's acknowledge mode.
type AckMode int

const (
	// AutoAck acknowledges each message as Receive returns it, or as its
	// listener returns.
	AutoAck AckMode = iota + 1
	// ClientAck acknowledges, on Message.Ack, every message the session has
	// handed out so far.
	ClientAck
	// DupsOK acknowledges lazily, in batches: a failure may redeliver a few
	// messages, marked redelivered.
	DupsOK
	// IndividualAck acknowledges, on Message.Ack, that message only.
	IndividualAck
)

func (m AckMode) wire() clientpb.AckMode {
	switch m {
	case AutoAck:
		return clientpb.AckMode_ACK_MODE_AUTO
	case ClientAck:
		return clientpb.AckMode_ACK_MODE_CLIENT
	case DupsOK:
		return clientpb.AckMode_ACK_MODE_DUPS_OK
	case IndividualAck:
		return clientpb.AckMode_ACK_MODE_INDIVIDUAL
	}
	return clientpb.AckMode_ACK_MODE_UNKNOWN
}

// Connection is a connection to one node of a Cairn cluster.
type Connection struct {
	opts   Options
	cc     *grpc.ClientConn
	api    clientpb.ClientServiceClient
	stream clientpb.ClientService_ConnectClient
	cancel context.CancelFunc
	// ID and Node are the connection's id and the node serving it.
	id, node string

	sendMu sync.Mutex

	mu           sync.Mutex
	nextRequest  uint64
	replies      map[uint64]func(*clientpb.Reply, error)
	sessions     map[uint64]*Session
	consumers    map[uint64]*Consumer
	nextSession  uint64
	nextConsumer uint64
	onException  func(error)
	closing      bool  // Close has begun: a stream end is not a loss
	err          error // set once the connection is closed or lost
	done         chan struct{}
	readDone     chan struct{}

	// Credit is sent by its own goroutine: the reader, which frees room
	// (stale or expired deliveries), must never wait on the stream's writer.
	creditMu   sync.Mutex
	credits    map[uint64]uint32
	creditWake chan struct{}

	// lastHeard is when the last frame came, in Unix nanoseconds.
	lastHeard atomic.Int64
}

// silenceLimit is how long a connection waits without a frame (the server
// sends a heartbeat every second) before it counts the server as lost. It is
// shorter than the cluster's failure detection (about 5 s), so a client of
// a paused or cut-off node drops its prefetched messages before the cluster
// releases them to other sessions.
const silenceLimit = 3 * time.Second

// Dial connects to the first node of addrs that answers.
func Dial(ctx context.Context, addrs []string, opts Options) (*Connection, error) {
	opts.setDefaults()
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no server address", ErrUnavailable)
	}
	var errs []string
	for _, addr := range addrs {
		c, err := dialOne(ctx, addr, opts)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrClientIDInUse) || ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, fmt.Sprintf("%s: %v", addr, err))
	}
	return nil, fmt.Errorf("%w: cannot connect to any server (%s)", ErrUnavailable, strings.Join(errs, "; "))
}

func grpcDial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxWireBytes), grpc.MaxCallSendMsgSize(maxWireBytes)),
	)
}

func dialOne(ctx context.Context, addr string, opts Options) (*Connection, error) {
	cc, err := grpcDial(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	c := &Connection{
		opts: opts, cc: cc, api: clientpb.NewClientServiceClient(cc), cancel: cancel,
		replies: make(map[uint64]func(*clientpb.Reply, error)), sessions: make(map[uint64]*Session),
		consumers: make(map[uint64]*Consumer), done: make(chan struct{}), readDone: make(chan struct{}),
		credits: make(map[uint64]uint32), creditWake: make(chan struct{}, 1),
	}
	fail := func(err error) (*Connection, error) {
		cancel()
		cc.Close()
		return nil, err
	}
	// The stream lives as long as the connection; only its opening is bounded.
	opened := make(chan error, 1)
	go func() {
		s, err := c.api.Connect(sctx)
		c.stream = s
		opened <- err
	}()
	dctx, dcancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer dcancel()
	select {
	case err := <-opened:
		if err != nil {
			return fail(transport.FromStatus(err))
		}
	case <-dctx.Done():
		return fail(fmt.Errorf("no answer within %v", opts.DialTimeout))
	}
	c.lastHeard.Store(time.Now().UnixNano())
	go c.readLoop()
	go c.creditLoop()
	go c.watchSilence()
	reply, err := c.request(dctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{ClientId: opts.ClientID}}})
	if err != nil {
		c.shutdown(err)
		cc.Close()
		return nil, err
	}
	c.id, c.node = reply.GetHello().ConnectionId, reply.GetHello().NodeId
	return c, nil
}

// ID is the connection's id on the server.
func (c *Connection) ID() string { return c.id }

// Node is the id of the node serving the connection.
func (c *Connection) Node() string { return c.node }

// ClientID is the connection's client id.
func (c *Connection) ClientID() string { return c.opts.ClientID }

// SetExceptionListener registers fn to be called, once, when the connection
// is lost; the error wraps ErrLostServer.
func (c *Connection) SetExceptionListener(fn func(error)) {
	c.mu.Lock()
	c.onException = fn
	c.mu.Unlock()
}

func (c *Connection) readLoop() {
	defer close(c.readDone)
	for {
		f, err := c.stream.Recv()
		if err != nil {
			c.lost(err)
			return
		}
		c.lastHeard.Store(time.Now().UnixNano())
		switch fr := f.Frame.(type) {
		case *clientpb.ServerFrame_Reply:
			c.mu.Lock()
			done := c.replies[fr.Reply.RequestId]
			delete(c.replies, fr.Reply.RequestId)
			c.mu.Unlock()
			if done != nil {
				done(fr.Reply, transport.FromProto(fr.Reply.Error))
			}
		case *clientpb.ServerFrame_Deliveries:
			c.mu.Lock()
			k := c.consumers[fr.Deliveries.Consumer]
			c.mu.Unlock()
			if k != nil {
				k.deliver(fr.Deliveries.Messages)
			}
		case *clientpb.ServerFrame_ConsumerClosed:
			c.mu.Lock()
			k := c.consumers[fr.ConsumerClosed.Consumer]
			c.mu.Unlock()
			if k != nil {
				k.fail(transport.FromProto(fr.ConsumerClosed.Error))
			}
		}
	}
}

// watchSilence counts the server as lost when it has not been heard from
// for silenceLimit.
func (c *Connection) watchSilence() {
	t := time.NewTicker(silenceLimit / 6)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if quiet := time.Since(time.Unix(0, c.lastHeard.Load())); quiet > silenceLimit {
			c.lost(fmt.Errorf("no word from the server for %v", quiet.Round(time.Millisecond)))
			return
		}
	}
}

// lost ends a connection whose stream broke.
func (c *Connection) lost(err error) {
	c.mu.Lock()
	closedByUs := c.err != nil || c.closing
	listener := c.onException
	c.mu.Unlock()
	if closedByUs {
		return
	}
	lostErr := fmt.Errorf("%w: connection to node %s lost: %w", ErrLostServer, c.node, transport.FromStatus(err))
	c.shutdown(lostErr)
	if listener != nil {
		// Not on the reader: the listener may call back into the library.
		go listener(lostErr)
	}
}

// grant queues credit for a consumer; creditLoop sends it.
func (c *Connection) grant(consumer uint64, n int) {
	c.creditMu.Lock()
	c.credits[consumer] += uint32(n)
	c.creditMu.Unlock()
	select {
	case c.creditWake <- struct{}{}:
	default:
	}
}

func (c *Connection) creditLoop() {
	for {
		select {
		case <-c.done:
			return
		case <-c.creditWake:
		}
		c.creditMu.Lock()
		credits := c.credits
		c.credits = make(map[uint64]uint32)
		c.creditMu.Unlock()
		for no, n := range credits {
			if c.send(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_Credit{Credit: &clientpb.Credit{Consumer: no, Messages: n}}}) != nil {
				return
			}
		}
	}
}

// shutdown fails everything waiting on the connection with err.
func (c *Connection) shutdown(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	replies := c.replies
	c.replies = map[uint64]func(*clientpb.Reply, error){}
	consumers := make([]*Consumer, 0, len(c.consumers))
	for _, k := range c.consumers {
		consumers = append(consumers, k)
	}
	close(c.done)
	c.mu.Unlock()
	for _, done := range replies {
		done(nil, err)
	}
	for _, k := range consumers {
		k.fail(err)
	}
	c.cancel()
}

// Close ends the connection: pending automatic acknowledgements are sent,
// and every message the connection's sessions held unacknowledged returns to
// pending on the server, marked redelivered.
func (c *Connection) Close() error {
	c.mu.Lock()
	if c.err != nil || c.closing {
		c.mu.Unlock()
		// Lost already: only the gRPC connection is left to release.
		c.cc.Close()
		return nil
	}
	c.closing = true
	sessions := make([]*Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	var firstErr error
	for _, s := range sessions {
		if err := s.flushAcks(ctx); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	c.sendMu.Lock()
	_ = c.stream.CloseSend()
	c.sendMu.Unlock()
	// The server releases the sessions when it sees the stream end; wait
	// for it to close its side so the release has happened when Close returns.
	select {
	case <-c.readDone:
	case <-ctx.Done():
	}
	c.shutdown(ErrClosed)
	c.cc.Close()
	return firstErr
}

func (c *Connection) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// send writes a frame; gRPC streams take one writer at a time.
func (c *Connection) send(f *clientpb.ClientFrame) error {
	if err := c.closedErr(); err != nil {
		return err
	}
	c.sendMu.Lock()
	err := c.stream.Send(f)
	c.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLostServer, err)
	}
	return nil
}

// requestAsync sends a frame; done gets its reply (with the reply's error,
// typed) or the error that ended the connection. It runs on the connection's
// reader goroutine and must not block.
func (c *Connection) requestAsync(f *clientpb.ClientFrame, done func(*clientpb.Reply, error)) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		done(nil, err)
		return
	}
	c.nextRequest++
	f.RequestId = c.nextRequest
	c.replies[f.RequestId] = done
	c.mu.Unlock()
	if err := c.send(f); err != nil {
		if c.forget(f.RequestId) {
			done(nil, err)
		}
	}
}

// request sends a frame and waits for its reply.
func (c *Connection) request(ctx context.Context, f *clientpb.ClientFrame) (*clientpb.Reply, error) {
	type answer struct {
		r   *clientpb.Reply
		err error
	}
	ch := make(chan answer, 1)
	c.requestAsync(f, func(r *clientpb.Reply, err error) { ch <- answer{r, err} })
	select {
	case a := <-ch:
		return a.r, a.err
	case <-ctx.Done():
		c.forget(f.RequestId)
		return nil, ctx.Err()
	}
}

// forget drops a request's callback; false if it was already called.
func (c *Connection) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.replies[id]
	delete(c.replies, id)
	return ok
}

// Session opens a session with the given acknowledge mode.
func (c *Connection) Session(mode AckMode) (*Session, error) {
	if mode.wire() == clientpb.AckMode_ACK_MODE_UNKNOWN {
		return nil, fmt.Errorf("%w: acknowledge mode %d", ErrInvalidArgument, mode)
	}
	c.mu.Lock()
	c.nextSession++
	s := newSession(c, c.nextSession, mode)
	c.sessions[s.no] = s
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	if _, err := c.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: s.no, AckMode: mode.wire()}}}); err != nil {
		c.mu.Lock()
		delete(c.sessions, s.no)
		c.mu.Unlock()
		return nil, err
	}
	return s, nil
}
