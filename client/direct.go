package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Sends straight to a member's host. A node answers a send with the host of
// its member (SendResponse.host_node and host_addr) when every send to that
// destination goes to that member: the destination has one member, or the
// address names one. The connection then keeps a send link to that node, a
// stream of its own with no client id, sessions or consumers, and the
// destination's later non-transacted sends go on it: the front-end no
// longer forwards each one to the host and carries its answer back.
//
// The send link is only ever a shortcut. Sends that find none ready go on
// the connection's link, as they always did, and that link alone decides
// when the connection is lost. A send link is opened in the background (no
// send waits for a dial). A send on it that fails drops the route: it goes
// again through the connection's node when that is safe (it never left, or
// it carries dedup ids), under the same rules as a send that lost the
// connection's node, and the node's next answer names the host again. A
// producer's sends leave one at a time (SendAsync keeps one batch in
// flight), so moving between links keeps their order.

// A host is left sendLinkRetry after a send on its link failed, before it is
// dialled again; after a dial that failed, twice as long each time, up to
// sendLinkRetryMax (an address this client cannot reach stays so). Its sends
// go through the connection's node meanwhile.
const (
	sendLinkRetry    = 5 * time.Second
	sendLinkRetryMax = 5 * time.Minute
)

// sendLinks are a connection's send links and the routes to them.
type sendLinks struct {
	mu     sync.Mutex
	routes map[string]route // by destination address
	byAddr map[string]*sendLink
	// held holds back dialling a host that failed, by address.
	held   map[string]*holdBack
	closed bool
}

// route is where a destination's sends go: its member, and that member's
// host (node id and client address).
type route struct{ member, node, addr string }

// holdBack is when a host may be dialled again, and how many dials to it
// failed in a row.
type holdBack struct {
	until       time.Time
	failedDials int
}

// holdLocked holds addr back for sendLinkRetry, or longer after failed
// dials; d.mu is held.
func (d *sendLinks) holdLocked(addr string, dialFailed bool) {
	h := d.held[addr]
	if h == nil {
		h = &holdBack{}
		d.held[addr] = h
	}
	wait := sendLinkRetry
	if dialFailed {
		wait = min(sendLinkRetry<<h.failedDials, sendLinkRetryMax)
		if wait < sendLinkRetryMax {
			h.failedDials++ // no further once capped: the shift would overflow
		}
	}
	h.until = time.Now().Add(wait)
}

// heldLocked reports whether addr may not be dialled now; d.mu is held.
func (d *sendLinks) heldLocked(addr string) bool {
	h := d.held[addr]
	return h != nil && time.Now().Before(h.until)
}

// sendLink is the link to one host; l is nil while it is being dialled.
type sendLink struct {
	l       *link
	dialing bool
}

// sendLinkFor is the send link the next send to dest goes on and the route
// it takes, or nil for the connection's own link. A missing link to a known
// host is dialled in the background, unless the host failed within
// sendLinkRetry.
func (c *Connection) sendLinkFor(dest string) (*link, route) {
	if c.opts.NoDirectSends {
		return nil, route{}
	}
	d := &c.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.routes[dest]
	if !ok || d.closed || d.heldLocked(r.addr) {
		// A host held back is not used either, whatever another send
		// learned since: each send that fails on it is a wasted try.
		return nil, route{}
	}
	s := d.byAddr[r.addr]
	if s == nil {
		s = &sendLink{}
		d.byAddr[r.addr] = s
	}
	if s.l != nil && !s.l.isDown() && !s.l.saidGoodbye() {
		return s.l, r
	}
	if s.l != nil {
		s.l = nil
		d.holdLocked(r.addr, false)
	}
	if !s.dialing && !d.heldLocked(r.addr) {
		s.dialing = true
		go c.dialSendLink(r, s)
	}
	return nil, route{}
}

// dialSendLink opens the send link s to r's host. A link that reached
// another node than the one named (an address announced wrong, or reused
// since) is not used.
func (c *Connection) dialSendLink(r route, s *sendLink) {
	l, err := c.openLink(context.Background(), r.addr, 0, "")
	if err == nil && l.node != r.node {
		l.close(ErrClosed)
		err = fmt.Errorf("%s answered as node %s", r.addr, l.node)
	}
	d := &c.direct
	d.mu.Lock()
	s.dialing = false
	keep := err == nil && !d.closed && d.routedLocked(r.addr)
	first := false
	switch {
	case keep:
		s.l = l
		delete(d.held, r.addr)
	case err != nil:
		first = d.held[r.addr] == nil || d.held[r.addr].failedDials == 0
		d.holdLocked(r.addr, true)
	}
	d.mu.Unlock()
	switch {
	case err != nil && first:
		c.opts.Logger.Info("cairn: cannot open a send link to a member's host; its sends go through the connection's node (set Options.NoDirectSends if this client cannot reach the nodes' announced addresses)", "node", r.node, "addr", r.addr, "err", err)
	case err != nil:
		c.opts.Logger.Debug("cairn: cannot open a send link to a member's host", "node", r.node, "addr", r.addr, "err", err)
	case !keep:
		l.close(ErrClosed)
	}
}

// learnRoute records where the sends to dest go next, from a send's
// answer: to the host it names, on a send link, unless that host is the
// connection's own node (or none was named).
func (c *Connection) learnRoute(dest string, resp *clientpb.SendResponse) {
	if c.opts.NoDirectSends || len(resp.Results) == 0 {
		return
	}
	var r route
	if resp.HostAddr != "" && resp.HostNode != "" && resp.HostNode != c.Node() {
		r = route{member: resp.Results[0].Member, node: resp.HostNode, addr: resp.HostAddr}
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
// or is a host no longer. The node's next answer names the host again; it
// is dialled again after sendLinkRetry.
func (c *Connection) dropRoute(dest string, l *link, cause error) {
	c.opts.Logger.Info("cairn: a send straight to a member's host failed; sending through the connection's node", "dest", dest, "node", l.node, "err", cause)
	c.direct.update(func(routes map[string]route) bool {
		c.direct.holdLocked(l.addr, false)
		if routes[dest].addr != l.addr {
			return false
		}
		delete(routes, dest)
		return true
	})
}

// update changes the routes under d.mu; when change reports a change, it
// forgets the send links no route names any more and half-closes them:
// their nodes end them once the sends under way on them are answered.
func (d *sendLinks) update(change func(routes map[string]route) bool) {
	d.mu.Lock()
	if !change(d.routes) {
		d.mu.Unlock()
		return
	}
	var unused []*link
	for addr, s := range d.byAddr {
		if !d.routedLocked(addr) && !s.dialing {
			delete(d.byAddr, addr)
			if s.l != nil {
				unused = append(unused, s.l)
			}
		}
	}
	for addr, h := range d.held {
		if !d.heldLocked(addr) && h.failedDials == 0 {
			delete(d.held, addr)
		}
	}
	d.mu.Unlock()
	for _, l := range unused {
		l.closeSend()
	}
}

// routedLocked reports whether a route leads to addr; d.mu is held.
func (d *sendLinks) routedLocked(addr string) bool {
	for _, r := range d.routes {
		if r.addr == addr {
			return true
		}
	}
	return false
}

// closeSendLinks half-closes every send link, so the sends on them are
// answered, and forgets them; later dials are dropped. The caller waits for
// the links' ends or closes them.
func (c *Connection) closeSendLinks() []*link {
	d := &c.direct
	d.mu.Lock()
	d.closed = true
	var open []*link
	for _, s := range d.byAddr {
		if s.l != nil {
			open = append(open, s.l)
		}
	}
	clear(d.byAddr)
	d.mu.Unlock()
	for _, l := range open {
		l.closeSend()
	}
	return open
}
