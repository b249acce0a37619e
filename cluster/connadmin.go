package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// goodbyeGrace is how long a connection ended on purpose waits, once its
// Goodbye is queued, for the client to half-close the stream before it is
// cut regardless (a client that does not read, or predates half-closing).
const goodbyeGrace = time.Second

// sendsGrace bounds how long a connection ended on purpose waits for the
// sends it is serving to be answered: as long as a graceful stop lets unary
// calls finish.
const sendsGrace = 2 * time.Second

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
		c.n.log.Warn("connection ends with sends unanswered", "connection", c.id, "waited", sendsGrace)
	}
	// The stream stays open until the client half-closes it (serve), so a
	// send that crossed the Goodbye on the wire is still refused, not left
	// unanswered; a client that does not is cut off after goodbyeGrace.
	c.out.push(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Goodbye{Goodbye: &clientpb.Goodbye{Destroyed: destroyed, Reason: reason}}})
	time.AfterFunc(goodbyeGrace, c.cancel)
}

func (c *connection) info() *clientpb.ConnectionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &clientpb.ConnectionInfo{
		Id: c.id, Node: c.n.cfg.NodeID, ClientId: c.clientID, RemoteAddr: c.remote,
		Sessions: uint32(len(c.sessions)), Consumers: uint32(len(c.consumers)), ConnectedUnixMs: c.since.UnixMilli(),
	}
}

func (cs *connections) list() []*clientpb.ConnectionInfo {
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

// peerClientTimeout bounds one node's answer when another gathers the
// cluster's connections or relays a destroy.
const peerClientTimeout = 3 * time.Second

// onClientAPI calls fn on another node's client API.
func (n *Node) onClientAPI(ctx context.Context, addr string, fn func(context.Context, clientpb.ClientServiceClient) error) error {
	cc, err := grpc.NewClient(addr, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, peerClientTimeout)
	defer cancel()
	return fn(ctx, clientpb.NewClientServiceClient(cc))
}

// listConnections gathers the connections of every live node (or of this
// one only); nodes that do not answer are named, not waited for.
func (n *Node) listConnections(ctx context.Context, localOnly bool) *clientpb.ListConnectionsResponse {
	resp := &clientpb.ListConnectionsResponse{Connections: n.conns.list()}
	if !localOnly {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, m := range n.gossip.members() {
			if m.ID == n.cfg.NodeID || m.State != "alive" {
				continue
			}
			wg.Go(func() {
				var got []*clientpb.ConnectionInfo
				err := n.onClientAPI(ctx, m.Meta.Client, func(ctx context.Context, api clientpb.ClientServiceClient) error {
					r, err := api.ListConnections(ctx, &clientpb.ListConnectionsRequest{LocalOnly: true})
					got = r.GetConnections()
					return err
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					resp.Unreachable = append(resp.Unreachable, m.ID)
					return
				}
				resp.Connections = append(resp.Connections, got...)
			})
		}
		wg.Wait()
	}
	slices.SortFunc(resp.Connections, func(a, b *clientpb.ConnectionInfo) int { return strings.Compare(a.Id, b.Id) })
	slices.Sort(resp.Unreachable)
	return resp
}

// destroyConnection ends a connection for good, on whichever node serves
// it: connection ids start with the serving node's id.
func (n *Node) destroyConnection(ctx context.Context, id string) error {
	n.conns.mu.Lock()
	c := n.conns.byID[id]
	n.conns.mu.Unlock()
	if c != nil {
		c.goodbye(true, fmt.Sprintf("connection %s was destroyed by an operator", id))
		return nil
	}
	cut := strings.LastIndex(id, "-")
	if cut > 0 && id[:cut] != n.cfg.NodeID {
		for _, m := range n.gossip.members() {
			if m.ID == id[:cut] && m.State == "alive" {
				return n.onClientAPI(ctx, m.Meta.Client, func(ctx context.Context, api clientpb.ClientServiceClient) error {
					_, err := api.DestroyConnection(ctx, &clientpb.DestroyConnectionRequest{Id: id})
					return transport.FromStatus(err)
				})
			}
		}
	}
	return fmt.Errorf("%w: no live node serves connection %q (cairn connection list shows the connections there are)", transport.ErrUnknownConnection, id)
}
