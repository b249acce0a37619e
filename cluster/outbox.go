package cluster

import (
	"context"
	"sync"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// outbox queues a connection's outgoing frames so that pushing never
// blocks the member's dispatcher. It needs no bound of its own: deliveries
// are bounded by the consumers' credit, replies by the requests in flight.
type outbox struct {
	mu     sync.Mutex
	frames []*clientpb.ServerFrame
	signal chan struct{}
	closed bool
}

func newOutbox() *outbox { return &outbox{signal: make(chan struct{}, 1)} }

// push queues a frame; false if the outbox is closed.
func (o *outbox) push(f *clientpb.ServerFrame) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false
	}
	o.frames = append(o.frames, f)
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
	return true
}

// run writes queued frames to the stream until ctx ends or a write fails.
func (o *outbox) run(ctx context.Context, stream clientpb.ClientService_ConnectServer) error {
	defer o.close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.signal:
		}
		o.mu.Lock()
		batch := o.frames
		o.frames = nil
		o.mu.Unlock()
		for _, f := range batch {
			if err := stream.Send(f); err != nil {
				return err
			}
		}
	}
}

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.frames = nil
	o.mu.Unlock()
}
