package frontend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairnmq/cairn/fsm/selector"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Consumer prefetch bounds: 0 asks for the default.
const (
	DefaultPrefetch = 64
	MaxPrefetch     = 10_000
	// helloTimeout bounds the wait for a new connection's first frame.
	helloTimeout = 10 * time.Second
	// releaseTimeout bounds the wait for the first attempt to release a
	// dropped connection's sessions; a failed release goes on without it.
	releaseTimeout = 10 * time.Second
)

// Connections is the front-end's registry of client connections.
type Connections struct {
	n    Node
	mu   sync.Mutex
	byID map[string]*connection
	// byHost counts the connections from each client host.
	byHost map[string]int
	ending sync.WaitGroup
}

// NewConnections is the registry of the client connections node n serves.
func NewConnections(n Node) *Connections {
	return &Connections{n: n, byID: make(map[string]*connection), byHost: make(map[string]int)}
}

// connection is one client connection (a Connect stream): its sessions and
// consumers, and the outbox its replies and deliveries are written from.
type connection struct {
	n      Node
	conns  *Connections
	id     string
	ctx    context.Context
	cancel context.CancelFunc
	out    *transport.Outbox[*clientpb.ServerFrame]
	// remote and since are what an operator listing connections sees.
	remote string
	since  time.Time

	// sends are the Send frames being served; once closing is set (under
	// mu) none is added, so goodbye can wait for them.
	sends sync.WaitGroup

	mu        sync.Mutex
	closing   error // why Send frames are refused: the connection is ending
	clientID  string
	sessions  map[uint64]*session
	consumers map[uint64]*consumer
	// consumersMade numbers the consumers made, which name them to
	// members' hosts: a client that reuses a closed consumer's number
	// makes another consumer, whose deliveries are its own.
	consumersMade uint64
	closed        bool
	// abandoned connections end without releasing their sessions (Crash).
	abandoned bool
	// temporary are the temporary queues the connection made, deleted when
	// it ends.
	temporary []string
}

type session struct {
	no   uint64
	id   string
	mode clientpb.AckMode
	// tx holds a transacted session's sends until its commit.
	tx *txBuffer
	// members are the members the session is open on, by address.
	members   map[string]bool
	consumers map[uint64]*consumer
	// recovers counts the session's recovers: each names its attempt by it
	// (fsmpb.Recover.attempt), so a resent one cannot recover twice.
	recovers uint64
}

// consumer is a client's consumer. It is registered as soon as its creation
// is asked for, so a close that overtakes the creation stops it; member and
// att are set once it is attached (under c.mu).
type consumer struct {
	no      uint64
	id      string
	session *session
	member  string
	att     *attachment
	closed  bool
	// selector, if set, keeps from the consumer the messages it does not
	// select; its host evaluates it.
	selector *selector.Selector
	// subscription is the non-durable subscription that is the consumer's
	// own, deleted when it closes.
	subscription string
}

// detach stops deliveries to the consumer, and deletes its own
// subscription; c.mu is held.
func (k *consumer) detach(n Node) {
	k.closed = true
	if k.att != nil {
		k.att.detach()
	}
	if k.subscription != "" {
		n.DropDestination(k.subscription)
		k.subscription = ""
	}
}

// membersOf lists the members a session is open on; c.mu is held.
func membersOf(s *session) []string {
	out := make([]string, 0, len(s.members))
	for name := range s.members {
		out = append(out, name)
	}
	return out
}

// Serve runs one Connect stream until it ends, then releases everything the
// connection held: its unacknowledged messages return to pending, marked
// redelivered.
func (cs *Connections) Serve(stream clientpb.ClientService_ConnectServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	c := &connection{
		n: cs.n, conns: cs, id: connectionID(cs.n.ID()), ctx: ctx, cancel: cancel,
		out: transport.NewOutbox[*clientpb.ServerFrame](), remote: remoteAddr(stream.Context()), since: time.Now(),
		sessions: make(map[uint64]*session), consumers: make(map[uint64]*consumer),
	}
	cs.mu.Lock()
	select {
	case <-cs.n.Stopped():
		cs.mu.Unlock()
		cancel()
		return transport.Status(fmt.Errorf("%w: node %s is shutting down", transport.ErrNodeStopping, cs.n.ID()))
	default:
	}
	if err := cs.roomFor(c); err != nil {
		cs.mu.Unlock()
		cancel()
		return transport.Status(err)
	}
	cs.byID[c.id] = c
	cs.byHost[c.host()]++
	cs.ending.Add(1)
	cs.mu.Unlock()
	defer cs.end(c)

	// The Hello reply is written before the outbox starts, so a refusal
	// reaches the client before the stream ends.
	if err := c.hello(stream); err != nil {
		return transport.Status(err)
	}
	writeErr := make(chan error, 1)
	go func() { writeErr <- c.out.Run(ctx, stream.Send) }()
	go c.heartbeat(ctx)
	recvErr := make(chan error, 1)
	go func() {
		for {
			f, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			c.handle(f)
		}
	}()
	select {
	case <-recvErr:
		// A client half-closes its side once it has read a Goodbye: the
		// answers to what it sent before (refused sends) go out first.
		c.out.CloseAfterFlush()
		select {
		case <-writeErr:
		case <-ctx.Done():
		case <-time.After(goodbyeGrace): // a client that does not read
		}
		return nil
	case err := <-writeErr:
		return err
	case <-ctx.Done():
		return transport.Status(fmt.Errorf("%w: connection closed by node %s", transport.ErrUnavailable, cs.n.ID()))
	}
}

// HeartbeatInterval is how often a connection hears from its server when
// nothing else is sent.
const HeartbeatInterval = time.Second

// ClientKeepalive is how long the client API waits without a byte from a
// client before it pings it, and how long it waits for the answer.
const ClientKeepalive = 2 * time.Second

func (c *connection) heartbeat(ctx context.Context) {
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	beat := &clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Heartbeat{Heartbeat: &clientpb.Heartbeat{}}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.out.Push(beat)
		}
	}
}

// end detaches the connection's consumers and releases its sessions.
func (cs *Connections) end(c *connection) {
	defer cs.ending.Done()
	c.cancel()
	c.mu.Lock()
	c.closed = true
	sessions := make(map[string][]string, len(c.sessions))
	for _, s := range c.sessions {
		sessions[s.id] = membersOf(s)
	}
	for _, k := range c.consumers {
		if c.abandoned {
			k.subscription = "" // a crash deletes nothing: the sweeps do
		}
		k.detach(c.n)
	}
	clientID := c.clientID
	if c.abandoned {
		clientID = "" // a crash releases nothing: the meta leader's sweep does
	} else {
		for _, name := range c.temporary {
			c.n.DropDestination(name)
		}
	}
	// Closed, the connection pushes nothing more: what its outbox holds
	// never reached the client.
	unseen := c.unsentDeliveries(c.out.Stop())
	if c.abandoned {
		sessions = nil
	}
	c.mu.Unlock()

	// Waiting lets a graceful stop release what its clients held before the
	// node leaves; a release that fails goes on in the background. The
	// deliveries the client never got are taken back first, unseen, so the
	// release counts and marks only those it may have seen.
	releases := 0
	for _, members := range sessions {
		releases += len(members)
	}
	if clientID != "" {
		releases++
	}
	tried := make(chan struct{})
	f := newFanout(releases, func(error) { close(tried) })
	if clientID != "" {
		cs.n.ReleaseClientID(clientID, c.id, f.finish)
	}
	for id, members := range sessions {
		for _, name := range members {
			ids := unseen[id][name]
			if len(ids) == 0 {
				cs.n.ReleaseSession(name, id, f.finish)
				continue
			}
			// The release waits for the return's answer: sent together, a
			// retry of the return could come after it and be refused. (Off
			// the answer's goroutine, which may be a proposer's.)
			cs.n.SubmitAsync(name, &fsmpb.Return{Session: id, DeliveryIds: ids, Unseen: true}, func(fsm.Result, error) {
				go cs.n.ReleaseSession(name, id, f.finish)
			})
		}
	}
	select {
	case <-tried:
	case <-time.After(releaseTimeout):
	}
	cs.mu.Lock()
	delete(cs.byID, c.id)
	if cs.byHost[c.host()]--; cs.byHost[c.host()] <= 0 {
		delete(cs.byHost, c.host())
	}
	cs.mu.Unlock()
}

// unsentDeliveries groups the deliveries of frames never sent by session
// id and member; c.mu is held.
func (c *connection) unsentDeliveries(frames []*clientpb.ServerFrame) map[string]map[string][]uint64 {
	out := map[string]map[string][]uint64{}
	for _, f := range frames {
		ds := f.GetDeliveries()
		k := c.consumers[ds.GetConsumer()]
		if ds == nil || k == nil {
			continue
		}
		byMember := out[k.session.id]
		if byMember == nil {
			byMember = map[string][]uint64{}
			out[k.session.id] = byMember
		}
		for _, d := range ds.Messages {
			byMember[d.Member] = append(byMember[d.Member], d.DeliveryId)
		}
	}
	return out
}

// AbandonAll drops every connection without releasing its sessions, as a
// crash would: the members' hosts release them once gossip finds this node
// dead.
func (cs *Connections) AbandonAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.byID {
		c.mu.Lock()
		c.abandoned = true
		c.mu.Unlock()
		c.cancel()
	}
}

// CloseAll ends every connection, telling each client to reconnect to
// another node, and waits, up to timeout, for their sessions to be released.
func (cs *Connections) CloseAll(timeout time.Duration) {
	cs.mu.Lock()
	var byes sync.WaitGroup
	for _, c := range cs.byID {
		byes.Go(func() { c.goodbye(false, fmt.Sprintf("node %s is shutting down", cs.n.ID())) })
	}
	cs.mu.Unlock()
	byes.Wait()
	done := make(chan struct{})
	go func() { cs.ending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		cs.n.Logger().Warn("some connections did not finish releasing their sessions before shutdown")
	}
}

// PruneDeleted ends the consumers of members that no longer exist (their
// destination was deleted), and makes sessions forget those members, so
// acks of their messages report lost server at once.
func (cs *Connections) PruneDeleted(exists func(member string) bool) {
	cs.mu.Lock()
	conns := make([]*connection, 0, len(cs.byID))
	for _, c := range cs.byID {
		conns = append(conns, c)
	}
	cs.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		var gone []*consumer
		for _, k := range c.consumers {
			if k.member != "" && !exists(k.member) {
				gone = append(gone, k)
			}
		}
		for _, s := range c.sessions {
			for name := range s.members {
				if !exists(name) {
					delete(s.members, name)
				}
			}
		}
		c.mu.Unlock()
		for _, k := range gone {
			c.consumerGone(k, fmt.Errorf("%w: member %s no longer exists (its queue was deleted, or an update removed the member); open the consumer again", transport.ErrDestinationDeleted, k.member))
		}
	}
}

func (c *connection) reply(requestID uint64, err error, r *clientpb.Reply) {
	if requestID != 0 {
		c.out.Push(replyFrame(requestID, err, r))
	}
}

func replyFrame(requestID uint64, err error, r *clientpb.Reply) *clientpb.ServerFrame {
	if r == nil {
		r = &clientpb.Reply{}
	}
	r.RequestId = requestID
	r.Error = transport.ToProto(WireError(err))
	return &clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Reply{Reply: r}}
}

// handle serves one frame. It never blocks on Raft: commands are submitted
// in arrival order, so one session's acks and recovers apply in the order
// sent, and replies go out when they are applied; work that must wait (a
// consumer's creation) runs on its own goroutine.
func (c *connection) handle(f *clientpb.ClientFrame) {
	switch op := f.Op.(type) {
	case *clientpb.ClientFrame_OpenSession:
		c.reply(f.RequestId, c.openSession(op.OpenSession), nil)
	case *clientpb.ClientFrame_CloseSession:
		c.closeSession(f.RequestId, op.CloseSession.Session)
	case *clientpb.ClientFrame_CreateConsumer:
		c.createConsumer(f.RequestId, op.CreateConsumer)
	case *clientpb.ClientFrame_CloseConsumer:
		c.closeConsumer(f.RequestId, op.CloseConsumer)
	case *clientpb.ClientFrame_ReturnDeliveries:
		c.returnDeliveries(f.RequestId, op.ReturnDeliveries)
	case *clientpb.ClientFrame_Credit:
		c.credit(op.Credit)
	case *clientpb.ClientFrame_Acknowledge:
		c.acknowledge(f.RequestId, op.Acknowledge)
	case *clientpb.ClientFrame_Recover:
		c.recover(f.RequestId, op.Recover.Session)
	case *clientpb.ClientFrame_TxSend:
		c.txSend(f.RequestId, op.TxSend)
	case *clientpb.ClientFrame_Commit:
		c.commit(f.RequestId, op.Commit)
	case *clientpb.ClientFrame_Rollback:
		c.rollback(f.RequestId, op.Rollback.Session)
	case *clientpb.ClientFrame_TxOutcome:
		c.txOutcome(f.RequestId, op.TxOutcome)
	case *clientpb.ClientFrame_Send:
		c.send(f.RequestId, op.Send)
	case *clientpb.ClientFrame_CreateTemporaryQueue:
		go c.createTemporaryQueue(f.RequestId)
	case *clientpb.ClientFrame_Hello:
		c.reply(f.RequestId, fmt.Errorf("%w: Hello was already sent", transport.ErrMalformed), nil)
	default:
		c.reply(f.RequestId, fmt.Errorf("%w: unknown or empty frame", transport.ErrMalformed), nil)
	}
}

// send serves a Send frame as the unary Send would be served, on its own
// goroutine since it waits for a commit. Sends carry no session, so they
// keep no order with the connection's other frames; a producer's order
// holds because its client waits for each answer before the next send.
func (c *connection) send(requestID uint64, op *clientpb.Send) {
	if op.Request == nil {
		c.reply(requestID, fmt.Errorf("%w: Send without a request", transport.ErrMalformed), nil)
		return
	}
	if err := c.n.Authorize(c.ctx, fsm.ActionSend, op.Request.Destination); err != nil {
		c.reply(requestID, err, nil)
		return
	}
	c.mu.Lock()
	refused := c.closing
	if refused == nil {
		c.sends.Add(1)
	}
	c.mu.Unlock()
	if refused != nil {
		c.reply(requestID, refused, nil)
		return
	}
	go func() {
		defer c.sends.Done()
		ctx := c.ctx
		if op.TimeoutMs > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(c.ctx, time.Duration(op.TimeoutMs)*time.Millisecond)
			defer cancel()
		}
		resp, err := c.n.Send(ctx, op.Request)
		if (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !errors.Is(err, transport.ErrDeliveryUnknown) {
			// As a unary call's client would see its deadline: the send
			// may have gone as far as its member.
			err = fmt.Errorf("%w: the send may or may not have been enqueued: %v", transport.ErrDeliveryUnknown, err)
		}
		if err != nil {
			c.reply(requestID, err, nil)
			return
		}
		c.reply(requestID, nil, &clientpb.Reply{Result: &clientpb.Reply_Send{Send: resp}})
	}()
}

func (c *connection) openSession(op *clientpb.OpenSession) error {
	switch op.AckMode {
	case clientpb.AckMode_ACK_MODE_AUTO, clientpb.AckMode_ACK_MODE_CLIENT, clientpb.AckMode_ACK_MODE_DUPS_OK, clientpb.AckMode_ACK_MODE_INDIVIDUAL,
		clientpb.AckMode_ACK_MODE_TRANSACTED:
	default:
		return fmt.Errorf("%w: acknowledge mode %v", transport.ErrMalformed, op.AckMode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sessions[op.Session]; ok {
		return fmt.Errorf("%w: session %d is already open", transport.ErrMalformed, op.Session)
	}
	if limit := c.n.Limits().SessionsPerConnection; len(c.sessions) >= limit {
		return fmt.Errorf("%w: the connection has %d sessions open, the most this node allows one connection (--max-sessions); close some first", transport.ErrLimitReached, limit)
	}
	c.sessions[op.Session] = &session{
		no: op.Session, id: fmt.Sprintf("%s/s%d", c.id, op.Session), mode: op.AckMode,
		members: make(map[string]bool), consumers: make(map[uint64]*consumer),
	}
	return nil
}

func (c *connection) session(no uint64) (*session, error) {
	s, ok := c.sessions[no]
	if !ok {
		return nil, fmt.Errorf("%w: session %d is not open on this connection", transport.ErrUnknownSession, no)
	}
	return s, nil
}

// fanout runs one command per member and replies once all are applied.
type fanout struct {
	mu      sync.Mutex
	pending int
	err     error
	done    func(err error)
}

func newFanout(n int, done func(error)) *fanout {
	f := &fanout{pending: n, done: done}
	if n == 0 {
		done(nil)
	}
	return f
}

func (f *fanout) finish(err error) {
	f.mu.Lock()
	if err != nil && f.err == nil {
		f.err = err
	}
	f.pending--
	last := f.pending == 0
	f.mu.Unlock()
	if last {
		f.done(f.err)
	}
}

func (c *connection) closeSession(requestID, no uint64) {
	c.mu.Lock()
	s, err := c.session(no)
	if err != nil {
		c.mu.Unlock()
		c.reply(requestID, err, nil)
		return
	}
	delete(c.sessions, no)
	for _, k := range s.consumers {
		k.detach(c.n)
		delete(c.consumers, k.no)
	}
	members := membersOf(s)
	c.mu.Unlock()
	f := newFanout(len(members), func(err error) { c.reply(requestID, err, nil) })
	for _, name := range members {
		c.n.ReleaseSession(name, s.id, f.finish)
	}
}
