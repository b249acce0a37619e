package client

import (
	"context"
	"sync"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Sends straight to a member's host. A node answers a send with the client
// address of the member's host when every send to that destination goes to
// that member (SendResponse.host_addr: the destination has one member, or
// the address names one). The connection then keeps a send link to that
// node, a stream of its own with no client id, sessions or consumers, and
// the destination's later non-transacted sends go on it: the front-end no
// longer forwards each one to the host and carries its answer back.
//
// The send link is only ever a shortcut. Sends that find none ready go on
// the connection's link, as they always did, and that link alone decides
// when the connection is lost. A send link is opened in the background (no
// send waits for a dial), and one that fails or whose node says Goodbye is
// dropped: its send goes again on the connection's link when that is safe
// (it never left, or it carries dedup ids), under the same rules as a send
// that lost the connection's node. A producer's sends leave one at a time
// (SendAsync keeps one batch in flight), so moving between links keeps
// their order.

// sendLinkRetry is how long a host whose send link could not be opened, or
// failed, is left before it is dialled again; its sends go through the
// connection's node meanwhile.
const sendLinkRetry = 5 * time.Second

// sendLinks are a connection's send links and the routes to them.
type sendLinks struct {
	mu     sync.Mutex
	routes map[string]route // by destination address
	byAddr map[string]*sendLink
	closed bool
}

// route is where a destination's sends go: its member, and the client
// address of that member's host.
type route struct{ member, addr string }

// sendLink is the link to one host: l is nil while it is being dialled and
// after a failure (at failed).
type sendLink struct {
	l       *link
	dialing bool
	failed  time.Time
}

// sendLinkFor is the send link the next send to dest goes on and the
// member it reaches there, or nil for the connection's own link. A missing
// link to a known host is dialled in the background, unless it failed
// within sendLinkRetry.
func (c *Connection) sendLinkFor(dest string) (*link, string) {
	if c.opts.NoDirectSends {
		return nil, ""
	}
	d := &c.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.routes[dest]
	if !ok || d.closed {
		return nil, ""
	}
	addr := r.addr
	s := d.byAddr[addr]
	if s == nil {
		s = &sendLink{}
		d.byAddr[addr] = s
	}
	if s.l != nil && !s.l.isDown() && !s.l.saidGoodbye() {
		return s.l, r.member
	}
	if s.l != nil {
		s.l, s.failed = nil, time.Now()
	}
	if !s.dialing && time.Since(s.failed) >= sendLinkRetry {
		s.dialing = true
		go c.dialSendLink(addr, s)
	}
	return nil, ""
}

// dialSendLink opens the send link s to addr.
func (c *Connection) dialSendLink(addr string, s *sendLink) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	l, err := c.openLink(ctx, addr, 0, "")
	d := &c.direct
	d.mu.Lock()
	s.dialing = false
	keep := err == nil && !d.closed && d.byAddr[addr] == s
	if keep {
		s.l = l
	} else {
		s.failed = time.Now()
	}
	d.mu.Unlock()
	switch {
	case err != nil:
		c.opts.Logger.Info("cairn: cannot open a send link to a member's host; its sends go through the connection's node", "addr", addr, "err", err)
	case !keep:
		l.close(ErrClosed)
	}
}

// learnRoute records where the sends to dest go next, from the answer to a
// send on l: to the host resp names, on a send link, unless the answering
// node is the host and l is the connection's own link (or no single host
// was named).
func (c *Connection) learnRoute(dest string, l *link, onSendLink bool, resp *clientpb.SendResponse) {
	if c.opts.NoDirectSends || len(resp.Results) == 0 {
		return
	}
	r := route{addr: resp.HostAddr, member: resp.Results[0].Member}
	if !onSendLink && r.addr == l.selfAddr() {
		r.addr = ""
	}
	c.direct.update(func(routes map[string]route) bool {
		if routes[dest] == r {
			return false // the common case: nothing to prune
		}
		if r.addr == "" {
			delete(routes, dest)
		} else {
			routes[dest] = r
		}
		return true
	})
}

// dropRoute sends dest's next messages through the connection's node,
// after a send on the send link l failed: its host was lost, is stopping,
// or is a host no longer. The node's next answer names the host again.
func (c *Connection) dropRoute(dest string, l *link, cause error) {
	c.opts.Logger.Info("cairn: a send straight to a member's host failed; sending through the connection's node", "dest", dest, "node", l.node, "err", cause)
	c.direct.update(func(routes map[string]route) bool {
		if routes[dest].addr != l.addr {
			return false
		}
		delete(routes, dest)
		return true
	})
}

// update changes the routes; when change reports a change, it forgets the
// send links no route names any more and half-closes them: their nodes end
// them once the sends under way on them are answered.
func (d *sendLinks) update(change func(routes map[string]route) bool) {
	d.mu.Lock()
	if !change(d.routes) {
		d.mu.Unlock()
		return
	}
	var unused []*link
	for addr, s := range d.byAddr {
		used := false
		for _, r := range d.routes {
			used = used || r.addr == addr
		}
		if !used && !s.dialing {
			delete(d.byAddr, addr)
			if s.l != nil {
				unused = append(unused, s.l)
			}
		}
	}
	d.mu.Unlock()
	for _, l := range unused {
		l.closeSend()
	}
}

// closeSendLinks half-closes every send link, so the sends on them are
// answered, and waits for their ends until ctx is done; later dials are
// dropped.
func (c *Connection) closeSendLinks(ctx context.Context) {
	d := &c.direct
	d.mu.Lock()
	d.closed = true
	var open []*link
	for _, s := range d.byAddr {
		if s.l != nil {
			open = append(open, s.l)
		}
	}
	d.mu.Unlock()
	for _, l := range open {
		l.closeSend()
	}
	for _, l := range open {
		select {
		case <-l.readDone:
		case <-ctx.Done():
		}
		l.close(ErrClosed)
	}
}
