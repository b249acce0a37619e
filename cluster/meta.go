package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// openMeta opens this node's replica of the meta group (package
// metagroup). n.meta is set before Raft starts: its address lookups read
// the registry through it.
func (n *Node) openMeta() error {
	if !n.hadState && n.cfg.BootstrapExpect == 0 && len(n.cfg.Join) == 0 {
		return fmt.Errorf("%w: %s holds no cluster state yet: start a new cluster with --bootstrap-expect N (1 for a single node), or join one with --join ADDR", ErrConfig, n.cfg.DataDir)
	}
	layer, err := n.mux.Layer(metagroup.ID)
	if err != nil {
		return err
	}
	n.meta = metagroup.New(metagroup.Config{
		NodeID: n.cfg.NodeID, Incarnation: n.incarnation,
		Dir: filepath.Join(n.cfg.DataDir, "meta"), Bootstrapped: n.hadState, BootstrapExpect: n.cfg.BootstrapExpect,
		RaftAddr: n.addrs.Raft, Stream: layer, Addresses: raftAddresses{n}, Timing: n.cfg.Timing,
		LogStore: n.cfg.LogStore, SnapshotSends: n.snapshotSends, Logger: n.log, OnFatal: n.cfg.OnFatal, Kick: n.metaKick,
		CheckRPC: n.raftRPCCheck(metagroup.ID, false),
	}, metaNode{n})
	return n.meta.Open()
}

// metaNode is the node as the meta group (package metagroup) sees it.
type metaNode struct{ n *Node }

func (m metaNode) Members() []metagroup.Member {
	gms := m.n.gossip.members()
	out := make([]metagroup.Member, len(gms))
	for i, gm := range gms {
		out[i] = metagroup.Member{
			ID: gm.ID, Addr: gm.Addr, Alive: gm.State == "alive", Serving: gm.Meta.Serving,
			Raft: gm.Meta.Raft, Client: gm.Meta.Client, Peer: gm.Meta.Peer, HTTP: gm.Meta.HTTP, Incarnation: gm.Meta.Incarnation,
		}
	}
	return out
}

func (m metaNode) ReplicaCaughtUp(node, name string, group *raft.Raft) bool {
	return replicaCaughtUp(m.n.groups, node, namedRaft{name, group})
}

func (m metaNode) Changed() {
	select {
	case m.n.metaKick <- struct{}{}:
	default:
	}
	m.n.groups.poke()
}

// Forward runs cmd on the meta leader, over its peer service.
func (m metaNode) Forward(ctx context.Context, leader string, cmd *fsmpb.Command) (fsm.Result, uint64, error) {
	c, err := m.n.peers.client(leader)
	if err != nil {
		return fsm.Result{}, 0, destination.MarkNotSent(fmt.Errorf("%w: meta leader %s: %v", transport.ErrUnavailable, leader, err))
	}
	resp, err := c.MetaApply(ctx, &peerpb.MetaApplyRequest{Command: cmd})
	if err != nil {
		return fsm.Result{}, 0, fmt.Errorf("%w: meta leader %s: %v", transport.ErrUnavailable, leader, err)
	}
	if e := resp.Error; e != nil {
		err := fmt.Errorf("%w: meta leader %s: %s", transport.ErrUnavailable, leader, e.Message)
		if e.Code == codeNotLeader {
			return fsm.Result{}, 0, destination.MarkNotSent(err)
		}
		return fsm.Result{}, 0, err
	}
	return toResult(resp.Result), resp.Index, nil
}

// Lead runs the meta leader's sweeps of idle subscriptions and of the
// temporary queues and client ids of node runs that are gone, then its
// placement and renewals. The sweeps have a context of their own, so that
// placement's calls to a node that died cannot use up theirs.
func (m metaNode) Lead(ctx context.Context) {
	sweep, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	m.n.sweepTemporaryQueues(sweep)
	m.n.sweepClientIDs(sweep)
	m.n.sweepSubscriptions(sweep)
	cancel()
	if err := m.placeReplicas(ctx); err != nil {
		m.n.log.Warn("placing replicas", "err", err)
	}
	if err := m.renewMembers(ctx); err != nil {
		m.n.log.Warn("renewing members", "err", err)
	}
}

// namedRaft is a Raft group under its name, as a raftMember.
type namedRaft struct {
	name string
	r    *raft.Raft
}

func (g namedRaft) Name() string     { return g.name }
func (g namedRaft) Raft() *raft.Raft { return g.r }

// Proves says whether the node at m's peer address holds m.ID's node
// certificate: a TLS handshake that verifies the certificate names m.ID
// (a removed node's certificate under another name, or another CA's,
// fails it). Without TLS nothing is proven, and an open node serves its
// own host only (Config.openLocal).
func (m metaNode) Proves(ctx context.Context, gm metagroup.Member) error {
	n := m.n
	if n.tls == nil {
		return nil
	}
	if gm.Peer == "" {
		return fmt.Errorf("gossip member %s names no peer address", gm.ID)
	}
	var d net.Dialer
	dial := d.DialContext
	if n.cfg.Dial != nil {
		dial = n.cfg.Dial
	}
	conn, err := dial(ctx, "tcp", gm.Peer)
	if err != nil {
		return fmt.Errorf("its peer address %s: %w", gm.Peer, err)
	}
	defer conn.Close()
	cfg := n.tls.PeerClient(gm.ID)
	cfg.NextProtos = []string{"h2"} // the peer API is gRPC's
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("its peer address %s does not show node %s's certificate: %w", gm.Peer, gm.ID, err)
	}
	return tc.Close()
}
