package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// peerClientTimeout bounds one node's answer when another gathers the
// cluster's connections or relays a destroy.
const peerClientTimeout = 3 * time.Second

// onPeer calls fn on another node's peer API, within peerClientTimeout:
// nodes ask each other as nodes, never through the client API, where a
// node's certificate is no identity.
func (n *Node) onPeer(ctx context.Context, node string, fn func(context.Context, peerpb.PeerServiceClient) error) error {
	api, err := n.peers.client(node)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, peerClientTimeout)
	defer cancel()
	return fn(ctx, api)
}

// ListConnections gathers the connections of every live node (or of this
// one only); nodes that do not answer are named, not waited for.
func (a adminAPI) ListConnections(ctx context.Context, localOnly bool) *clientpb.ListConnectionsResponse {
	n := a.n
	resp := &clientpb.ListConnectionsResponse{Connections: n.conns.List()}
	if !localOnly {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, m := range n.gossip.members() {
			if m.ID == n.cfg.NodeID || m.State != "alive" {
				continue
			}
			wg.Go(func() {
				var got []*clientpb.ConnectionInfo
				err := n.onPeer(ctx, m.ID, func(ctx context.Context, api peerpb.PeerServiceClient) error {
					r, err := api.Connections(ctx, &peerpb.ConnectionsRequest{})
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

// DestroyConnection ends a connection for good, on whichever node serves
// it: connection ids start with the serving node's id.
func (a adminAPI) DestroyConnection(ctx context.Context, id string) error {
	n := a.n
	if n.conns.Destroy(id) {
		return nil
	}
	cut := strings.LastIndex(id, "-")
	if cut > 0 && id[:cut] != n.cfg.NodeID {
		for _, m := range n.gossip.members() {
			if m.ID == id[:cut] && m.State == "alive" {
				return n.onPeer(ctx, m.ID, func(ctx context.Context, api peerpb.PeerServiceClient) error {
					_, err := api.DestroyConnection(ctx, &clientpb.DestroyConnectionRequest{Id: id})
					return transport.FromStatus(err)
				})
			}
		}
	}
	return fmt.Errorf("%w: no live node serves connection %q (cairn connection list shows the connections there are)", transport.ErrUnknownConnection, id)
}

// clientAddrs are the client addresses of the live nodes, this node's first:
// a client reconnects to them when it loses this node.
func (n *Node) clientAddrs() []string {
	out := []string{n.addrs.Client}
	for _, m := range n.gossip.members() {
		if m.ID != n.cfg.NodeID && m.State == "alive" && m.Meta.Client != "" {
			out = append(out, m.Meta.Client)
		}
	}
	return out
}
