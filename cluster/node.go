package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnmq/cairn/cluster/auth"
	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/cluster/metrics"
	"github.com/cairnmq/cairn/raftgroup"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/certs"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
	"github.com/cairnmq/cairn/transport/raftmux"
)

// Node is one `cairn server`: its listeners, the meta group, the member
// replicas placed on it, and the front-end that serves clients.
type Node struct {
	cfg Config
	log *slog.Logger
	// sweeps: the meta leader's sweeps of idle non-durable subscriptions
	// and of temporary queues.
	sweeps leaderSweeps
	// boot identifies this run of the node; sessions opened here are owned
	// by id/boot, so a restarted node's old sessions are known dead.
	boot string

	addrs Addresses
	tls   *certs.NodeTLS      // nil: TLS is off
	auth  *auth.Authenticator // nil: no authentication (TLS is off)
	// raftRefusals logs the Raft RPCs refused (raftRPCCheck).
	raftRefusals refusalLog
	// adminPassword is --admin-password-file's, read at start.
	adminPassword string

	lnClient, lnPeer, lnRaft, lnHTTP net.Listener
	mux                              *raftmux.Mux
	// snapshotSends paces the snapshots every group here sends.
	snapshotSends *raftgroup.SnapshotSends
	// rotation turns the router's ties between equal members round, per
	// node: nodes of one process do not share it.
	rotation atomic.Uint64
	gossip   *gossip
	meta     *metagroup.Group
	groups   *groups

	grpcClient, grpcPeer *grpc.Server
	health               *health.Server
	httpSrv              *http.Server

	conns   *frontend.Connections
	metrics *metrics.Metrics
	// peerStreams counts the peer API streams this node serves.
	peerStreams atomic.Int64
	peers       *peers
	hostCache   hostCache
	loads       loads
	// metaKick and groupsKick wake the meta registrar and the groups'
	// reconciler; they exist before gossip starts calling back.
	metaKick, groupsKick chan struct{}
	// placedAt is the last placeReplicas round that found nothing to do,
	// rebalanced when it last moved a preferred host; only the meta
	// group's loop (metagroup.Group.Run, Node.Lead) uses them.
	placedAt   placementRound
	rebalanced time.Time

	// hadState is true when the node started with cluster state on disk.
	hadState bool
	// incarnation names this node's data directory (claimIncarnation).
	incarnation string
	// leaving is set by Leave: no leadership should come to this node.
	leaving atomic.Bool
	leave   chan struct{}

	// releasesRetrying counts the session releases waiting to be tried
	// again (releaseSession).
	releasesRetrying atomic.Int32

	stopOnce sync.Once
	stopped  chan struct{}
	bg       sync.WaitGroup
}

// Addresses are the addresses a node is reached at.
type Addresses struct {
	Client, Peer, Raft, Gossip, HTTP string
}

// Start opens the data directory, binds every listener, and starts the
// node. It returns once the node serves; Ready tells when it has joined.
func Start(cfg Config) (_ *Node, err error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := claimDataDir(cfg.DataDir, cfg.NodeID); err != nil {
		return nil, err
	}
	held := raftgroup.HeldStore(filepath.Join(cfg.DataDir, "meta"))
	if cfg.LogStore, err = logStoreFor(cfg, held); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, boot: newID(8), stopped: make(chan struct{}), metaKick: make(chan struct{}, 1), groupsKick: make(chan struct{}, 1), hostCache: hostCache{m: map[string]string{}}, loads: loads{m: map[string]*loadEntry{}}, leave: make(chan struct{})}
	n.log = cfg.Logger.With("node", cfg.NodeID)
	n.snapshotSends = raftgroup.NewSnapshotSends(cfg.SnapshotTransfers, int64(cfg.SnapshotRateMiB)<<20)
	n.hadState = held != ""
	if n.incarnation, err = claimIncarnation(cfg.DataDir, n.hadState); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.closeListeners()
		}
	}()
	if err := n.loadTLS(); err != nil {
		return nil, err
	}
	host, err := n.listen()
	if err != nil {
		return nil, err
	}
	if n.gossip, err = startGossip(n, host); err != nil {
		return nil, err
	}
	n.addrs.Gossip = n.gossip.addr()
	n.conns = frontend.NewConnections(clientAPI{n})
	if n.metrics, err = metrics.New(metricsSource{n}); err != nil {
		n.gossip.shutdown()
		return nil, err
	}
	n.peers = newPeers(n)
	n.groups = newGroups(n)
	if err = n.openMeta(); err != nil {
		n.gossip.shutdown()
		return nil, err
	}
	n.startAuth()
	n.startServers()
	n.bg.Add(3)
	go func() {
		defer n.bg.Done()
		n.meta.Run(n.stopped)
	}()
	go n.groups.run()
	go n.watchReady()
	n.log.Info("cairn node started", "client", n.addrs.Client, "peer", n.addrs.Peer, "raft", n.addrs.Raft,
		"gossip", n.addrs.Gossip, "http", n.addrs.HTTP, "data", cfg.DataDir)
	return n, nil
}

// claimDataDir creates the data directory and records which node owns it,
// so one started by mistake with another --node-id is refused.
func claimDataDir(dir, nodeID string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.WriteFile(path, []byte(nodeID+"\n"), 0o640)
	case err != nil:
		return fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if owner := strings.TrimSpace(string(b)); owner != nodeID {
		return fmt.Errorf("%w: --data-dir %s belongs to node %q, not %q; use that --node-id or another directory", ErrConfig, dir, owner, nodeID)
	}
	return nil
}

// claimIncarnation returns the name of this data directory's life: a new
// one when it holds no cluster state (new, or emptied), else the one it
// was given. The meta group tells by it a node that came back empty under
// the same id, whose replicas must catch up again before they vote.
func claimIncarnation(dir string, hadState bool) (string, error) {
	path := filepath.Join(dir, "incarnation")
	if hadState {
		b, err := os.ReadFile(path)
		if inc := strings.TrimSpace(string(b)); err == nil && inc != "" {
			return inc, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("--data-dir %s: %w", dir, err)
		}
		// Written by a build without incarnations: the registry holds none
		// either, so a new one is no change.
	}
	inc := newID(8)
	if err := os.WriteFile(path, []byte(inc+"\n"), 0o640); err != nil {
		return "", fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	return inc, nil
}

// logStoreFor is the log store the node's groups use: the one its data
// directory holds (every group's is the meta group's kind), else the one
// asked for, else raft-boltdb. Asking for the other kind than the
// directory holds is refused: its groups would start from empty logs.
func logStoreFor(cfg Config, held string) (string, error) {
	switch {
	case held == "":
		return cmp.Or(cfg.LogStore, raftgroup.LogStoreWAL), nil
	case cfg.LogStore != "" && cfg.LogStore != held:
		return "", fmt.Errorf("%w: --log-store %s, but --data-dir %s holds %s logs; start without --log-store, or with --log-store %s", ErrConfig, cfg.LogStore, cfg.DataDir, held, held)
	}
	return held, nil
}

func newID(bytes int) string {
	b := make([]byte, bytes)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (n *Node) startServers() {
	// A client frame over the limit is refused by gRPC itself, which the
	// client reports as too large. Frames pushed are split to fit it, and
	// sent whatever their size: a message taken under a larger limit (a
	// node's setting since lowered) goes alone, rather than breaking its
	// consumer's connection again and again, never delivered.
	frame := n.maxWire()
	n.health = health.NewServer()
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	n.health.SetServingStatus(clientpb.ClientService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)

	// The keepalive finds a client cut off without a word (a pulled cable,
	// a partition): the server's heartbeats go nowhere, the ping goes
	// unanswered, and the connection ends, releasing the messages its
	// sessions held, within frontend.ClientKeepalive twice. A quiet client sends
	// nothing (the heartbeats are the server's), so its connection carries
	// that ping and its ack every frontend.ClientKeepalive.
	n.grpcClient = grpc.NewServer(append(append(transport.ServerOptions(), n.serverCreds(false)...), grpc.MaxRecvMsgSize(frame), grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: frontend.ClientKeepalive, Timeout: frontend.ClientKeepalive}),
		// One TCP connection (a client process's, shared by its
		// connections) carries no more streams than the node serves
		// connections, and room for unary calls beside; it pings no more
		// often than every 10 s.
		grpc.MaxConcurrentStreams(uint32(n.cfg.MaxConnections)+1000), grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))...)
	clientpb.RegisterClientServiceServer(n.grpcClient, frontend.NewService(clientAPI{n}, adminAPI{n}, n.conns))
	healthpb.RegisterHealthServer(n.grpcClient, n.health)

	n.grpcPeer = grpc.NewServer(append(append(transport.ServerOptions(), n.serverCreds(true)...), grpc.MaxRecvMsgSize(maxPeerFrame), grpc.MaxSendMsgSize(maxPeerFrame),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: peerKeepalive / 2, PermitWithoutStream: true}))...)
	peerpb.RegisterPeerServiceServer(n.grpcPeer, &peerService{n: n})
	healthpb.RegisterHealthServer(n.grpcPeer, n.health)
	if n.cfg.GRPCReflection {
		reflection.Register(n.grpcClient)
		reflection.Register(n.grpcPeer)
	}

	// A slow request or an idle connection is held for a bounded time.
	n.httpSrv = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(n.log.With("lib", "http").Handler(), slog.LevelDebug)}
	serve := func(what string, f func() error) {
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			if err := f(); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error(what+" server stopped", "err", err)
			}
		}()
	}
	serve("client gRPC", func() error { return n.grpcClient.Serve(n.lnClient) })
	serve("peer gRPC", func() error { return n.grpcPeer.Serve(n.lnPeer) })
	serve("HTTP", func() error { return n.httpSrv.Serve(n.httpListener(n.lnHTTP)) })
}

// maxWire bounds one frame (gRPC message) to and from clients: derived
// from the largest message (transport.FrameLimit). Deliveries are split
// into frames within it.
func (n *Node) maxWire() int { return transport.FrameLimit(n.cfg.MaxMessageBytes) }

// maxPeerFrame bounds one frame between nodes: as much as gRPC carries.
// Peers send what they built from checked input (a transaction's sends,
// up to frontend.MaxTxBytes, travel in one command), so a lower limit would only
// break a legitimate stream, and it would be a second number that every
// node's setting must agree with (cluster/frontend/DESIGN.md, "Frame limits").
const maxPeerFrame = math.MaxInt32

// peerAddr is where a node's peer service listens, as gossip (fresher)
// or the registry knows it.
func (n *Node) peerAddr(node string) string {
	for _, m := range n.gossip.members() {
		if m.ID == node && m.Meta.Peer != "" {
			return m.Meta.Peer
		}
	}
	var addr string
	n.meta.Read(func(m *fsm.Meta) {
		if nd, ok := m.Node(node); ok {
			addr = nd.PeerAddr
		}
	})
	return addr
}

// raftAddresses finds a node's current Raft address, as gossip (fresher) or
// the registry knows it: a node may come back at another address (a new pod
// IP), and its peers' Raft configurations keep its id, not its address.
type raftAddresses struct{ n *Node }

func (a raftAddresses) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if addr, ok := a.n.gossip.raftAddr(string(id)); ok {
		return raft.ServerAddress(addr), nil
	}
	var addr string
	a.n.meta.Read(func(m *fsm.Meta) {
		if nd, ok := m.Node(string(id)); ok {
			addr = nd.RaftAddr
		}
	})
	if addr == "" {
		return "", fmt.Errorf("no known raft address for node %s", id)
	}
	return raft.ServerAddress(addr), nil
}

// localGroups reports every Raft group replica on this node.
func (n *Node) localGroups() []*peerpb.GroupReplica {
	report := func(name string, r *raft.Raft) *peerpb.GroupReplica {
		_, leader := r.LeaderWithID()
		g := &peerpb.GroupReplica{Name: name, Leader: string(leader), CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(), LastIndex: r.LastIndex()}
		if r.State() == raft.Leader {
			if f := r.GetConfiguration(); f.Error() == nil {
				for _, s := range f.Configuration().Servers {
					g.Servers = append(g.Servers, string(s.ID))
					if s.Suffrage != raft.Voter {
						g.Nonvoters = append(g.Nonvoters, string(s.ID))
					}
				}
			}
		}
		return g
	}
	out := []*peerpb.GroupReplica{report(metagroup.ID, n.meta.Raft())}
	for _, r := range n.groups.all() {
		out = append(out, report(r.Name(), r.Raft()))
	}
	return out
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Addrs are the node's advertised addresses.
func (n *Node) Addrs() Addresses { return n.addrs }

// owner is the session owner tag of this run of the node.
func (n *Node) owner() string { return n.cfg.NodeID + "/" + n.boot }

// ownerLive reports whether the node run that owns a session is alive.
func (n *Node) ownerLive(owner string) bool {
	if owner == n.owner() {
		return true
	}
	id, boot, _ := strings.Cut(owner, "/")
	return n.gossip.aliveWithBoot(id, boot)
}

// Ready reports whether the node has joined the meta group, is registered
// in it, and every member replica placed on it has a leader.
func (n *Node) Ready() error {
	if err := n.meta.Ready(); err != nil {
		return err
	}
	return n.groups.ready()
}

// WaitReady waits until Ready returns nil or ctx ends.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		err := n.Ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready: %w", n.cfg.NodeID, err)
		case <-n.stopped:
			return errors.New("node stopped")
		case <-t.C:
		}
	}
}

// membershipChanged is gossip's callback: registration and session sweeps
// may have work to do.
func (n *Node) membershipChanged() {
	for _, ch := range []chan struct{}{n.metaKick, n.groupsKick} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// watchReady mirrors readiness into the gRPC health service, and tells the
// other nodes through gossip whether this one is still catching up.
func (n *Node) watchReady() {
	defer n.bg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	serving, catchingUp := false, true // as gossip started
	for {
		select {
		case <-n.stopped:
			return
		case <-t.C:
		}
		ready := n.Ready() == nil
		if ready != serving {
			serving = ready
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if ready {
				st = healthpb.HealthCheckResponse_SERVING
			}
			n.log.Debug("readiness changed", "ready", ready)
			n.health.SetServingStatus("", st)
			n.health.SetServingStatus(clientpb.ClientService_ServiceDesc.ServiceName, st)
			n.gossip.setServing(ready)
		}
		if behind := n.catchingUp(); behind != catchingUp {
			catchingUp = behind
			n.log.Debug("catching up changed", "catching_up", behind)
			n.gossip.setCatchingUp(behind)
		}
	}
}

// catchingUp reports whether this node is still opening its replicas or
// applying their logs; gossip tells the others (watchReady), so that none
// hands it a leadership meanwhile. Unlike Ready it leaves out whether each
// group has a leader: an election, which every replica of a group sees at
// once, says nothing of this node, and counting it had every node of the
// group say it was catching up until the election ended.
func (n *Node) catchingUp() bool {
	if n.meta.CaughtUp() != nil {
		return true
	}
	return n.groups.opening() || replicasLagging(n.groups)
}

// destinations lists every destination.
func (n *Node) destinations() (out []*fsmpb.Destination) {
	n.meta.Read(func(m *fsm.Meta) { out = m.Destinations() })
	return out
}

// Stop shuts the node down gracefully: it stops being ready, hands its
// leaderships to other nodes, ends client connections (releasing their
// sessions), leaves the gossip pool, then shuts every Raft group down.
func (n *Node) Stop() { n.halt(true) }

// Crash stops the node as a killed process would look to the others: no
// leadership handed over, no session released, no goodbye to gossip. The
// data directory stays as a kill leaves it. It is for tests.
func (n *Node) Crash() { n.halt(false) }

func (n *Node) halt(graceful bool) {
	n.stopOnce.Do(func() {
		n.log.Info("cairn node stopping", "graceful", graceful)
		close(n.stopped)
		n.health.Shutdown()
		if graceful {
			n.leaving.Store(true)
			n.handOver(context.Background())
			n.conns.CloseAll(5 * time.Second)
			// Unary calls in flight (a LeaveNode) get their answer.
			stopped := make(chan struct{})
			go func() { n.grpcClient.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(2 * time.Second):
			}
		} else {
			n.conns.AbandonAll()
		}
		n.grpcClient.Stop()
		n.grpcPeer.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.httpSrv.Shutdown(ctx)
		cancel()
		// The background loops end on stopped; none may open a replica or
		// propose once the groups start closing.
		n.bg.Wait()
		if graceful {
			n.gossip.leave(2 * time.Second)
		}
		n.peers.close()
		n.groups.closeAll()
		n.meta.Close()
		n.gossip.shutdown()
		n.mux.Close()
		n.log.Info("cairn node stopped")
	})
}

// bodyMemory is member.Config.BodyMemory for --body-memory-mib.
func bodyMemory(mib int) int64 {
	if mib < 0 {
		return -1
	}
	return int64(mib) << 20
}

// replicaConfig is what every member replica of this node opens with.
func (n *Node) replicaConfig() member.Config {
	return member.Config{
		NodeID:            n.cfg.NodeID,
		Timing:            n.cfg.Timing,
		SnapshotThreshold: n.cfg.SnapshotThreshold,
		SnapshotInterval:  n.cfg.SnapshotInterval,
		LogStore:          n.cfg.LogStore,
		BodyMemory:        bodyMemory(n.cfg.BodyMemoryMiB),
		ExpiryInterval:    n.cfg.ExpiryInterval,
		TxTimeout:         n.cfg.TxTimeout,
		Resolver:          n,
		Clock:             n.cfg.Clock,
		OwnerLive:         n.ownerLive,
		Addresses:         raftAddresses{n},
		CheckRPC:          n.raftRPCCheck("a member group", true),
		SnapshotSends:     n.snapshotSends,
		OnFatal:           n.cfg.OnFatal,
		Observer:          n.metrics,
		Logger:            n.log,
	}
}
