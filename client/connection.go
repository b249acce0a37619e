package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// maxWireBytes is gRPC's own bound on a frame, the only one the client
// sets: the server's frame limit, derived from its largest message, bounds
// what it pushes, and the client checks what it sends against it
// (HelloResult.max_frame_bytes), so no second number has to agree with
// the server's setting. A frame over the server's limit is refused by the
// server with ErrMessageTooLarge.
const maxWireBytes = math.MaxInt32

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
	// Transacted sessions send and receive in transactions: sends are
	// invisible and receives held until Session.Commit, which makes all of
	// them happen at once or none; Session.Rollback undoes them.
	Transacted
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
	case Transacted:
		return clientpb.AckMode_ACK_MODE_TRANSACTED
	}
	return clientpb.AckMode_ACK_MODE_UNKNOWN
}

// Connection is a JMS connection to a Cairn cluster. It lives on a stream
// to one node (its front-end) and, when it loses that node, reconnects to
// another one as its ReconnectPolicy says (see the package documentation).
type Connection struct {
	opts Options
	// instance names this Connection to the cluster, the same across its
	// reconnects: a reconnect takes its client id over from the connection
	// it replaces, while any other connection is refused it.
	instance string

	// objects is held shared while the application creates or closes a
	// session or consumer, and exclusively while a reconnect re-creates
	// them, so none is created twice or missed.
	objects sync.RWMutex

	mu           sync.Mutex
	link         *link // nil while reconnecting and once closed
	gen          uint64
	addrs        []string // where to reconnect: the dialled ones and those learned
	id, node     string   // of the last link
	reconnects   int
	changed      chan struct{}
	sessions     map[uint64]*Session
	consumers    map[uint64]*Consumer
	nextSession  uint64
	nextConsumer uint64
	onException  func(error)
	closing      bool  // Close has begun: a stream end is not a loss
	err          error // set once the connection is closed or lost for good
	done         chan struct{}
	// closed is closed when Close begins or the connection ends for good.
	closed chan struct{}

	// Credit is sent by its own goroutine: the reader, which frees room
	// (stale or expired deliveries), must never wait on the stream's writer.
	creditMu   sync.Mutex
	credits    map[creditKey]uint32
	creditWake chan struct{}

	// direct holds the send links to the hosts of members (direct.go).
	direct sendLinks
}

// creditKey names a consumer on one link: credit meant for a link that was
// lost is never sent on the next one.
type creditKey struct{ consumer, gen uint64 }

// Dial connects to the first node of addrs that answers. Later reconnects
// also try the nodes the cluster names.
func Dial(ctx context.Context, addrs []string, opts Options) (*Connection, error) {
	opts.setDefaults()
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no server address", ErrUnavailable)
	}
	c := &Connection{
		opts: opts, instance: NewMessageID(), addrs: addrs, changed: make(chan struct{}),
		sessions: make(map[uint64]*Session), consumers: make(map[uint64]*Consumer), done: make(chan struct{}), closed: make(chan struct{}),
		credits: make(map[creditKey]uint32), creditWake: make(chan struct{}, 1),
		direct: sendLinks{routes: make(map[string]route), byAddr: make(map[string]*sendLink), held: make(map[string]*holdBack)},
	}
	var errs []string
	kind := ErrUnavailable
	for _, addr := range addrs {
		l, err := c.openPreferred(ctx, addr, 1, "")
		if err == nil {
			if c.install(l) {
				go c.creditLoop()
				return c, nil
			}
			// Lost between its Hello and now: nothing would reconnect it.
			err = fmt.Errorf("%w: the link ended as it was opened", ErrLostServer)
		}
		if errors.Is(err, ErrClientIDInUse) || errors.Is(err, ErrInvalidName) || errors.Is(err, ErrNotAuthenticated) || errors.Is(err, ErrNotAuthorised) || errors.Is(err, ErrInvalidArgument) || ctx.Err() != nil {
			return nil, err
		}
		if errors.Is(err, ErrLimitReached) {
			kind = ErrLimitReached // another node may have room
		}
		errs = append(errs, fmt.Sprintf("%s: %v", addr, err))
	}
	return nil, fmt.Errorf("%w: cannot connect to any server (%s)", kind, strings.Join(errs, "; "))
}

// install makes l the connection's link; c.mu is not held. It reports false,
// and installs nothing, if l was lost meanwhile or the connection is closing.
func (c *Connection) install(l *link) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	// linkDown marks l down before it looks at c.link, so either it sees l
	// installed or l is seen down here.
	if l.isDown() || c.closing || c.err != nil {
		return false
	}
	if c.id != "" {
		c.reconnects++
	}
	c.link, c.gen, c.id, c.node = l, l.gen, l.id, l.node
	c.addrs = mergeAddrs(l.peers, c.addrs)
	c.signalLocked()
	return true
}

// signalLocked wakes everything waiting for the connection's state to
// change; c.mu is held.
func (c *Connection) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// ID is the id, on the server, of the connection's current (or last) link.
func (c *Connection) ID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// Node is the id of the node serving the connection (the last one, while
// it reconnects).
func (c *Connection) Node() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.node
}

// ClientID is the connection's client id.
func (c *Connection) ClientID() string { return c.opts.ClientID }

// SetExceptionListener registers fn to be called with an error wrapping
// ErrLostServer each time the connection loses its node, whether or not it
// then reconnects, and once more if it gives up reconnecting. fn runs on
// its own goroutine and may call back into the library.
func (c *Connection) SetExceptionListener(fn func(error)) {
	c.mu.Lock()
	c.onException = fn
	c.mu.Unlock()
}

func (c *Connection) consumer(no uint64) *Consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumers[no]
}

// grant queues credit for a consumer on link gen; creditLoop sends it.
func (c *Connection) grant(consumer, gen uint64, n int) {
	c.creditMu.Lock()
	c.credits[creditKey{consumer, gen}] += uint32(n)
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
		c.credits = make(map[creditKey]uint32)
		c.creditMu.Unlock()
		l := c.current()
		for key, n := range credits {
			if l == nil || key.gen != l.gen {
				continue // for a lost link: the consumer is re-created with fresh credit
			}
			_ = l.send(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_Credit{Credit: &clientpb.Credit{Consumer: key.consumer, Messages: n}}})
		}
	}
}

// current is the connection's link, nil while it reconnects.
func (c *Connection) current() *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link
}

// state is the connection's link (nil while reconnecting), a channel
// closed at its next change, and its final error if it has one.
func (c *Connection) state() (*link, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link, c.changed, c.err
}

// awaitLink returns the connection's link, waiting for a reconnect if one
// is under way, at most until ctx ends or for ReconnectBlockingTime.
func (c *Connection) awaitLink(ctx context.Context) (*link, error) {
	var timeout <-chan time.Time
	for {
		l, changed, err := c.state()
		switch {
		case err != nil:
			return nil, err
		case l != nil && !l.isDown():
			return l, nil
		case timeout == nil:
			// No link, or one just ended whose reporter has yet to take it
			// out and start the reconnect: wait for either.
			t := time.NewTimer(c.opts.ReconnectBlockingTime)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, c.reconnectingErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// stoppingLinkWait bounds the wait for a stopping node to end its link: it
// answers its sends in flight for up to 2 s, says Goodbye, and ends the
// stream once it has released the connection's sessions (the link's 3 s
// silence limit usually ends it first when that takes long).
const stoppingLinkWait = 5 * time.Second

// awaitLinkEnd waits for link l, whose node is stopping, to end; after
// stoppingLinkWait the connection gives up on it. It fails only when ctx
// ends.
func (c *Connection) awaitLinkEnd(ctx context.Context, l *link, cause error) error {
	t := time.NewTimer(stoppingLinkWait)
	defer t.Stop()
	select {
	case <-l.down:
	case <-t.C:
		c.linkDown(l, cause)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (c *Connection) reconnectingErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Errorf("%w: the connection lost node %s and is still reconnecting", ErrLostServer, c.node)
}

// request sends a frame on the connection's link, waiting for a reconnect
// in progress as awaitLink does, and waits for the reply.
func (c *Connection) request(ctx context.Context, f *clientpb.ClientFrame) (*clientpb.Reply, error) {
	l, err := c.awaitLink(ctx)
	if err != nil {
		return nil, err
	}
	return l.request(ctx, f)
}

// requestAsync sends a frame on the current link without waiting for a
// reconnect: while there is no link, done gets ErrLostServer at once.
func (c *Connection) requestAsync(f *clientpb.ClientFrame, done func(*clientpb.Reply, error)) {
	l, _, err := c.state()
	switch {
	case err != nil:
		done(nil, err)
	case l == nil:
		done(nil, c.reconnectingErr())
	default:
		l.requestAsync(f, done)
	}
}

// shutdown ends the connection for good: everything waiting on it fails
// with err.
func (c *Connection) shutdown(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	l := c.link
	c.link = nil
	consumers := make([]*Consumer, 0, len(c.consumers))
	for _, k := range c.consumers {
		consumers = append(consumers, k)
	}
	close(c.done)
	if !c.closing {
		close(c.closed)
	}
	c.signalLocked()
	c.mu.Unlock()
	if l != nil {
		l.close(err)
	}
	for _, l := range c.closeSendLinks() {
		l.close(err)
	}
	for _, k := range consumers {
		k.fail(err)
	}
}

// Close ends the connection, and any reconnect under way: pending automatic
// acknowledgements are sent, and every message the connection's sessions
// held unacknowledged returns to pending on the server, marked redelivered.
func (c *Connection) Close() error {
	c.mu.Lock()
	if c.err != nil || c.closing {
		c.mu.Unlock()
		return nil
	}
	c.closing = true
	close(c.closed)
	l := c.link
	sessions := make([]*Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.signalLocked()
	c.mu.Unlock()
	if l == nil {
		// Reconnecting: the lost node released the sessions already.
		c.shutdown(ErrClosed)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	var firstErr error
	for _, s := range sessions {
		if err := s.flushAcks(ctx); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	links := append(c.closeSendLinks(), l)
	l.closeSend()
	// The server releases the sessions when it sees the stream end; wait
	// for it to close its side so the release has happened when Close
	// returns, and the sends on the send links are answered.
	for _, l := range links {
		select {
		case <-l.readDone:
		case <-ctx.Done():
		}
	}
	c.shutdown(ErrClosed)
	for _, l := range links {
		l.close(ErrClosed)
	}
	return firstErr
}

func (c *Connection) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Session opens a session with the given acknowledge mode.
func (c *Connection) Session(mode AckMode) (*Session, error) {
	if mode.wire() == clientpb.AckMode_ACK_MODE_UNKNOWN {
		return nil, fmt.Errorf("%w: acknowledge mode %d", ErrInvalidArgument, mode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	var s *Session
	err := c.createOnLink(ctx, func(l *link) error {
		c.mu.Lock()
		c.nextSession++
		s = newSession(c, c.nextSession, mode, l.gen)
		c.sessions[s.no] = s
		c.mu.Unlock()
		_, err := l.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: s.no, AckMode: mode.wire()}}})
		if err != nil {
			c.mu.Lock()
			delete(c.sessions, s.no)
			c.mu.Unlock()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// createOnLink creates a server-side object with fn on the connection's
// link. If that link is lost under fn (which then must have undone its
// registration), it tries again on the next link, until ctx ends: a
// reconnect re-creates only the objects registered when it runs.
func (c *Connection) createOnLink(ctx context.Context, fn func(*link) error) error {
	for {
		l, err := c.awaitLink(ctx)
		if err != nil {
			return err
		}
		c.objects.RLock()
		err = fn(l)
		c.objects.RUnlock()
		if err == nil || !errors.Is(err, ErrLostServer) || ctx.Err() != nil {
			return err
		}
		if !l.isDown() {
			if !errors.Is(err, errSendClosed) {
				return err
			}
			// The node said Goodbye: the next link takes the object.
			if err := c.awaitLinkEnd(ctx, l, err); err != nil {
				return err
			}
		}
	}
}

// Reconnects is how many times the connection lost its node and
// reconnected.
func (c *Connection) Reconnects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnects
}
