package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport/certs"
	"github.com/cairnmq/cairn/transport/raftmux"
)

// TLS on every listener (--tls-cert, --tls-key, --tls-ca): the ports only
// nodes use (peer API, Raft, gossip's streams) take a node's certificate
// signed by the cluster's CA and nothing else, and a node dialing another
// checks that the certificate names the node it meant to reach; the ports
// clients use (client API, HTTP) serve TLS and verify a client certificate
// when one is shown. Without TLS every port speaks in clear.
//
// Decision: between nodes the certificate's identity (cairn://node/ID) is
// checked, not the host name dialled; clients check the host name, as any
// TLS client does. Reason: a node is reached at addresses gossip learns
// (pod IPs that change on every reschedule), while its id is what the
// cluster trusts it as. Trade-off: a node's certificate must still name
// the hosts clients use to reach it.

// handshakeTimeout bounds a TLS handshake on a raw connection (Raft,
// gossip's streams); gRPC and HTTP bound theirs themselves.
const handshakeTimeout = 10 * time.Second

// loadTLS reads the node's TLS material, if it was given.
func (n *Node) loadTLS() error {
	if n.cfg.TLSCert == "" {
		return nil
	}
	t, err := certs.LoadNodeTLS(n.cfg.NodeID, n.cfg.TLSCert, n.cfg.TLSKey, n.cfg.TLSCA, n.cfg.TLSClientCA)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	n.tls = t
	if n.cfg.AdminPasswordFile != "" {
		n.adminPassword, err = readAdminPassword(n.cfg.AdminPasswordFile)
	}
	return err
}

// serverCreds are the gRPC server options of the peer API (peer) or the
// client API: TLS, and on the client API authentication.
func (n *Node) serverCreds(peer bool) []grpc.ServerOption {
	switch {
	case n.tls == nil:
		return nil
	case peer:
		return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(n.tls.PeerServer())),
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := n.peerCaller(ctx); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := n.peerCaller(ss.Context()); err != nil {
					return err
				}
				return h(srv, ss)
			})}
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(n.tls.ClientServer())),
		grpc.ChainUnaryInterceptor(n.auth.UnaryInterceptor()), grpc.ChainStreamInterceptor(n.auth.StreamInterceptor())}
}

// dialCreds are the credentials for dialing node's peer API or, with node
// empty, any node's client API.
func (n *Node) dialCreds(node string) grpc.DialOption {
	if n.tls == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(n.tls.PeerClient(node)))
}

// httpListener is ln serving TLS when TLS is on.
func (n *Node) httpListener(ln net.Listener) net.Listener {
	if n.tls == nil {
		return ln
	}
	return tls.NewListener(ln, n.tls.ClientServer())
}

// raftPort is the Raft listener and dialer, through TLS when it is on (the
// mux reads a connection's header, and so its handshake, off its accept
// loop). dial nil is raftmux's plain TCP.
func (n *Node) raftPort(ln net.Listener, dial raftmux.Dialer) (net.Listener, raftmux.Dialer) {
	if n.tls == nil {
		return ln, dial
	}
	if dial == nil {
		dial = func(address string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", address, timeout)
		}
	}
	return tls.NewListener(ln, n.tls.PeerServer()), func(address string, timeout time.Duration) (net.Conn, error) {
		conn, err := dial(address, timeout)
		if err != nil {
			return nil, err
		}
		return clientHandshake(conn, n.tls.PeerClient(""), timeout)
	}
}

func clientHandshake(conn net.Conn, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(conn, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// tlsGossip carries gossip's streams (the state exchanges of a join and
// its refreshes) over TLS between nodes; its packets are encrypted with
// the gossip key instead (memberlist's keyring), which TLS requires.
type tlsGossip struct {
	memberlist.NodeAwareTransport
	tls     *certs.NodeTLS
	streams chan net.Conn
	stop    chan struct{}
}

func newTLSGossip(t memberlist.NodeAwareTransport, nt *certs.NodeTLS) *tlsGossip {
	g := &tlsGossip{NodeAwareTransport: t, tls: nt, streams: make(chan net.Conn), stop: make(chan struct{})}
	go g.accept()
	return g
}

func (g *tlsGossip) accept() {
	for {
		select {
		case conn := <-g.NodeAwareTransport.StreamCh():
			go func() {
				tc := tls.Server(conn, g.tls.PeerServer())
				ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
				defer cancel()
				if err := tc.HandshakeContext(ctx); err != nil {
					conn.Close()
					return
				}
				select {
				case g.streams <- tc:
				case <-g.stop:
					conn.Close()
				}
			}()
		case <-g.stop:
			return
		}
	}
}

func (g *tlsGossip) StreamCh() <-chan net.Conn { return g.streams }

func (g *tlsGossip) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	conn, err := g.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return clientHandshake(conn, g.tls.PeerClient(a.Name), timeout)
}

func (g *tlsGossip) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return g.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// Shutdown shuts the transport under it down first, while accept still
// takes its streams: memberlist's listener hands each accepted stream on
// an unbuffered channel, and its Shutdown waits for that listener, so a
// stream that arrived as accept stopped hung the node's stop for good.
func (g *tlsGossip) Shutdown() error {
	err := g.NodeAwareTransport.Shutdown()
	close(g.stop)
	return err
}

// peerCaller refuses a peer API call from a node the cluster removed: its
// certificate stays valid until the CA is rotated, but the registry's word
// that it is no longer a node of the cluster is final (it comes back only
// with an empty data directory, registered anew from gossip, which needs
// no peer call). A node not registered yet is let in: the meta leader
// registers a node gossip admitted, and the other nodes learn it an entry
// later.
func (n *Node) peerCaller(ctx context.Context) error {
	id := callerNode(ctx)
	var removed bool
	n.meta.Read(func(m *fsm.Meta) { removed = m.Removed(id) })
	if removed {
		return status.Errorf(codes.PermissionDenied, "node %s was removed from the cluster: it is refused until it joins again with an empty data directory", id)
	}
	return nil
}

// callerNode is the node a peer API call comes from, as its certificate
// says; empty without TLS.
func callerNode(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	if kind, name, ok := certs.Identity(info.State.PeerCertificates[0]); ok && kind == certs.KindNode {
		return name
	}
	return ""
}

// raftRPCCheck ties each Raft RPC to the node its connection proved to be
// (nil without TLS: an open node serves its own host only). An RPC is
// refused, its connection dropped unanswered, when:
//   - the certificate's node is not the RPC's claimed sender (the leader
//     of an AppendEntries, the candidate of a vote, ...), or is this node;
//   - the registry removed that node (checked on every RPC, so a removal
//     applies to connections already open);
//   - for a member group, the sender is neither in the group's latest
//     configuration nor registered, and the configuration is not empty (a
//     replica still empty takes its first entries from whoever leads).
//
// The meta group skips the last rule: a replica that lags behind a new
// node's registration must still take the entries that carry it from that
// node, should it lead.
func (n *Node) raftRPCCheck(group string, member bool) func(net.Conn, any, raft.Configuration) error {
	if n.tls == nil {
		return nil
	}
	return func(conn net.Conn, command any, latest raft.Configuration) error {
		node, err := raftCaller(conn)
		if err == nil {
			err = n.raftSenderMay(node, command, member, latest)
		}
		if err != nil {
			n.raftRefusals.log(n.log, group, conn.RemoteAddr().String(), err)
		}
		return err
	}
}

// raftCaller is the node a Raft connection's certificate names.
func raftCaller(conn net.Conn) (string, error) {
	st, ok := raftmux.TLSState(conn)
	if !ok || len(st.PeerCertificates) == 0 {
		return "", errors.New("the connection shows no certificate")
	}
	kind, name, ok := certs.Identity(st.PeerCertificates[0])
	if !ok || kind != certs.KindNode {
		return "", errors.New("the connection's certificate is not a node's")
	}
	return name, nil
}

func (n *Node) raftSenderMay(node string, command any, member bool, latest raft.Configuration) error {
	h, ok := command.(raft.WithRPCHeader)
	if !ok {
		return fmt.Errorf("node %s sent an RPC of no known kind (%T)", node, command)
	}
	if claimed := string(h.GetRPCHeader().ID); claimed != node {
		return fmt.Errorf("node %s's certificate sent an RPC claiming to be from %q", node, claimed)
	}
	if node == n.cfg.NodeID {
		return fmt.Errorf("this node's own certificate sent it an RPC: a node never does (its key may have leaked)")
	}
	var removed, registered bool
	n.meta.Read(func(m *fsm.Meta) {
		removed = m.Removed(node)
		_, registered = m.Node(node)
	})
	if removed {
		return fmt.Errorf("node %s was removed from the cluster", node)
	}
	if member && !registered && len(latest.Servers) > 0 && !slices.ContainsFunc(latest.Servers, func(s raft.Server) bool { return string(s.ID) == node }) {
		return fmt.Errorf("node %s is neither registered nor a replica of the group", node)
	}
	return nil
}

// refusalLog logs a refused Raft RPC at most once a minute per sender
// address and reason: a flood of them must not flood the log.
type refusalLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (l *refusalLog) log(log *slog.Logger, group, from string, err error) {
	key := from + "\x00" + err.Error()
	l.mu.Lock()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	if t, ok := l.last[key]; ok && time.Since(t) < time.Minute {
		l.mu.Unlock()
		return
	}
	if len(l.last) > 1000 {
		clear(l.last)
	}
	l.last[key] = time.Now()
	l.mu.Unlock()
	log.Warn("refused a Raft RPC: its connection is dropped unanswered", "group", group, "from", from, "err", err)
}
