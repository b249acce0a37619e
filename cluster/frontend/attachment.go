package frontend

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
	n       Node
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
	link         Link
	ended        chan struct{} // closed when the current link ends
	stopped      bool
	stop         chan struct{}
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
			a.n.Logger().Debug("consumer waiting for its member's host", "member", a.member, "consumer", a.k.id, "err", err)
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

	r, node := a.n.Host(a.member)
	var l Link
	var err error
	switch {
	case r != nil:
		l, err = a.attachLocal(r, gen, credit, pushed)
	case node != "" && node != a.n.ID():
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
		l.Close()
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
	a.n.SubmitAsync(a.member, &fsmpb.Return{Session: a.session, DeliveryIds: ids, Unseen: true}, func(fsm.Result, error) {})
}

// giveBackUnpushed returns, unseen, what the member's host committed for
// the consumer and never pushed to the client, once the consumer is
// detached: a host that failed over between committing deliveries and
// pushing them leaves them to the consumer, which no new link will take
// now. What the client was pushed stays the session's (JMS acknowledges
// by session, a closed consumer's messages included); what it buffered
// and never handed out, it returns itself.
func (a *attachment) giveBackUnpushed() {
	a.mu.Lock()
	after := a.pushedUpTo
	a.mu.Unlock()
	a.n.SubmitAsync(a.member, &fsmpb.Return{Session: a.session, Consumer: a.k.id, After: after, Unseen: true}, func(fsm.Result, error) {})
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
	g := a.n.MemberGroup(a.member)
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
	g := a.n.MemberGroup(a.member)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.n.SubmitRepeatableWait(ctx, a.member, &fsmpb.OpenSession{Session: a.session, Owner: a.n.Owner()}); err != nil {
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
		return WireError(err)
	case transport.NoProgress(err):
		return fmt.Errorf("the consumer's link to its member's host failed and would fail again: %w", transport.FromStatus(err))
	}
	return nil
}

// grant gives the consumer room for n more messages, at most as many as it
// was pushed since it last made room: more is ignored, so a client never
// holds more messages than its prefetch (DESIGN.md, "Credit").
func (a *attachment) grant(n int) {
	a.mu.Lock()
	n = min(n, a.held)
	a.held -= n
	a.credit += n
	l := a.link
	a.mu.Unlock()
	if l != nil && n > 0 {
		l.Grant(n)
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
		l.Close()
	}
}

type localLink struct {
	r  *member.Replica
	id string
}

func (l localLink) Grant(n int) { l.r.Credit(l.id, n) }
func (l localLink) Close()      { l.r.RemoveConsumer(l.id) }

func (a *attachment) attachLocal(r *member.Replica, gen uint64, credit int, pushed uint64) (Link, error) {
	to := linkOf{a, gen}
	c := &member.Consumer{ID: a.k.id, Session: a.session, Selector: a.k.selector, Push: to.Push, Gone: to.Ended}
	if err := r.AttachConsumer(c, credit, pushed); err != nil {
		return nil, err
	}
	return localLink{r: r, id: a.k.id}, nil
}

// attachRemote links the attachment to the member's host on node, over
// the peer service's Consume stream.
func (a *attachment) attachRemote(node string, gen uint64, credit int, pushed uint64) (Link, error) {
	return a.n.AttachRemote(node, &peerpb.Attach{
		Member: a.member, Consumer: a.k.id, Session: a.session, Credit: uint32(max(credit, 0)), PushedUpTo: pushed,
		Selector: a.k.selector.String(),
	}, linkOf{a, gen})
}

// linkOf is link gen of an attachment, as the Receiver of what it carries.
type linkOf struct {
	a   *attachment
	gen uint64
}

func (l linkOf) Push(ds []fsm.Delivery) bool { return l.a.push(l.gen, ds) }
func (l linkOf) GiveBack(ds []fsm.Delivery)  { l.a.giveBack(l.gen, ds) }
func (l linkOf) Ended(err error)             { l.a.linkEnded(l.gen, err) }
