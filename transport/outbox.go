package transport

import (
	"context"
	"sync"
)

// Outbox queues a stream's outgoing items so that pushing never blocks the
// member's dispatcher or the proposer's result goroutine. It needs no bound
// of its own: deliveries are bounded by the consumers' credit, replies by
// the requests in flight. What it never sent, stop hands back: deliveries
// among them never reached their consumer.
type Outbox[T any] struct {
	mu       sync.Mutex
	items    []T
	signal   chan struct{}
	closed   bool
	draining bool
}

func NewOutbox[T any]() *Outbox[T] { return &Outbox[T]{signal: make(chan struct{}, 1)} }

func (o *Outbox[T]) wake() {
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// Push queues items, all of them or none; false if the outbox is closed.
func (o *Outbox[T]) Push(items ...T) bool {
	o.mu.Lock()
	if o.closed || o.draining {
		o.mu.Unlock()
		return false
	}
	o.items = append(o.items, items...)
	o.mu.Unlock()
	o.wake()
	return true
}

// next takes the first queued item; done means there will be none to send:
// the outbox was stopped, or it drains and is empty.
func (o *Outbox[T]) next() (item T, ok, done bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || len(o.items) == 0 {
		return item, false, o.closed || o.draining
	}
	item = o.items[0]
	var zero T
	o.items[0] = zero
	o.items = o.items[1:]
	return item, true, false
}

// Run sends queued items, one at a time, until ctx ends, a send fails, the
// outbox is stopped, or it drains after CloseAfterFlush. An item whose
// send failed is queued again, first, for stop.
func (o *Outbox[T]) Run(ctx context.Context, send func(T) error) error {
	defer o.Close()
	for ctx.Err() == nil {
		item, ok, done := o.next()
		if ok {
			if err := send(item); err != nil {
				o.mu.Lock()
				o.items = append([]T{item}, o.items...)
				o.mu.Unlock()
				return err
			}
			continue
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-o.signal:
		}
	}
	return nil
}

// CloseAfterFlush takes no more items and ends Run once the queued ones are sent.
func (o *Outbox[T]) CloseAfterFlush() {
	o.mu.Lock()
	o.draining = true
	o.mu.Unlock()
	o.wake()
}

// Close takes no more items and sends no more.
func (o *Outbox[T]) Close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
}

// Stop closes the outbox and returns the items it never sent: those
// queued, and one whose send failed if run has returned. An item run is
// sending meanwhile is not among them.
func (o *Outbox[T]) Stop() []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	items := o.items
	o.items = nil
	o.wake()
	return items
}
