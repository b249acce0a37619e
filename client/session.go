package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Session is a JMS session: a single ordering and acknowledgement context
// for its producers and consumers.
type Session struct {
	conn *Connection
	no   uint64
	mode AckMode

	// handout is held shared while a consumer hands a message to the
	// application and exclusively by Recover, so no message is handed out
	// while a recover is under way.
	handout sync.RWMutex
	// listenerMu runs the session's listeners one at a time, as JMS does;
	// listenerGoroutine is the goroutine running one, 0 when none is.
	listenerMu        sync.Mutex
	listenerGoroutine atomic.Uint64

	mu     sync.Mutex
	closed bool
	// gen is the connection's link the session was last opened on.
	gen uint64
	// lostAcks is set when a reconnect took away messages the session
	// held unacknowledged: the next acknowledge reports ErrLostServer.
	lostAcks bool
	// Transacted: the members the open transaction sent to, and how many
	// messages the front-end said it holds (txSends: the commit tells it,
	// so that a front-end the session moved to in a reconnect it saw too
	// late does not commit only what it holds); txLost, when set, says why
	// the transaction cannot commit (its next commit rolls back);
	// committing while a commit is under way; possibleDup after a commit of
	// unknown outcome, until a transaction ends; asyncSends are the
	// asynchronous sends Commit and Rollback wait for.
	txMembers   map[string]bool
	txSends     int
	txLost      string
	committing  bool
	possibleDup bool
	asyncSends  inFlight
	consumers   map[uint64]*Consumer
	// unacked are messages handed out and not yet acknowledged (ClientAck,
	// IndividualAck).
	unacked []*Message
	// dupsOK are acknowledgements not sent yet (DupsOK).
	dupsOK    []*clientpb.DeliveryRef
	dupsTimer *time.Timer
	// firstValid is, per member, the lowest delivery id still the
	// session's after its last recover; earlier ones were returned.
	firstValid map[string]uint64
	// acksInFlight counts automatic acknowledgements not yet answered. A
	// WaitGroup would not do: a listener may ack (Add from zero) while
	// Close waits, which WaitGroup forbids.
	acksInFlight inFlight
}

func newSession(c *Connection, no uint64, mode AckMode, gen uint64) *Session {
	return &Session{conn: c, no: no, mode: mode, gen: gen, consumers: make(map[uint64]*Consumer), firstValid: make(map[string]uint64), txMembers: make(map[string]bool)}
}

// linkLost forgets what the session held on a lost link: the server
// releases it, and it comes again marked redelivered. A transaction with
// a commit under way is not marked lost: a commit that left learns its
// outcome (resolve), and one that had yet to leave goes to the next node,
// where it rolls back: that node holds none of the sends the commit counts,
// and the deliveries it names were the old connection's session's.
func (s *Session) linkLost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.mode == Transacted && !s.committing && (len(s.unacked) > 0 || len(s.txMembers) > 0):
		s.txLost = "the connection reconnected to another node during the transaction, which lost its work"
	case len(s.unacked) > 0:
		s.lostAcks = true
	}
	clear(s.txMembers)
	s.txSends = 0
	clear(s.unacked)
	s.unacked = nil
	s.dupsOK = nil
	clear(s.firstValid)
}

// rebind records that the session is open on link gen.
func (s *Session) rebind(gen uint64) {
	s.mu.Lock()
	s.gen = gen
	s.mu.Unlock()
}

// Mode is the session's acknowledge mode.
func (s *Session) Mode() AckMode { return s.mode }

// Producer creates a producer that sends to dest (a name, or NAME#I for
// member I).
func (s *Session) Producer(dest string) (*Producer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return &Producer{s: s, dest: dest, priority: defaultPriority}, nil
}

// CreateTemporaryQueue makes a queue that lives as long as the session's
// connection (JMS TemporaryQueue), for replies: any client may send to
// it, only this connection consume from it. It goes when the connection
// closes or its node is lost, so a reconnect ends it too: a requester
// makes a new one afterwards. It returns the queue's name, which a request
// carries as its ReplyTo.
func (s *Session) CreateTemporaryQueue(ctx context.Context) (string, error) {
	reply, err := s.conn.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_CreateTemporaryQueue{CreateTemporaryQueue: &clientpb.CreateTemporaryQueue{}}})
	if err != nil {
		return "", err
	}
	return reply.GetTemporaryQueue().GetName(), nil
}

// Publisher creates a producer that publishes to topic (a name, or NAME#I
// for member I): every subscription of the topic gets each message it
// selects. It sends as Producer does, with the same rules for outcomes,
// dedup ids and idempotent sends; in a transacted session the
// subscriptions get what it published when the transaction commits.
func (s *Session) Publisher(topic string) (*Producer, error) {
	p, err := s.Producer(topic)
	if err != nil {
		return nil, err
	}
	p.publish = true
	return p, nil
}

// ConsumerOption sets an option of a new consumer.
type ConsumerOption func(*consumerOptions)

type consumerOptions struct {
	prefetch, limit int
	selector        string
}

// WithPrefetch sets how many messages the consumer may hold unconsumed.
func WithPrefetch(n int) ConsumerOption { return func(o *consumerOptions) { o.prefetch = n } }

// WithLimit caps the messages the consumer ever asks the server for, so a
// tool that wants exactly n messages is never sent an extra one that would
// come back marked redelivered when it exits.
func WithLimit(n int) ConsumerOption { return func(o *consumerOptions) { o.limit = n } }

// WithSelector gives the consumer a JMS message selector (for example
// "color = 'blue' AND weight > 2500"): it receives only the messages the
// selector selects, which the member's host chooses. A malformed selector
// fails Consumer with ErrInvalidSelector, naming the position.
func WithSelector(s string) ConsumerOption { return func(o *consumerOptions) { o.selector = s } }

// Consumer creates a consumer of dest, a queue. A consumer of a plain name
// is pinned to one member, which Consumer.Member names; NAME#I consumes
// member I.
func (s *Session) Consumer(ctx context.Context, dest string, opts ...ConsumerOption) (*Consumer, error) {
	return s.consumer(ctx, dest, nil, opts)
}

// Subscription names a topic subscriber's subscription, as JMS 2.0 has
// them:
//   - the zero Subscription is non-durable: it lives as long as its
//     consumer, and receives what is published meanwhile;
//   - Durable with a Name is kept across disconnects, restarts and node
//     loss, and receives everything published since it was made; an
//     unshared one belongs to the connection's client id (which it
//     needs), one consumer at a time (ErrSubscriptionInUse);
//   - Shared with a Name is shared by all its consumers, each message to
//     one of them; a non-durable shared one goes once it has had no
//     consumer for a while.
//
// A subscription's selector (WithSelector) is set when it is made.
type Subscription struct {
	Name    string
	Durable bool
	Shared  bool
}

// Subscribe creates a consumer of a subscription to topic, making the
// subscription if it does not exist. The consumer's Member is a member of
// the subscription (TOPIC::ID#I); its messages' Destination is the topic.
// After a reconnect (ReconnectAll) a durable or shared subscriber carries
// on where it was; a non-durable one is subscribed anew and misses what was
// published in between.
func (s *Session) Subscribe(ctx context.Context, topic string, sub Subscription, opts ...ConsumerOption) (*Consumer, error) {
	return s.consumer(ctx, topic, &clientpb.Subscribe{Name: sub.Name, Durable: sub.Durable, Shared: sub.Shared}, opts)
}

func (s *Session) consumer(ctx context.Context, dest string, sub *clientpb.Subscribe, opts []ConsumerOption) (*Consumer, error) {
	o := consumerOptions{prefetch: s.conn.opts.Prefetch}
	for _, f := range opts {
		f(&o)
	}
	if o.prefetch <= 0 {
		return nil, fmt.Errorf("%w: prefetch %d; a consumer needs room for at least one message", ErrInvalidArgument, o.prefetch)
	}
	if o.limit > 0 {
		o.prefetch = min(o.prefetch, o.limit)
	}
	c := s.conn
	var k *Consumer
	err := c.createOnLink(ctx, func(l *link) error {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		c.mu.Lock()
		c.nextConsumer++
		k = newConsumer(s, c.nextConsumer, dest, o.prefetch, o.limit, l.gen)
		k.selector, k.subscribe = o.selector, sub
		// Registered before asking, so deliveries that overtake the reply land.
		c.consumers[k.no] = k
		c.mu.Unlock()
		s.consumers[k.no] = k
		s.mu.Unlock()
		reply, err := l.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_CreateConsumer{CreateConsumer: &clientpb.CreateConsumer{
			Session: s.no, Consumer: k.no, Destination: dest, Prefetch: uint32(o.prefetch), Selector: o.selector, Subscribe: sub,
		}}})
		if err != nil {
			if reply == nil && !l.isDown() {
				// No answer (ctx ended): the server may attach it yet. Closing
				// it stops that; whatever it was sent comes back to pending
				// when the session ends.
				l.requestAsync(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_CloseConsumer{CloseConsumer: &clientpb.CloseConsumer{Consumer: k.no}}}, func(*clientpb.Reply, error) {})
			}
			s.forgetConsumer(k)
			return err
		}
		k.setMember(reply.GetCreateConsumer().GetMember())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

func (s *Session) forgetConsumer(k *Consumer) {
	s.mu.Lock()
	delete(s.consumers, k.no)
	s.mu.Unlock()
	s.conn.mu.Lock()
	delete(s.conn.consumers, k.no)
	s.conn.mu.Unlock()
}

// stale reports whether a delivery was returned by a recover of the session.
func (s *Session) stale(member string, deliveryID uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return deliveryID < s.firstValid[member]
}

// consumed records a message handed to the application.
func (s *Session) consumed(m *Message) {
	switch s.mode {
	case AutoAck:
		s.autoAck(m)
	case DupsOK:
		s.mu.Lock()
		s.dupsOK = append(s.dupsOK, m.ref())
		full := len(s.dupsOK) >= s.conn.opts.DupsOKBatch
		if !full && s.dupsTimer == nil {
			s.dupsTimer = time.AfterFunc(s.conn.opts.DupsOKDelay, func() { s.sendDupsOK() })
		}
		s.mu.Unlock()
		if full {
			s.sendDupsOK()
		}
	default: // ClientAck, IndividualAck, Transacted: held until acknowledged or committed
		s.mu.Lock()
		s.unacked = append(s.unacked, m)
		s.mu.Unlock()
	}
}

// autoAck acknowledges one message without waiting: the answer matters only
// to Close, which waits for it.
func (s *Session) autoAck(m *Message) {
	s.sendAcks([]*clientpb.DeliveryRef{m.ref()})
}

func (s *Session) sendDupsOK() {
	s.mu.Lock()
	refs := s.dupsOK
	s.dupsOK = nil
	if s.dupsTimer != nil {
		s.dupsTimer.Stop()
		s.dupsTimer = nil
	}
	s.mu.Unlock()
	if len(refs) > 0 {
		s.sendAcks(refs)
	}
}

func (s *Session) sendAcks(refs []*clientpb.DeliveryRef) {
	s.acksInFlight.add()
	s.conn.requestAsync(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_Acknowledge{Acknowledge: &clientpb.Acknowledge{Session: s.no, Deliveries: refs}}},
		func(_ *clientpb.Reply, err error) {
			if err != nil && !errors.Is(err, ErrClosed) {
				s.conn.opts.Logger.Warn("cairn: automatic acknowledgement failed; the messages will be redelivered", "session", s.no, "messages", len(refs), "err", err)
			}
			s.acksInFlight.done()
		})
}

// flushAcks sends the pending DupsOK acknowledgements and waits for every
// automatic one to be answered.
func (s *Session) flushAcks(ctx context.Context) error {
	s.sendDupsOK()
	select {
	case <-s.acksInFlight.idle():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cairn: waiting for acknowledgements to be answered: %w", ctx.Err())
	}
}

// inFlight counts requests awaiting their answers; its zero value has none.
type inFlight struct {
	mu    sync.Mutex
	n     int
	until chan struct{} // closed when n returns to 0; nil while n is 0
}

func (f *inFlight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.until = make(chan struct{})
	}
	f.n++
}

func (f *inFlight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.until)
		f.until = nil
	}
}

// idle is closed once no request is in flight (at once if none is now).
func (f *inFlight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return f.until
}

// ack acknowledges for Message.Ack (m) and Session.Acknowledge (nil: all).
// A message handed out before a recover is no longer the session's: its
// ack reports ErrLostServer (after acknowledging, in ClientAck mode, what the
// session holds now).
func (s *Session) ack(ctx context.Context, m *Message) error {
	var acked []*Message
	s.mu.Lock()
	if s.mode != ClientAck && s.mode != IndividualAck {
		s.mu.Unlock()
		return nil
	}
	stale := m != nil && (m.gen != s.gen || m.deliveryID < s.firstValid[m.Member])
	lost := s.lostAcks
	s.lostAcks = false
	switch {
	case s.mode == ClientAck, m == nil:
		acked = s.unacked
		s.unacked = nil
	default:
		if i := slices.Index(s.unacked, m); i >= 0 {
			acked = []*Message{m}
			s.unacked = slices.Delete(s.unacked, i, i+1)
		}
	}
	closed := s.closed
	s.mu.Unlock()
	var err error
	switch {
	case len(acked) == 0:
	case closed:
		return ErrClosed
	default:
		err = s.sendAck(ctx, acked)
	}
	switch {
	case err != nil:
	case stale:
		err = fmt.Errorf("%w: message %s was handed out before the session recovered or its connection reconnected; it was returned and comes again, marked redelivered", ErrLostServer, m.ID)
	case lost:
		err = fmt.Errorf("%w: the connection reconnected while the session held unacknowledged messages; they were returned and come again, marked redelivered", ErrLostServer)
	}
	return err
}

func (s *Session) sendAck(ctx context.Context, acked []*Message) error {
	refs := make([]*clientpb.DeliveryRef, len(acked))
	for i, a := range acked {
		refs[i] = a.ref()
	}
	_, err := s.conn.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_Acknowledge{Acknowledge: &clientpb.Acknowledge{Session: s.no, Deliveries: refs}}})
	if err != nil && !errors.Is(err, ErrLostServer) {
		// Not answered: the messages stay the session's to acknowledge again.
		s.mu.Lock()
		s.unacked = append(acked, s.unacked...)
		s.mu.Unlock()
	}
	return err
}

// Acknowledge acknowledges every message the session has handed out and not
// yet acknowledged (ClientAck and IndividualAck modes).
func (s *Session) Acknowledge(ctx context.Context) error {
	return s.ack(ctx, nil)
}

// Recover stops delivery to the session, returns every message it handed
// out and did not acknowledge to the server, marked redelivered, and
// restarts delivery: those messages come again, with Redelivered set and
// their DeliveryCount raised. Messages prefetched but not yet handed out
// come again too.
func (s *Session) Recover(ctx context.Context) error {
	s.handout.Lock()
	defer s.handout.Unlock()
	if err := s.flushAcks(ctx); err != nil {
		return err
	}
	if s.mode == Transacted {
		return fmt.Errorf("%w: a transacted session rolls back instead of recovering", ErrInvalidArgument)
	}
	reply, err := s.conn.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_Recover{Recover: &clientpb.RecoverSession{Session: s.no}}})
	s.recovered(reply)
	return err
}

// recovered takes in the answer of a recover (or of a rollback, or of a
// commit that did not happen): what it returned is no longer the session's.
func (s *Session) recovered(reply *clientpb.Reply) {
	if reply.GetRecover() == nil {
		return
	}
	// Even a recover that failed on some member took back the messages of
	// the members that answered: their prefetched copies must go.
	s.mu.Lock()
	for _, w := range reply.GetRecover().Watermarks {
		s.firstValid[w.Member] = w.FirstValid
	}
	// What a member that failed to recover still holds stays to be acked.
	s.unacked = slices.DeleteFunc(s.unacked, func(m *Message) bool { return m.deliveryID < s.firstValid[m.Member] })
	consumers := make([]*Consumer, 0, len(s.consumers))
	for _, k := range s.consumers {
		consumers = append(consumers, k)
	}
	s.mu.Unlock()
	for _, k := range consumers {
		k.dropStale()
	}
}

// Close closes the session's consumers and ends the session: messages it
// handed out and did not acknowledge return to pending, marked redelivered.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	consumers := make([]*Consumer, 0, len(s.consumers))
	for _, k := range s.consumers {
		consumers = append(consumers, k)
	}
	s.mu.Unlock()
	for _, k := range consumers {
		_ = k.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.conn.opts.RequestTimeout)
	defer cancel()
	err := s.flushAcks(ctx)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	// Held so that a reconnect does not re-open the session meanwhile.
	c := s.conn
	c.objects.RLock()
	defer c.objects.RUnlock()
	c.mu.Lock()
	delete(c.sessions, s.no)
	l := c.link
	c.mu.Unlock()
	if l == nil {
		return err // reconnecting: the session died with the lost link
	}
	if _, cerr := l.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_CloseSession{CloseSession: &clientpb.CloseSession{Session: s.no}}}); cerr != nil && err == nil && !errors.Is(cerr, ErrLostServer) {
		err = cerr
	}
	return err
}
