package frontend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

func remoteAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// goodbye ends the connection on purpose: the client reads why before the
// stream ends. destroyed tells it not to reconnect; otherwise it reconnects
// to another node at once instead of waiting to notice the silence. Sends
// already on their way are answered first (for up to sendsGrace), as a
// graceful stop lets unary calls finish; later ones are refused.
func (c *connection) goodbye(destroyed bool, reason string) {
	c.mu.Lock()
	if c.closing != nil {
		// Already said: the first reason stands, and one Goodbye goes.
		c.mu.Unlock()
		return
	}
	if destroyed {
		c.closing = fmt.Errorf("%w: %s", transport.ErrUnavailable, reason)
	} else {
		c.closing = fmt.Errorf("%w: %s", transport.ErrNodeStopping, reason)
	}
	c.mu.Unlock()
	answered := make(chan struct{})
	go func() { c.sends.Wait(); close(answered) }()
	select {
	case <-answered:
	case <-time.After(sendsGrace):
		c.n.Logger().Warn("connection ends with sends unanswered", "connection", c.id, "waited", sendsGrace)
	}
	// The stream stays open until the client half-closes it (serve), so a
	// send that crossed the Goodbye on the wire is still refused, not left
	// unanswered; a client that does not is cut off after goodbyeGrace.
	c.out.Push(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Goodbye{Goodbye: &clientpb.Goodbye{Destroyed: destroyed, Reason: reason}}})
	time.AfterFunc(goodbyeGrace, c.cancel)
}

func (c *connection) info() *clientpb.ConnectionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &clientpb.ConnectionInfo{
		Id: c.id, Node: c.n.ID(), ClientId: c.clientID, RemoteAddr: c.remote,
		Sessions: uint32(len(c.sessions)), Consumers: uint32(len(c.consumers)), ConnectedUnixMs: c.since.UnixMilli(),
	}
}

// List describes the connections this node serves.
func (cs *Connections) List() []*clientpb.ConnectionInfo {
	cs.mu.Lock()
	conns := make([]*connection, 0, len(cs.byID))
	for _, c := range cs.byID {
		conns = append(conns, c)
	}
	cs.mu.Unlock()
	out := make([]*clientpb.ConnectionInfo, len(conns))
	for i, c := range conns {
		out[i] = c.info()
	}
	return out
}

// goodbyeGrace is how long a connection ended on purpose waits, once its
// Goodbye is queued, for the client to half-close the stream before it is
// cut regardless (a client that does not read, or predates half-closing).
const goodbyeGrace = time.Second

// sendsGrace bounds how long a connection ended on purpose waits for the
// sends it is serving to be answered: as long as a graceful stop lets unary
// calls finish.
const sendsGrace = 2 * time.Second

// Destroy ends connection id for good, telling its client so, if this node
// serves it; false if it does not.
func (cs *Connections) Destroy(id string) bool {
	cs.mu.Lock()
	c := cs.byID[id]
	cs.mu.Unlock()
	if c == nil {
		return false
	}
	c.goodbye(true, fmt.Sprintf("connection %s was destroyed by an operator", id))
	return true
}

// connectionID names a new connection of node: its id first, so that any
// node knows which one serves it.
func connectionID(node string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return node + "-" + hex.EncodeToString(b)
}
