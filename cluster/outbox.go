package cluster

import (
	"context"
	"sync"
)

// outbox queues a stream's outgoing items so that pushing never blocks the
// member's dispatcher or the proposer's result goroutine. It needs no bound
// of its own: deliveries are bounded by the consumers' credit, replies by
// the requests in flight.
type outbox[T any] struct {
	mu       sync.Mutex
	items    []T
	signal   chan struct{}
	closed   bool
	draining bool
}

func newOutbox[T any]() *outbox[T] { return &outbox[T]{signal: make(chan struct{}, 1)} }

func (o *outbox[T]) wake() {
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// push queues an item; false if the outbox is closed.
func (o *outbox[T]) push(item T) bool {
	o.mu.Lock()
	if o.closed || o.draining {
		o.mu.Unlock()
		return false
	}
	o.items = append(o.items, item)
	o.mu.Unlock()
	o.wake()
	return true
}

// run sends queued items until ctx ends, a send fails, or the outbox drains
// after closeAfterFlush.
func (o *outbox[T]) run(ctx context.Context, send func(T) error) error {
	defer o.close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.signal:
		}
		o.mu.Lock()
		batch, draining := o.items, o.draining
		o.items = nil
		o.mu.Unlock()
		for _, item := range batch {
			if err := send(item); err != nil {
				return err
			}
		}
		if draining {
			return nil
		}
	}
}

// closeAfterFlush takes no more items and ends run once the queued ones are sent.
func (o *outbox[T]) closeAfterFlush() {
	o.mu.Lock()
	o.draining = true
	o.mu.Unlock()
	o.wake()
}

func (o *outbox[T]) close() {
	o.mu.Lock()
	o.closed = true
	o.items = nil
	o.mu.Unlock()
}
