package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// What a client's address names: a destination (created on first use),
// one of its members (NAME#I), the member a consumer is pinned to, and
// the client address of the node that hosts a member.

// ensure returns the queue name, creating it with the defaults if it does
// not exist, whatever --auto-create says (a dead-letter queue).
func (n *Node) ensure(ctx context.Context, name string) (*fsmpb.Destination, error) {
	return n.ensureKind(ctx, name, fsmpb.DestinationKind_DESTINATION_KIND_QUEUE)
}

// ensureKind returns the destination name, creating it of kind k with the
// defaults if it does not exist.
func (n *Node) ensureKind(ctx context.Context, name string, k fsmpb.DestinationKind) (*fsmpb.Destination, error) {
	if d, ok := n.meta.Destination(name); ok {
		return d, nil
	}
	d, err := n.createDestination(ctx, &clientpb.CreateDestinationRequest{Name: name, Kind: clientpb.DestinationKind(k)})
	if errors.Is(err, transport.ErrDestinationExists) {
		if d, ok := n.meta.Destination(name); ok {
			return d, nil
		}
		return nil, fmt.Errorf("%w: %q was deleted as it was made", transport.ErrUnknownDestination, name)
	}
	return d, err
}

// memberOf resolves an address (NAME or NAME#I) to its destination and, for
// NAME#I, the member index (-1 for a plain name). With create it must be a
// queue, made with the defaults if missing (resolve).
func (n *Node) memberOf(ctx context.Context, addr string, create bool) (*fsmpb.Destination, int, error) {
	k := fsmpb.DestinationKind_DESTINATION_KIND_UNKNOWN
	if create {
		k = fsmpb.DestinationKind_DESTINATION_KIND_QUEUE
	}
	return n.memberOfKind(ctx, addr, k)
}

// memberOfKind is memberOf for an address that must be a destination of
// kind k, made if missing when k is a queue or a topic (any existing one
// for UNKNOWN).
func (n *Node) memberOfKind(ctx context.Context, addr string, k fsmpb.DestinationKind) (*fsmpb.Destination, int, error) {
	create := k == fsmpb.DestinationKind_DESTINATION_KIND_QUEUE || k == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC
	name, idx, err := fsm.ParseAddress(addr)
	if err != nil {
		return nil, 0, frontend.WireError(err)
	}
	var d *fsmpb.Destination
	if _, exists := n.meta.Destination(name); !exists && create && idx >= 0 {
		// NAME#I of a destination that does not exist yet: refuse before
		// creating one that would not have member I.
		if nodes := len(n.placementNodes(ctx)); idx >= nodes {
			return nil, 0, fmt.Errorf("%w: %s does not exist, and created now it would have %d members; %s names member %d", transport.ErrUnknownDestination, name, nodes, addr, idx)
		}
	}
	if create {
		d, err = n.resolveKind(ctx, name, k)
	} else if dd, ok := n.meta.Destination(name); ok {
		d = dd
		if k != fsmpb.DestinationKind_DESTINATION_KIND_UNKNOWN && d.Kind != k {
			err = wrongKind(d, k)
		}
	} else {
		err = fmt.Errorf("%w: %q", transport.ErrUnknownDestination, name)
	}
	if err != nil {
		return nil, 0, err
	}
	if idx >= len(d.Members) {
		return nil, 0, fmt.Errorf("%w: %s has %d members (%s to %s); %s does not exist", transport.ErrUnknownDestination,
			name, len(d.Members), fsm.MemberName(name, 0), fsm.MemberName(name, uint32(len(d.Members)-1)), addr)
	}
	return d, idx, nil
}

// pinConsumer chooses the member a new consumer of addr is pinned to.
func (n *Node) pinConsumer(ctx context.Context, addr string) (string, error) {
	k := fsmpb.DestinationKind_DESTINATION_KIND_QUEUE
	if fsm.TopicOf(addr) != "" {
		k = fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION
	}
	d, idx, err := n.memberOfKind(ctx, addr, k)
	if err != nil {
		return "", err
	}
	if idx < 0 {
		idx = destination.Pin(n.candidates(d), n.rotation.Add(1))
	}
	return fsm.MemberName(d.Name, uint32(idx)), nil
}

// directHost names the node hosting member name (its id and client
// address), when every send to the address asked for goes to that member
// (the destination has one member, or the address names it): the client
// then sends there directly (SendResponse.host_addr). Both are empty when
// the router spreads the sends, or no live host is known now; it never
// waits to learn one.
func (n *Node) directHost(d *fsmpb.Destination, idx int, name string) (node, addr string) {
	if idx < 0 && len(d.Members) != 1 {
		return "", ""
	}
	r, node, _ := n.knownHost(name)
	if r != nil {
		node = n.cfg.NodeID
	}
	if addr := n.clientAddrOf(node); addr != "" {
		return node, addr
	}
	return "", ""
}

// clientAddrOf is the client address of a node: this node's, or another's
// that gossip holds alive; empty when none is known.
func (n *Node) clientAddrOf(node string) string {
	if node == n.cfg.NodeID {
		return n.addrs.Client
	}
	if addr, ok := n.gossip.clientAddr(node); ok {
		return addr
	}
	return ""
}
