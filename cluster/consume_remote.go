package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// A consumer's link to its member's host on another node: the peer
// service's Consume stream, as the front-end's Node.AttachRemote.

type remoteLink struct {
	cancel  context.CancelFunc
	credits *transport.Outbox[*peerpb.ConsumeRequest]
}

func (l remoteLink) Grant(n int) {
	l.credits.Push(&peerpb.ConsumeRequest{Op: &peerpb.ConsumeRequest_Credit{Credit: uint32(n)}})
}
func (l remoteLink) Close() { l.cancel() }

// AttachRemote opens a Consume stream to the peer service of node, the
// host of attach.Member, and hands what it carries to to.
func (b clientAPI) AttachRemote(node string, attach *peerpb.Attach, to frontend.Receiver) (frontend.Link, error) {
	n := b.n
	c, err := n.peers.client(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.Consume(ctx)
	if err == nil {
		err = stream.Send(&peerpb.ConsumeRequest{Op: &peerpb.ConsumeRequest_Attach{Attach: attach}})
	}
	var first *peerpb.ConsumeEvent
	if err == nil {
		first, err = recvWithin(stream, peerOpenTimeout)
	}
	if err == nil && first.GetGone() != nil {
		g := first.GetGone()
		if g.Code == codeNoMember && g.Leader == "" {
			err = fmt.Errorf("%w: %s", fsm.ErrUnknownSession, g.Message)
		} else {
			err = fromPeerError(node, g)
			n.hostCache.set(attach.Member, g.Leader)
		}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	credits := transport.NewOutbox[*peerpb.ConsumeRequest]()
	go func() { _ = credits.Run(ctx, stream.Send) }()
	go func() {
		defer cancel()
		// The host pushes the deliveries an earlier host committed and
		// never pushed as it attaches, before it says Attached: the first
		// event may be those.
		for ev := first; ; ev = nil {
			if ev == nil {
				var err error
				if ev, err = stream.Recv(); err != nil {
					to.Ended(err)
					return
				}
			}
			switch e := ev.Event.(type) {
			case *peerpb.ConsumeEvent_Deliveries:
				ds := make([]fsm.Delivery, len(e.Deliveries.Deliveries))
				for i, d := range e.Deliveries.Deliveries {
					ds[i] = fsm.Delivery{DeliveryID: d.DeliveryId, Message: d.Message, Redelivered: d.Redelivered, DeliveryCount: d.DeliveryCount}
				}
				if !to.Push(ds) {
					to.GiveBack(ds)
					return
				}
			case *peerpb.ConsumeEvent_Gone:
				err := fromPeerError(node, e.Gone)
				if e.Gone.Code == codeNoMember {
					err = fmt.Errorf("%w: %s", fsm.ErrUnknownSession, e.Gone.Message)
				}
				to.Ended(err)
				return
			}
		}
	}()
	return remoteLink{cancel: cancel, credits: credits}, nil
}

func recvWithin(stream peerpb.PeerService_ConsumeClient, d time.Duration) (*peerpb.ConsumeEvent, error) {
	type got struct {
		ev  *peerpb.ConsumeEvent
		err error
	}
	ch := make(chan got, 1)
	go func() { ev, err := stream.Recv(); ch <- got{ev, err} }()
	select {
	case g := <-ch:
		return g.ev, g.err
	case <-time.After(d):
		return nil, fmt.Errorf("no answer to attach within %v", d)
	}
}
