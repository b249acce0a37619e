package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// setHost makes f's answers name h as the member's host (nil: none).
func (f *fakeServer) setHost(h *fakeServer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.host = h
}

// streams is how many streams the fake node was opened and how many ended.
func (f *fakeServer) streams() (opened, ended int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.ended
}

// sends is how many Send frames came, and how many of them marked direct.
func (f *fakeServer) sends() (framed, direct int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.framed, f.directs
}

func (f *fakeServer) framedSends() int {
	framed, _ := f.sends()
	return framed
}

func (f *fakeServer) helloClientIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.clientIDs)
}

func (f *fakeServer) lastDedup() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dedupes[len(f.dedupes)-1]
}

func (c *Connection) routeCount() (routes, links int) {
	c.direct.mu.Lock()
	defer c.direct.mu.Unlock()
	return len(c.direct.routes), len(c.direct.byAddr)
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
// host on a link of their own, without a client id, marked direct; when no
// host is named any more they go back to the connection's node and that
// link ends. Close ends the send links too.
func TestSendBatch_GoesStraightToTheHost(t *testing.T) {
	front, host := startFakeServer(t, 1<<20), startFakeServer(t, 1<<20)
	front.setHost(host)
	host.setHost(host)
	c, p := dialFake(t, front, Options{ClientID: "app"})
	sendUntilAt(t, p, host)

	frontBefore, _ := front.sends()
	hostBefore, directBefore := host.sends()
	const sends = 20
	for range sends {
		sendOne(t, p)
	}
	frontAfter, frontDirect := front.sends()
	hostAfter, directAfter := host.sends()
	if frontAfter != frontBefore || frontDirect != 0 {
		t.Errorf("the front-end got %d of %d sends after the host was known (%d in all marked direct)", frontAfter-frontBefore, sends, frontDirect)
	}
	if hostAfter-hostBefore != sends || directAfter-directBefore != sends {
		t.Errorf("the host got %d of %d sends, %d marked direct", hostAfter-hostBefore, sends, directAfter-directBefore)
	}
	if opened, _ := host.streams(); opened != 1 || !slices.Equal(host.helloClientIDs(), []string{""}) {
		t.Errorf("the host saw %d streams with client ids %q; want one send link without a client id", opened, host.helloClientIDs())
	}
	if ids := front.helloClientIDs(); !slices.Equal(ids, []string{"app"}) {
		t.Errorf("the front-end saw client ids %q, want the connection's only", ids)
	}

	// The destination grew past one member: no node names a host.
	host.setHost(nil)
	front.setHost(nil)
	sendOne(t, p)
	before := host.framedSends()
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

	front.setHost(host)
	host.setHost(host)
	sendUntilAt(t, p, host)
	if opened, ended := host.streams(); opened != 2 || ended != 1 {
		t.Fatalf("the host saw %d streams, %d ended; want the second send link open", opened, ended)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ended := host.streams(); ended != 2 {
		t.Errorf("Close returned before the send link ended")
	}
}

// A host that is the connection's own node needs no second link: named by
// the front-end itself, or by a send link's node once the member moved.
func TestSendBatch_NoSendLinkToTheConnectionsOwnNode(t *testing.T) {
	front := startFakeServer(t, 1<<20)
	front.setHost(front)
	c, p := dialFake(t, front, Options{})
	for range 10 {
		sendOne(t, p)
	}
	if routes, links := c.routeCount(); routes != 0 || links != 0 {
		t.Errorf("%d routes and %d send links for sends whose front-end is the host", routes, links)
	}
	if opened, _ := front.streams(); opened != 1 {
		t.Errorf("the node saw %d streams, want 1", opened)
	}

	host := startFakeServer(t, 1<<20)
	front.setHost(host)
	host.setHost(host)
	sendUntilAt(t, p, host)
	host.setHost(front) // the member moved to the front-end
	front.setHost(front)
	sendOne(t, p)
	if routes, _ := c.routeCount(); routes != 0 {
		t.Errorf("%d routes once the member's host is the connection's node", routes)
	}
	eventuallyTrue(t, "the send link to the former host to end", func() bool {
		_, ended := host.streams()
		return ended == 1
	})
}

// NoDirectSends keeps every send on the connection's node.
func TestSendBatch_NoDirectSends(t *testing.T) {
	front, host := startFakeServer(t, 1<<20), startFakeServer(t, 1<<20)
	front.setHost(host)
	c, p := dialFake(t, front, Options{NoDirectSends: true})
	for range 10 {
		sendOne(t, p)
	}
	routes, _ := c.routeCount()
	if opened, _ := host.streams(); opened != 0 || routes != 0 {
		t.Errorf("with NoDirectSends the host saw %d streams and the connection kept %d routes", opened, routes)
	}
}

// A send lost with its send link goes again through the connection's node
// when its dedup id makes that safe, and fails as unknown, naming its
// member and host, otherwise; the sends after it go through the
// connection's node.
func TestSendBatch_SendLinkLostFallsBackToTheConnection(t *testing.T) {
	for _, idempotent := range []bool{true, false} {
		front, host := startFakeServer(t, 1<<20), startFakeServer(t, 1<<20)
		front.setHost(host)
		host.setHost(host)
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
		case !idempotent && (!errors.Is(err, ErrDeliveryUnknown) || !strings.Contains(err.Error(), "member q, node "+host.node)):
			t.Fatalf("a send lost with its send link: %v, want ErrDeliveryUnknown naming member q and node %s", err, host.node)
		}
		// The host is held back for sendLinkRetry: the next sends go
		// through the connection's node, and nothing dials the host.
		before = front.framedSends()
		for range 5 {
			sendOne(t, p)
		}
		if n := front.framedSends() - before; n != 5 {
			t.Errorf("idempotent %v: %d of the 5 sends after the loss went through the connection's node", idempotent, n)
		}
		if opened, _ := host.streams(); opened != 1 {
			t.Errorf("idempotent %v: the host was dialled again at once (%d streams)", idempotent, opened)
		}
	}
}

// A host that cannot be dialled is held back twice as long after each
// failed dial, up to sendLinkRetryMax, however many fail.
func TestSendLinks_HoldBackGrowsToItsCap(t *testing.T) {
	d := sendLinks{held: make(map[string]*holdBack)}
	for i := range 200 {
		d.holdLocked("a", true)
		wait := time.Until(d.held["a"].until)
		want := min(sendLinkRetry<<i, sendLinkRetryMax)
		if i > 10 {
			want = sendLinkRetryMax
		}
		if wait <= want-time.Second || wait > want {
			t.Fatalf("after %d failed dials the host is held %v, want %v", i+1, wait, want)
		}
	}
	d.holdLocked("b", false)
	if wait := time.Until(d.held["b"].until); wait > sendLinkRetry {
		t.Errorf("a failed send holds its host %v, want %v", wait, sendLinkRetry)
	}
}

// A send link's node that refuses a send (no host now, stopping) or says
// Goodbye did not store it: the send goes through the connection's node,
// with or without a dedup id, and so do the next ones.
func TestSendBatch_SendLinkRefusalFallsBackToTheConnection(t *testing.T) {
	for _, refusal := range []string{"unavailable", "stopping", "goodbye"} {
		t.Run(refusal, func(t *testing.T) {
			front, host := startFakeServer(t, 1<<20), startFakeServer(t, 1<<20)
			front.setHost(host)
			host.setHost(host)
			_, p := dialFake(t, front, Options{})
			sendUntilAt(t, p, host)
			refused := make(chan struct{}, 1)
			host.script = func(stream clientpb.ClientService_ConnectServer, _ int, in *clientpb.ClientFrame) (bool, error) {
				if in.GetSend() == nil {
					return false, nil
				}
				select {
				case refused <- struct{}{}:
				default:
					return false, nil
				}
				var err error
				switch refusal {
				case "unavailable":
					err = fmt.Errorf("%w: member q has no reachable host", transport.ErrUnavailable)
				case "stopping":
					err = fmt.Errorf("%w: node %s is stopping", transport.ErrNodeStopping, host.node)
				case "goodbye":
					if err := sayGoodbye(stream); err != nil {
						return true, err
					}
					err = fmt.Errorf("%w: node %s is stopping", transport.ErrNodeStopping, host.node)
				}
				return true, host.sendReply(stream, &clientpb.Reply{RequestId: in.RequestId, Error: transport.ToProto(err)})
			}
			before := front.framedSends()
			sendOne(t, p)
			sendOne(t, p)
			if n := front.framedSends() - before; n != 2 {
				t.Errorf("the front-end got %d of the refused send and the next one", n)
			}
		})
	}
}

// A host that cannot be reached, or whose address answers as another node,
// costs the sends nothing: they go through the connection's node.
func TestSendBatch_HostNotReached(t *testing.T) {
	other := startFakeServer(t, 1<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := &fakeServer{addr: ln.Addr().String(), node: "gone"}
	ln.Close()
	for _, named := range []*fakeServer{gone, {addr: other.addr, node: "not-" + other.node}} {
		front := startFakeServer(t, 1<<20)
		front.setHost(named)
		_, p := dialFake(t, front, Options{DialTimeout: time.Second})
		for range 20 {
			sendOne(t, p)
		}
		if n := front.framedSends(); n != 20 {
			t.Errorf("host %s at %s: the front-end got %d of 20 sends", named.node, named.addr, n)
		}
	}
	eventuallyTrue(t, "the link to the wrong node to end", func() bool {
		opened, ended := other.streams()
		return opened == 1 && ended == 1
	})
	if n := other.framedSends(); n != 0 {
		t.Errorf("%d sends went to a node that was not the one named", n)
	}
}

// Connections of one process to one node share a TCP connection, each on
// its own stream; the last one closed closes it, and the next dial makes a
// new one.
func TestConnections_ShareOneConnectionPerNode(t *testing.T) {
	f := beatingFake(t)
	var ps []*Producer
	var cs []*Connection
	for range 3 {
		c, p := dialFake(t, f, Options{})
		cs, ps = append(cs, c), append(ps, p)
	}
	for _, p := range ps {
		sendOne(t, p)
	}
	if n := f.accepted.Load(); n != 1 {
		t.Errorf("3 connections to one node opened %d TCP connections, want 1", n)
	}
	if opened, _ := f.streams(); opened != 3 {
		t.Errorf("the node saw %d streams, want 3", opened)
	}
	if err := cs[0].Close(); err != nil {
		t.Fatal(err)
	}
	sendOne(t, ps[1]) // the others go on
	for _, c := range cs[1:] {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	nodeConns.mu.Lock()
	_, held := nodeConns.byAddr[f.addr]
	nodeConns.mu.Unlock()
	if held {
		t.Errorf("the connection to the node outlived its last link")
	}
	_, p := dialFake(t, f, Options{})
	sendOne(t, p)
	if n := f.accepted.Load(); n != 2 {
		t.Errorf("%d TCP connections after the first was closed and a new link made, want 2", n)
	}
}

// beatingFake is a fake node that sends each stream a heartbeat, so that a
// test may take longer than the silence limit.
func beatingFake(t *testing.T) *fakeServer {
	f := startFakeServer(t, 1<<20)
	f.heartbeat = 200 * time.Millisecond
	return f
}

// sendingPair is two connections to f, each with a producer that sent once.
func sendingPair(t *testing.T, f *fakeServer) (*Producer, *Producer) {
	t.Helper()
	_, p1 := dialFake(t, f, Options{})
	_, p2 := dialFake(t, f, Options{})
	sendOne(t, p1)
	sendOne(t, p2)
	return p1, p2
}

// sharedWith is the connection new links to f share, if any.
func sharedWith(f *fakeServer) *pooledConn {
	nodeConns.mu.Lock()
	defer nodeConns.mu.Unlock()
	return nodeConns.byAddr[f.addr]
}

// sendAgain sends until a send succeeds: after a lost link, the first ones
// may fail while the connection reconnects.
func sendAgain(t *testing.T, p *Producer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := p.Send(ctx, &Message{Body: []byte("x")})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no send went through in 10 s: %v", err)
		}
	}
}

// A connection that failed under its links (no status, no Goodbye: the
// socket died) is not shared with the links made after: the reconnects get
// a new one.
func TestConnections_BrokenConnectionIsNotShared(t *testing.T) {
	f := beatingFake(t)
	p1, p2 := sendingPair(t, f)
	broken := sharedWith(f)
	f.breakConnections()
	sendAgain(t, p1)
	sendAgain(t, p2)
	if pc := sharedWith(f); pc == nil || pc == broken {
		t.Errorf("the links made after the connection failed share %p, the failed one is %p", pc, broken)
	}
}

// A stream the node ended with its word (a status of its own) says nothing
// about the connection under it, which stays shared.
func TestConnections_NodeRefusalKeepsTheConnection(t *testing.T) {
	f := beatingFake(t)
	p1, p2 := sendingPair(t, f)
	f.mu.Lock()
	f.dropFrames = 1 // ends the stream with ErrUnavailable, as a stopping node does
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p1.Send(ctx, &Message{Body: []byte("dropped")}); !errors.Is(err, ErrDeliveryUnknown) {
		t.Fatalf("a send whose stream failed: %v, want ErrDeliveryUnknown", err)
	}
	sendAgain(t, p1) // after the reconnect
	sendOne(t, p2)
	if n := f.accepted.Load(); n != 1 {
		t.Errorf("%d TCP connections; want the one, kept after the node's refusal", n)
	}
}

// A connection whose Hello went unanswered is not shared with the next
// link, which dials a connection of its own; the links already on it stay.
func TestConnections_UnansweredHelloIsNotShared(t *testing.T) {
	f := beatingFake(t)
	f.script = func(_ clientpb.ClientService_ConnectServer, conn int, in *clientpb.ClientFrame) (bool, error) {
		return conn == 2 && in.GetHello() != nil, nil // swallowed
	}
	_, p1 := dialFake(t, f, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Dial(ctx, []string{f.addr}, Options{DialTimeout: 200 * time.Millisecond}); err == nil {
		t.Fatal("a Dial whose Hello went unanswered succeeded")
	}
	_, p3 := dialFake(t, f, Options{})
	sendOne(t, p1)
	sendOne(t, p3)
	if n := f.accepted.Load(); n != 2 {
		t.Errorf("%d TCP connections; want the first, and a new one after the unanswered Hello", n)
	}
}

// A link that falls silent on a connection its neighbours still hear from
// ends alone: the connection and their links stay.
func TestConnections_OneSilentLinkEndsAlone(t *testing.T) {
	f := beatingFake(t)
	f.silentStream = 2
	c1, p1 := dialFake(t, f, Options{})
	lost1 := make(chan error, 1)
	c1.SetExceptionListener(func(err error) { lost1 <- err })
	c2, _ := dialFake(t, f, Options{})
	lost2 := make(chan error, 1)
	c2.SetExceptionListener(func(err error) { lost2 <- err })
	select {
	case err := <-lost2:
		if !strings.Contains(err.Error(), "no word from the server") {
			t.Errorf("the silent link's connection was told %v, not the silence", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the silent link was not found silent in 10 s")
	}
	sendOne(t, p1)
	select {
	case err := <-lost1:
		t.Fatalf("a link its node kept talking to was lost with its silent neighbour: %v", err)
	default:
	}
	if n := f.accepted.Load(); n != 1 {
		t.Errorf("%d TCP connections; want the one, kept", n)
	}
}
