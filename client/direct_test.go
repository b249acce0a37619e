package client

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func (f *fakeServer) setHost(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hostAddr = addr
}

// streams is how many streams the fake node was opened and how many ended.
func (f *fakeServer) streams() (opened, ended int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.ended
}

func (f *fakeServer) lastDedup() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dedupes[len(f.dedupes)-1]
}

func (f *fakeServer) framedSends() int {
	_, framed := f.counts()
	return framed
}

func dialFake(t *testing.T, f *fakeServer, opts Options) (*Connection, *Producer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, []string{f.addr}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.Session(AutoAck)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Producer("q")
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

func sendOne(t *testing.T, p *Producer) Receipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := p.Send(ctx, &Message{Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sendUntilAt sends until a send arrives at f: the send link is dialled in
// the background, so the sends before it is open go through the front-end.
func sendUntilAt(t *testing.T, p *Producer, f *fakeServer) {
	t.Helper()
	before := f.framedSends()
	eventuallyTrue(t, "a send at the member's host", func() bool {
		sendOne(t, p)
		return f.framedSends() > before
	})
}

// Once a node names the member's host, the destination's sends go to the
// host on a link of their own, without a client id; when no single host is
// named any more they go back to the connection's node and that link ends.
func TestSendBatch_GoesStraightToTheHost(t *testing.T) {
	front, host := startFakeServer(t, 1<<20), startFakeServer(t, 1<<20)
	front.setHost(host.addr)
	host.setHost(host.addr)
	c, p := dialFake(t, front, Options{ClientID: "app"})
	sendUntilAt(t, p, host)

	before := front.framedSends()
	const sends = 20
	for range sends {
		sendOne(t, p)
	}
	if n := front.framedSends() - before; n != 0 {
		t.Errorf("the front-end got %d of %d sends after the host was known", n, sends)
	}
	if opened, _ := host.streams(); opened != 1 || !slices.Equal(host.clientIDs, []string{""}) {
		t.Errorf("the host saw %d streams with client ids %q; want one send link without a client id", opened, host.clientIDs)
	}
	if !slices.Equal(front.clientIDs, []string{"app"}) {
		t.Errorf("the front-end saw client ids %q, want the connection's only", front.clientIDs)
	}

	// The destination grew past one member: no node names a host.
	host.setHost("")
	front.setHost("")
	sendOne(t, p)
	before = host.framedSends()
	for range 5 {
		sendOne(t, p)
	}
	if n := host.framedSends() - before; n != 0 {
		t.Errorf("the host got %d sends after it named no host", n)
	}
	eventuallyTrue(t, "the unused send link to end", func() bool {
		_, ended := host.streams()
		return ended == 1
	})

	// Close ends the send links too.
	front.setHost(host.addr)
	sendUntilAt(t, p, host)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, "the send link to end with the connection", func() bool {
		opened, ended := host.streams()
		return opened == 2 && ended == 2
	})
}

// A front-end that names itself as the host needs no second link.
func TestSendBatch_NoSendLinkToTheConnectionsOwnNode(t *testing.T) {
	front := startFakeServer(t, 1<<20)
	front.setHost(front.addr)
	c, p := dialFake(t, front, Options{})
	for range 10 {
		sendOne(t, p)
	}
	c.direct.mu.Lock()
	routes, links := len(c.direct.routes), len(c.direct.byAddr)
	c.direct.mu.Unlock()
	if routes != 0 || links != 0 {
		t.Errorf("%d routes and %d send links for sends whose front-end is the host", routes, links)
	}
	if opened, _ := front.streams(); opened != 1 {
		t.Errorf("the node saw %d streams, want 1", opened)
	}
}

// NoDirectSends keeps every send on the connection's node.
func TestSendBatch_NoDirectSends(t *testing.T) {
	front, host := startFakeServer(t, 1<<20), startFakeServer(t, 1<<20)
	front.setHost(host.addr)
	c, p := dialFake(t, front, Options{NoDirectSends: true})
	for range 10 {
		sendOne(t, p)
	}
	c.direct.mu.Lock()
	routes := len(c.direct.routes)
	c.direct.mu.Unlock()
	if opened, _ := host.streams(); opened != 0 || routes != 0 {
		t.Errorf("with NoDirectSends the host saw %d streams and the connection kept %d routes", opened, routes)
	}
}

// A send lost with its send link goes again through the connection's node
// when its dedup id makes that safe, and fails as unknown otherwise; the
// sends after it go through the connection's node.
func TestSendBatch_SendLinkLostFallsBackToTheConnection(t *testing.T) {
	for _, idempotent := range []bool{true, false} {
		front, host := startFakeServer(t, 1<<20), startFakeServer(t, 1<<20)
		front.setHost(host.addr)
		host.setHost(host.addr)
		_, p := dialFake(t, front, Options{})
		p.SetIdempotent(idempotent)
		sendUntilAt(t, p, host)

		host.mu.Lock()
		host.dropFrames = 1
		host.mu.Unlock()
		before := front.framedSends()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m := &Message{Body: []byte("lost")}
		_, err := p.Send(ctx, m)
		cancel()
		switch {
		case idempotent && err != nil:
			t.Fatalf("an idempotent send whose send link was lost: %v", err)
		case idempotent && (front.framedSends() != before+1 || front.lastDedup() != m.ID):
			t.Fatalf("the resend did not reach the front-end with its dedup id")
		case !idempotent && (!errors.Is(err, ErrDeliveryUnknown) || !strings.Contains(err.Error(), "member q,")):
			t.Fatalf("a send lost with its send link: %v, want ErrDeliveryUnknown naming member q", err)
		}
		before = front.framedSends()
		sendOne(t, p)
		if front.framedSends() != before+1 {
			t.Errorf("idempotent %v: the send after the loss did not go through the connection's node", idempotent)
		}
	}
}

// A host the client cannot reach costs the sends nothing: they go through
// the connection's node.
func TestSendBatch_UnreachableHost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	front := startFakeServer(t, 1<<20)
	front.setHost(gone)
	_, p := dialFake(t, front, Options{DialTimeout: time.Second})
	for range 20 {
		sendOne(t, p)
	}
	if n := front.framedSends(); n != 20 {
		t.Errorf("the front-end got %d of 20 sends", n)
	}
}
