package frontend

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// hello reads a connection's first frame, its Hello, and claims the
// client id it names, in the meta group.
func (c *connection) hello(stream clientpb.ClientService_ConnectServer) error {
	type recv struct {
		f   *clientpb.ClientFrame
		err error
	}
	ch := make(chan recv, 1)
	go func() { f, err := stream.Recv(); ch <- recv{f, err} }()
	var f *clientpb.ClientFrame
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		f = r.f
	case <-time.After(helloTimeout):
		return fmt.Errorf("%w: no Hello within %v", transport.ErrMalformed, helloTimeout)
	}
	h := f.GetHello()
	if h == nil {
		return fmt.Errorf("%w: the first frame of a connection must be Hello", transport.ErrMalformed)
	}
	if h.ClientId != "" {
		// The client id is the cluster's: the meta group says which
		// connection holds it.
		var err error
		if len(h.ClientId) > fsm.MaxClientIDLen {
			err = fmt.Errorf("%w: a client id is at most %d bytes", transport.ErrInvalidArgument, fsm.MaxClientIDLen)
		} else {
			ctx, cancel := context.WithTimeout(c.ctx, helloTimeout)
			err = c.n.ClaimClientID(ctx, h.ClientId, c.id, h.ClientInstance)
			cancel()
		}
		if err != nil {
			_ = stream.Send(replyFrame(f.RequestId, err, nil))
			return err
		}
		c.mu.Lock()
		c.clientID = h.ClientId
		c.mu.Unlock()
	}
	return stream.Send(replyFrame(f.RequestId, nil, &clientpb.Reply{Result: &clientpb.Reply_Hello{Hello: &clientpb.HelloResult{
		ConnectionId: c.id, NodeId: c.n.ID(), ClientAddrs: c.n.ClientAddrs(), MaxFrameBytes: uint64(c.n.MaxWire()),
	}}}))
}
