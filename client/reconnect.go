package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// ReconnectPolicy says what a connection re-creates after it loses its node.
type ReconnectPolicy int

const (
	// ReconnectProducer, the default, reconnects the connection and keeps
	// its sessions and producers working; its consumers end with
	// ErrLostServer, since their messages may come again to others.
	ReconnectProducer ReconnectPolicy = iota
	// ReconnectNone ends the connection with ErrLostServer when it loses its node.
	ReconnectNone
	// ReconnectAll also re-creates the consumers, which then go on with
	// post-recover semantics; it is the only policy under which a connection
	// with a ClientID reconnects.
	ReconnectAll
)

func (p ReconnectPolicy) String() string {
	switch p {
	case ReconnectProducer:
		return "producer"
	case ReconnectNone:
		return "none"
	case ReconnectAll:
		return "all"
	}
	return fmt.Sprintf("ReconnectPolicy(%d)", int(p))
}

// ParseReconnectPolicy reads none, producer or all.
func ParseReconnectPolicy(s string) (ReconnectPolicy, error) {
	for _, p := range []ReconnectPolicy{ReconnectNone, ReconnectProducer, ReconnectAll} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: reconnect policy %q; it is none, producer or all", ErrInvalidArgument, s)
}

// Backoff between rounds of reconnect attempts (every known node once a round).
const (
	reconnectBackoffMin = 50 * time.Millisecond
	reconnectBackoffMax = time.Second
)

// linkDown handles the end of a link: unless the application closed the
// connection, the connection either reconnects or ends, by its policy.
func (c *Connection) linkDown(l *link, cause error) {
	lostErr := l.lostErr(cause)
	if !l.close(lostErr) {
		// Already ended, by whoever found it first: its cause is the one
		// reported. Ending a link cancels its stream, so the reader's
		// "context canceled" after the watchdog found the node silent is
		// an echo of that, not news. (shutdown takes the link out before
		// ending it, and Close marks the connection closing first: neither
		// reconnects.)
		return
	}
	c.mu.Lock()
	if c.link != l || c.closing || c.err != nil {
		c.mu.Unlock()
		return
	}
	c.link = nil
	c.signalLocked()
	listener := c.onException
	sessions := make([]*Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	consumers := make([]*Consumer, 0, len(c.consumers))
	for _, k := range c.consumers {
		consumers = append(consumers, k)
	}
	c.mu.Unlock()
	l.mu.Lock()
	goodbye := l.goodbye
	l.mu.Unlock()

	if errors.As(cause, new(stuckError)) {
		c.shutdown(lostErr)
		if listener != nil {
			go listener(lostErr)
		}
		return
	}
	if refuse := c.refreshRefused(goodbye); refuse != nil {
		err := fmt.Errorf("%w; it does not reconnect: %w", lostErr, refuse)
		c.shutdown(err)
		if listener != nil {
			go listener(err)
		}
		return
	}
	for _, s := range sessions {
		s.linkLost()
	}
	for _, k := range consumers {
		if c.opts.ReconnectPolicy == ReconnectAll {
			k.linkLost()
		} else {
			k.fail(fmt.Errorf("%w; consumers are re-created only under ReconnectAll, so this one ended", lostErr))
		}
	}
	c.opts.Logger.Warn("cairn: connection lost its node; reconnecting", "connection", l.id, "node", l.node, "err", cause)
	if listener != nil {
		go listener(lostErr)
	}
	go c.reconnect(l, lostErr)
}

// refreshRefused says why the connection must not reconnect, or nil.
func (c *Connection) refreshRefused(goodbye *clientpb.Goodbye) error {
	switch {
	case goodbye.GetDestroyed():
		return fmt.Errorf("%w: %s", ErrConnectionDestroyed, goodbye.GetReason())
	case c.opts.ReconnectPolicy == ReconnectNone:
		return errors.New("its reconnect policy is none")
	case c.opts.ClientID != "" && c.opts.ReconnectPolicy != ReconnectAll:
		return fmt.Errorf("it has client id %q, and a connection with a client id reconnects only under the reconnect policy all", c.opts.ClientID)
	}
	return nil
}

// reconnect opens a link to another node and re-creates the connection's
// objects on it, round after round, until it succeeds, the application
// closes the connection, or TotalReconnectPeriod has passed.
func (c *Connection) reconnect(lost *link, lostErr error) {
	start := time.Now()
	backoff := reconnectBackoffMin
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Close, or the end of the connection, stops the attempts under way.
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	var lastErr error
	for round := 1; ; round++ {
		c.mu.Lock()
		addrs := reconnectOrder(c.addrs, lost)
		c.gen++
		gen := c.gen
		c.mu.Unlock()
		for _, addr := range addrs {
			if ctx.Err() != nil {
				return
			}
			l, err := c.openPreferred(ctx, addr, gen, lost.node)
			if err == nil {
				if err = c.restore(ctx, l); err == nil {
					c.opts.Logger.Info("cairn: connection reconnected", "connection", l.id, "node", l.node, "after", time.Since(start).Round(time.Millisecond))
					return
				}
				l.close(err)
			}
			lastErr = fmt.Errorf("%s: %w", addr, err)
		}
		if p := c.opts.TotalReconnectPeriod; p >= 0 && time.Since(start) >= p {
			err := fmt.Errorf("%w; reconnecting gave up after %v (%d rounds), last: %w", lostErr, p, round, lastErr)
			c.shutdown(err)
			c.mu.Lock()
			listener := c.onException
			c.mu.Unlock()
			if listener != nil {
				go listener(err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, reconnectBackoffMax)
	}
}

// restore re-creates the connection's sessions and (under ReconnectAll)
// consumers on l, then installs l. A consumer the server now refuses (its
// destination was deleted) ends with that error; a failure of l itself
// fails the attempt.
func (c *Connection) restore(ctx context.Context, l *link) error {
	c.objects.Lock()
	defer c.objects.Unlock()
	c.mu.Lock()
	sessions := make([]*Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	consumers := make([]*Consumer, 0, len(c.consumers))
	for _, k := range c.consumers {
		consumers = append(consumers, k)
	}
	c.mu.Unlock()
	slices.SortFunc(sessions, func(a, b *Session) int { return int(a.no) - int(b.no) })
	slices.SortFunc(consumers, func(a, b *Consumer) int { return int(a.no) - int(b.no) })
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	for _, s := range sessions {
		if _, err := l.request(rctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: s.no, AckMode: s.mode.wire()}}}); err != nil {
			return fmt.Errorf("reopening session %d: %w", s.no, err)
		}
		s.rebind(l.gen)
	}
	for _, k := range consumers {
		prefetch, ok := k.rebind(l.gen)
		if !ok {
			continue // closed, or it has all it will ever ask for
		}
		reply, err := l.request(rctx, &clientpb.ClientFrame{Op: &clientpb.ClientFrame_CreateConsumer{CreateConsumer: &clientpb.CreateConsumer{
			Session: k.s.no, Consumer: k.no, Destination: k.dest, Prefetch: uint32(prefetch), Selector: k.selector, Subscribe: k.subscribe,
		}}})
		switch {
		case err == nil:
			k.setMember(reply.GetCreateConsumer().GetMember())
		case reply == nil:
			return fmt.Errorf("re-creating consumer %d of %s: %w", k.no, k.dest, err)
		default:
			k.fail(fmt.Errorf("%w: re-creating the consumer after a reconnect: %w", ErrLostServer, err))
			k.s.forgetConsumer(k)
		}
	}
	if !c.install(l) {
		return fmt.Errorf("%w: the new link ended before it was in use", ErrLostServer)
	}
	return nil
}

// reconnectOrder lists where to reconnect: every known address but the lost
// node's (as dialled and as it advertises itself), then the lost node's (a
// node restarted in place comes back there).
func reconnectOrder(addrs []string, lost *link) []string {
	lostAddrs := []string{lost.addr}
	if len(lost.peers) > 0 {
		lostAddrs = append(lostAddrs, lost.peers[0])
	}
	out := make([]string, 0, len(addrs))
	var last []string
	for _, a := range addrs {
		if slices.Contains(lostAddrs, a) {
			last = append(last, a)
		} else {
			out = append(out, a)
		}
	}
	return append(out, last...)
}

// mergeAddrs puts the addresses a node named first, then the others known.
func mergeAddrs(learned, known []string) []string {
	out := slices.Clone(learned)
	for _, a := range known {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
