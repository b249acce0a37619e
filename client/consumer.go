package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Consumer receives messages from one member of a destination.
type Consumer struct {
	s        *Session
	no       uint64
	dest     string
	selector string
	// subscribe names the subscription of a topic's subscriber (nil for a
	// queue's consumer).
	subscribe *clientpb.Subscribe
	prefetch  int
	// limit, when set, caps the messages the consumer asks for in all;
	// granted counts what it asked for, taken what it handed out.
	limit   int
	granted int
	taken   int

	mu sync.Mutex
	// gen is the link the consumer lives on; 0 while its connection
	// reconnects. Deliveries from any other link are stale.
	gen      uint64
	member   string
	buf      []*Message
	signal   chan struct{}
	err      error
	toCredit int
	listener bool
	stop     chan struct{}
	done     chan struct{}
}

func newConsumer(s *Session, no uint64, dest string, prefetch, limit int, gen uint64) *Consumer {
	return &Consumer{s: s, no: no, dest: dest, prefetch: prefetch, limit: limit, granted: prefetch, gen: gen, signal: make(chan struct{}, 1), stop: make(chan struct{})}
}

// Destination is the address the consumer was created with.
func (k *Consumer) Destination() string { return k.dest }

// Member is the member the consumer is pinned to. A consumer of a plain
// name may be pinned to another member after its connection reconnects.
func (k *Consumer) Member() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.member
}

func (k *Consumer) setMember(m string) {
	k.mu.Lock()
	k.member = m
	k.mu.Unlock()
}

// linkLost drops what the consumer prefetched on a lost link: the server
// releases those deliveries, and they come again marked redelivered.
func (k *Consumer) linkLost() {
	k.mu.Lock()
	k.gen = 0
	clear(k.buf)
	k.buf = nil
	k.mu.Unlock()
	k.wake()
}

// rebind readies the consumer for its re-creation on link gen and says
// with what prefetch to create it; false if it is not to be re-created
// (closed or failed, or its limit reached).
func (k *Consumer) rebind(gen uint64) (int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return 0, false
	}
	prefetch := k.prefetch
	if k.limit > 0 {
		prefetch = min(prefetch, k.limit-k.taken)
		if prefetch <= 0 {
			return 0, false
		}
	}
	k.gen, k.granted, k.toCredit = gen, k.taken+prefetch, 0
	return prefetch, true
}

func (k *Consumer) wake() {
	select {
	case k.signal <- struct{}{}:
	default:
	}
}

// deliver buffers messages pushed by the server on link gen.
func (k *Consumer) deliver(gen uint64, ds []*clientpb.Delivery) {
	stale := 0
	k.mu.Lock()
	if gen != k.gen {
		k.mu.Unlock()
		return
	}
	for _, d := range ds {
		if k.s.stale(d.Member, d.DeliveryId) {
			stale++
			continue
		}
		k.buf = append(k.buf, fromDelivery(d, k.s, gen))
	}
	// A returned message comes again and needs room again, within any limit.
	k.granted -= stale
	k.mu.Unlock()
	k.credit(stale)
	k.wake()
}

// dropStale discards buffered messages that a recover returned.
func (k *Consumer) dropStale() {
	k.mu.Lock()
	kept := k.buf[:0]
	for _, m := range k.buf {
		if !k.s.stale(m.Member, m.deliveryID) {
			kept = append(kept, m)
		}
	}
	dropped := len(k.buf) - len(kept)
	clear(k.buf[len(kept):])
	k.buf = kept
	k.granted -= dropped
	k.mu.Unlock()
	k.credit(dropped)
}

// dropExpired discards buffered messages whose expiration has passed: the
// server removes them from the session by itself, as it does pending ones.
// It returns how many it dropped; k.mu is held.
func (k *Consumer) dropExpired(now time.Time) int {
	kept := k.buf[:0]
	for _, m := range k.buf {
		if m.Expiration.IsZero() || m.Expiration.After(now) {
			kept = append(kept, m)
		}
	}
	n := len(k.buf) - len(kept)
	clear(k.buf[len(kept):])
	k.buf = kept
	return n
}

// credit gives the server room for n more messages, a batch at a time.
func (k *Consumer) credit(n int) {
	if n == 0 {
		return
	}
	k.mu.Lock()
	k.toCredit += n
	if k.limit > 0 {
		k.toCredit = min(k.toCredit, k.limit-k.granted)
	}
	send := 0
	if k.toCredit > 0 && (k.toCredit >= max(1, k.prefetch/4) || k.limit > 0) {
		send, k.toCredit = k.toCredit, 0
		k.granted += send
	}
	gen := k.gen
	k.mu.Unlock()
	if send > 0 {
		k.s.conn.grant(k.no, gen, send)
	}
}

// failOn ends the consumer with err if it still lives on link gen.
func (k *Consumer) failOn(gen uint64, err error) {
	k.mu.Lock()
	current := gen == k.gen
	k.mu.Unlock()
	if current {
		k.fail(err)
	}
}

// fail ends the consumer with err; blocked receives return it. Unless the
// application closed it, what it prefetched is dropped: the server releases
// those deliveries (they come again, marked redelivered), so handing them
// out now could give a message to two sessions.
func (k *Consumer) fail(err error) {
	k.mu.Lock()
	if k.err == nil {
		k.err = err
	}
	if !errors.Is(err, ErrClosed) {
		clear(k.buf)
		k.buf = nil
	}
	k.mu.Unlock()
	k.wake()
}

// receiveMode is how a call waits for a message.
type receiveMode int

const (
	receiveBlock   receiveMode = iota // Receive: until ctx ends
	receiveTimeout                    // ReceiveTimeout: until ctx ends, then no message
	receiveNoWait                     // ReceiveNoWait: never
	receiveListen                     // a listener: across any reconnect, until the consumer ends
)

// next hands out the next message, waiting as mode says. While the
// connection reconnects, Receive and ReceiveTimeout wait for it at most
// ReconnectBlockingTime and then fail with ErrLostServer; ReceiveNoWait
// fails at once; a listener waits for as long as the reconnect goes on.
// With record, the message is recorded as consumed before anything else can
// happen.
func (k *Consumer) next(ctx context.Context, mode receiveMode, record bool) (*Message, error) {
	var blocked <-chan time.Time // the reconnect blocking time, once it began
	for {
		k.s.handout.RLock()
		k.mu.Lock()
		expired := k.dropExpired(time.Now())
		if len(k.buf) > 0 {
			m := k.buf[0]
			k.buf[0] = nil
			k.buf = k.buf[1:]
			k.taken++
			k.mu.Unlock()
			k.credit(expired)
			if record {
				k.s.consumed(m)
			}
			k.s.handout.RUnlock()
			k.credit(1)
			return m, nil
		}
		err := k.err
		k.mu.Unlock()
		k.s.handout.RUnlock()
		k.credit(expired)
		if err != nil {
			return nil, err
		}
		l, changed, cerr := k.s.conn.state()
		reconnecting := l == nil && cerr == nil
		switch {
		case mode == receiveNoWait && reconnecting:
			return nil, k.s.conn.reconnectingErr()
		case mode == receiveNoWait:
			return nil, nil
		case reconnecting && mode != receiveListen && blocked == nil:
			t := time.NewTimer(k.s.conn.opts.ReconnectBlockingTime)
			defer t.Stop()
			blocked = t.C
		}
		select {
		case <-k.signal:
		case <-changed:
		case <-blocked:
			return nil, k.s.conn.reconnectingErr()
		case <-ctx.Done():
			if reconnecting && mode == receiveTimeout {
				return nil, k.s.conn.reconnectingErr()
			}
			return nil, ctx.Err()
		}
	}
}

func (k *Consumer) checkSync() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.listener {
		return fmt.Errorf("%w: the consumer has a listener; it cannot also receive", ErrInvalidArgument)
	}
	return nil
}

// Receive waits for the next message until ctx ends. While the connection
// reconnects it waits for the reconnect at most ReconnectBlockingTime, and
// then fails with ErrLostServer; after a reconnect it returns messages
// again, with post-recover semantics.
func (k *Consumer) Receive(ctx context.Context) (*Message, error) {
	if err := k.checkSync(); err != nil {
		return nil, err
	}
	return k.next(ctx, receiveBlock, true)
}

// ReceiveTimeout waits at most d for the next message; it returns nil and
// no error if none arrived. While the connection reconnects it waits at
// most d and at most ReconnectBlockingTime, and then fails with
// ErrLostServer.
func (k *Consumer) ReceiveTimeout(d time.Duration) (*Message, error) {
	if err := k.checkSync(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := k.next(ctx, receiveTimeout, true)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, nil
	}
	return m, err
}

// ReceiveNoWait returns the next message if one is at hand, or nil; it never
// blocks. While the connection reconnects it fails with ErrLostServer.
func (k *Consumer) ReceiveNoWait() (*Message, error) {
	if err := k.checkSync(); err != nil {
		return nil, err
	}
	return k.next(context.Background(), receiveNoWait, true)
}

// SetListener has fn called with each message, one at a time per session,
// until the consumer, its session or its connection closes, across any
// reconnect that succeeds within TotalReconnectPeriod. In AutoAck and
// DupsOK modes a message is acknowledged when fn returns.
func (k *Consumer) SetListener(fn func(*Message)) error {
	k.mu.Lock()
	if k.listener {
		k.mu.Unlock()
		return fmt.Errorf("%w: the consumer already has a listener", ErrInvalidArgument)
	}
	k.listener = true
	k.done = make(chan struct{})
	k.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-k.stop
		cancel()
	}()
	go func() {
		defer close(k.done)
		for {
			m, err := k.next(ctx, receiveListen, false)
			if err != nil {
				return
			}
			k.s.listenerMu.Lock()
			select {
			case <-k.stop:
				// Closed while waiting for the session: the message goes
				// back with the consumer's unconsumed ones.
				k.mu.Lock()
				k.buf = append([]*Message{m}, k.buf...)
				k.mu.Unlock()
				k.s.listenerMu.Unlock()
				return
			default:
			}
			k.s.listenerGoroutine.Store(goroutineID())
			fn(m)
			k.s.listenerGoroutine.Store(0)
			k.s.consumed(m)
			k.s.listenerMu.Unlock()
		}
	}()
	return nil
}

// Close stops the consumer, after its listener, if running, returns (unless
// the listener itself calls Close). Messages it prefetched and never handed
// out return to pending at once; messages it handed out stay the session's
// until acknowledged or recovered.
func (k *Consumer) Close() error {
	k.mu.Lock()
	if k.err == nil {
		k.err = ErrClosed
	}
	select {
	case <-k.stop:
		k.mu.Unlock()
		return nil
	default:
		close(k.stop)
	}
	done := k.done
	k.mu.Unlock()
	k.wake()
	// From inside a listener of this session, waiting would wait for the
	// caller itself, or for listeners queued behind it.
	if done != nil && k.s.listenerGoroutine.Load() != goroutineID() {
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.s.conn.opts.RequestTimeout)
	defer cancel()
	// Held so that a reconnect does not re-create the consumer meanwhile.
	c := k.s.conn
	c.objects.RLock()
	defer c.objects.RUnlock()
	l := c.current()
	if l == nil {
		// Reconnecting: the consumer died with the lost link, and it is
		// now forgotten before the reconnect could re-create it.
		k.s.forgetConsumer(k)
		return nil
	}
	// No delivery to the consumer follows the reply, so what is buffered
	// then is exactly what it holds unconsumed.
	_, err := l.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_CloseConsumer{CloseConsumer: &clientpb.CloseConsumer{Consumer: k.no}}})
	k.s.forgetConsumer(k)
	k.mu.Lock()
	refs := make([]*clientpb.DeliveryRef, len(k.buf))
	for i, m := range k.buf {
		refs[i] = m.ref()
	}
	k.buf = nil
	k.mu.Unlock()
	if err == nil && len(refs) > 0 {
		_, err = l.request(ctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_ReturnDeliveries{ReturnDeliveries: &clientpb.ReturnDeliveries{Session: k.s.no, Deliveries: refs}}})
	}
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrLostServer) {
		return nil
	}
	return err
}

// goroutineID is the running goroutine's id, read from its stack header
// ("goroutine 42 [running]:"). It is used for one thing only: telling a
// Close called from inside a listener, which must not wait for that
// listener, from a Close called elsewhere, which must.
func goroutineID() uint64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	f := bytes.Fields(buf[:n])
	if len(f) < 2 {
		return 0
	}
	id, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return id
}
