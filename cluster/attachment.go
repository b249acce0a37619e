package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// attachment keeps one client consumer attached to its member's host,
// wherever the host is: this node's replica (a local link) or another
// node's over a Consume stream (a remote link). When the host changes, the
// link ends and the attachment makes a new one to the new host, with the
// consumer's remaining credit and the last delivery it saw; deliveries the
// old host committed but never pushed are pushed by the new one. The client
// notices nothing.
type attachment struct {
	n       *Node
	c       *connection
	k       *consumer
	member  string
	session string
	// group is the member's Raft group (groupID) when the session was
	// opened on it; another one means the member was renewed since.
	group string

	mu sync.Mutex
	// credit is the room the consumer has, held what it was pushed and has
	// not made room for again: credit+held never grows past its prefetch.
	credit, held int
	pushedUpTo   uint64
	gen          uint64
	link         link
	ended        chan struct{} // closed when the current link ends
	stopped      bool
	stop         chan struct{}
}

// link is one attachment to one host.
type link interface {
	grant(n int)
	close()
}

func newAttachment(c *connection, k *consumer, memberName, group string, credit int) *attachment {
	return &attachment{n: c.n, c: c, k: k, member: memberName, session: k.session.id, group: group, credit: credit, stop: make(chan struct{})}
}

// start makes the first link, retrying through an election until ctx ends,
// then keeps the consumer attached until stopped.
func (a *attachment) start(ctx context.Context) error {
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		err := a.connect()
		if err == nil {
			go a.run()
			return nil
		}
		if final := finalLinkError(err); final != nil {
			return final
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: consumer of %s: %v", transport.ErrUnavailable, a.member, err)
		case <-a.stop:
			return fmt.Errorf("%w: consumer %d was closed while it was created", transport.ErrUnknownSession, a.k.no)
		case <-time.After(delay):
		}
	}
}

func (a *attachment) run() {
	for delay := 20 * time.Millisecond; ; {
		a.mu.Lock()
		ended := a.ended
		a.mu.Unlock()
		select {
		case <-a.stop:
			return
		case <-ended:
		}
		for {
			err := a.connect()
			if err == nil {
				delay = 20 * time.Millisecond
				break
			}
			if final := finalLinkError(err); final != nil {
				a.c.consumerGone(a.k, final)
				return
			}
			a.n.log.Debug("consumer waiting for its member's host", "member", a.member, "consumer", a.k.id, "err", err)
			select {
			case <-a.stop:
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, time.Second)
		}
	}
}

// connect makes a link to the member's current host.
func (a *attachment) connect() error {
	if err := a.reopen(); err != nil {
		return err
	}
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return errors.New("stopped")
	}
	a.gen++
	gen, credit, pushed := a.gen, a.credit, a.pushedUpTo
	a.ended = make(chan struct{})
	a.mu.Unlock()

	r, node := a.n.host(a.member)
	var l link
	var err error
	switch {
	case r != nil:
		l, err = a.attachLocal(r, gen, credit, pushed)
	case node != "" && node != a.n.cfg.NodeID:
		l, err = a.attachRemote(node, gen, credit, pushed)
	default:
		err = fmt.Errorf("member %s has no host yet", a.member)
	}
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped || a.gen != gen {
		l.close()
		return errors.New("stopped")
	}
	a.link = l
	return nil
}

// push hands deliveries of link gen to the client; false if that link is
// not the current one or the consumer is gone.
func (a *attachment) push(gen uint64, ds []fsm.Delivery) bool {
	a.mu.Lock()
	if a.stopped || gen != a.gen {
		a.mu.Unlock()
		return false
	}
	a.credit -= len(ds)
	a.held += len(ds)
	for _, d := range ds {
		a.pushedUpTo = max(a.pushedUpTo, d.DeliveryID)
	}
	a.mu.Unlock()
	return a.c.push(a.k, ds)
}

// giveBack returns, unseen, deliveries a remote host pushed on link gen
// that never reached the client: the consumer closed, or its connection
// refused them. (A local host does this itself when Push refuses.) After
// a mere change of link they are not returned: the new link's host pushes
// the session's deliveries above the last one the client got, these among
// them.
func (a *attachment) giveBack(gen uint64, ds []fsm.Delivery) {
	a.mu.Lock()
	relinked := gen != a.gen && !a.stopped
	a.mu.Unlock()
	if relinked {
		return
	}
	ids := make([]uint64, len(ds))
	for i, d := range ds {
		ids[i] = d.DeliveryID
	}
	a.n.submitAsync(a.member, &fsmpb.Return{Session: a.session, DeliveryIds: ids, Unseen: true}, func(fsm.Result, error) {})
}

// linkEnded is told by link gen that it ended.
func (a *attachment) linkEnded(gen uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen || a.ended == nil {
		return
	}
	select {
	case <-a.ended:
	default:
		a.link = nil
		close(a.ended)
	}
	if final := finalLinkError(err); final != nil && !a.stopped && !a.renewed() {
		a.stopped = true
		close(a.stop)
		go a.c.consumerGone(a.k, final)
	}
}

// renewed reports whether the member was renewed (RenewMember: a new
// member under the same name) since the session was opened on it; a.mu
// held.
func (a *attachment) renewed() bool {
	g := a.n.memberGroup(a.member)
	return g != "" && g != a.group
}

// reopen opens the session on the member again when it was renewed: the
// new member does not know it. The old one drained first (every delivery
// acknowledged or returned), so the session had none left on it.
func (a *attachment) reopen() error {
	a.mu.Lock()
	renewed := a.renewed()
	a.mu.Unlock()
	if !renewed {
		return nil
	}
	g := a.n.memberGroup(a.member)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.n.submitRepeatableWait(ctx, a.member, &fsmpb.OpenSession{Session: a.session, Owner: a.n.owner()}); err != nil {
		return fmt.Errorf("opening the session on renewed member %s: %w", a.member, err)
	}
	a.mu.Lock()
	// The session has no delivery on the new member yet.
	a.group, a.pushedUpTo = g, 0
	a.mu.Unlock()
	return nil
}

// finalLinkError is the error that ends a consumer whose link to its host
// failed with err for good, or nil if a new link may succeed. A session
// released under the consumer (its front-end was declared dead) leaves
// nothing to attach to; a stream error that any new stream would meet
// again (transport.NoProgress) would have the consumer retry forever,
// its client waiting and never told.
func finalLinkError(err error) error {
	switch {
	case errors.Is(err, fsm.ErrUnknownSession):
		return wireError(err)
	case transport.NoProgress(err):
		return fmt.Errorf("the consumer's link to its member's host failed and would fail again: %w", transport.FromStatus(err))
	}
	return nil
}

// grant gives the consumer room for n more messages, at most as many as it
// was pushed since it last made room: more is ignored, so a client never
// holds more messages than its prefetch (cluster/DESIGN.md, "Credit").
func (a *attachment) grant(n int) {
	a.mu.Lock()
	n = min(n, a.held)
	a.held -= n
	a.credit += n
	l := a.link
	a.mu.Unlock()
	if l != nil && n > 0 {
		l.grant(n)
	}
}

// detach stops the attachment for good.
func (a *attachment) detach() {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return
	}
	a.stopped = true
	l := a.link
	a.link = nil
	close(a.stop)
	a.mu.Unlock()
	if l != nil {
		l.close()
	}
}

type localLink struct {
	r  *member.Replica
	id string
}

func (l localLink) grant(n int) { l.r.Credit(l.id, n) }
func (l localLink) close()      { l.r.RemoveConsumer(l.id) }

func (a *attachment) attachLocal(r *member.Replica, gen uint64, credit int, pushed uint64) (link, error) {
	c := &member.Consumer{
		ID: a.k.id, Session: a.session,
		Push: func(ds []fsm.Delivery) bool { return a.push(gen, ds) },
		Gone: func(err error) { a.linkEnded(gen, err) },
	}
	if err := r.AttachConsumer(c, credit, pushed); err != nil {
		return nil, err
	}
	return localLink{r: r, id: a.k.id}, nil
}

type remoteLink struct {
	cancel  context.CancelFunc
	credits *outbox[*peerpb.ConsumeRequest]
}

func (l remoteLink) grant(n int) {
	l.credits.push(&peerpb.ConsumeRequest{Op: &peerpb.ConsumeRequest_Credit{Credit: uint32(n)}})
}
func (l remoteLink) close() { l.cancel() }

func (a *attachment) attachRemote(node string, gen uint64, credit int, pushed uint64) (link, error) {
	c, err := a.n.peers.client(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.Consume(ctx)
	if err == nil {
		err = stream.Send(&peerpb.ConsumeRequest{Op: &peerpb.ConsumeRequest_Attach{Attach: &peerpb.Attach{
			Member: a.member, Consumer: a.k.id, Session: a.session, Credit: uint32(max(credit, 0)), PushedUpTo: pushed,
		}}})
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
			a.n.hostCache.set(a.member, g.Leader)
		}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	credits := newOutbox[*peerpb.ConsumeRequest]()
	go func() { _ = credits.run(ctx, stream.Send) }()
	go func() {
		defer cancel()
		// The host pushes the deliveries an earlier host committed and
		// never pushed as it attaches, before it says Attached: the first
		// event may be those.
		for ev := first; ; ev = nil {
			if ev == nil {
				var err error
				if ev, err = stream.Recv(); err != nil {
					a.linkEnded(gen, err)
					return
				}
			}
			switch e := ev.Event.(type) {
			case *peerpb.ConsumeEvent_Deliveries:
				ds := make([]fsm.Delivery, len(e.Deliveries.Deliveries))
				for i, d := range e.Deliveries.Deliveries {
					ds[i] = fsm.Delivery{DeliveryID: d.DeliveryId, Message: d.Message, Redelivered: d.Redelivered, DeliveryCount: d.DeliveryCount}
				}
				if !a.push(gen, ds) {
					a.giveBack(gen, ds)
					return
				}
			case *peerpb.ConsumeEvent_Gone:
				err := fromPeerError(node, e.Gone)
				if e.Gone.Code == codeNoMember {
					err = fmt.Errorf("%w: %s", fsm.ErrUnknownSession, e.Gone.Message)
				}
				a.linkEnded(gen, err)
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
