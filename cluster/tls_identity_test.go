package cluster

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"
	"github.com/cairnmq/cairn/transport/certs"
	"github.com/cairnmq/cairn/transport/raftmux"
)

// nodeClient is a TLS configuration that shows, as a client's identity, a
// node certificate pki signs for id (a node that never joined).
func (p *testPKI) nodeClient(t *testing.T, id string) client.Options {
	t.Helper()
	pair, err := certs.NewNode(p.ca, id, []string{"127.0.0.1"}, certs.CertValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pair.Write(p.dir, id, true)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := certs.ClientTLS(filepath.Join(p.dir, "ca.pem"), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return client.Options{TLS: tc}
}

// A node's certificate is no identity on the client API: with the
// certificate of a node the cluster CA signed that never joined, or one a
// --tls-client-ca signed, no administrative call, send or receive is
// served (ErrNotAuthenticated, saying why), and nothing changes. The
// nodes still gather each other's connections, on the peer API.
func TestTLS_ANodeCertificateIsNoUserOnTheClientAPI(t *testing.T) {
	t.Parallel()
	clientCA := newTestPKI(t)
	p := newTestPKI(t)
	tc := NewTestCluster(t, 2, func(c *Config) {
		p.node(c)
		c.TLSClientCA = filepath.Join(clientCA.dir, "ca.pem")
	})
	for _, id := range tc.IDs() {
		waitAdmin(t, tc.Node(id))
	}
	ctx := testCtx(t)
	a := tc.Admin("n1")
	if _, err := a.CreateQueue(ctx, "kept", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), "kept"), "m", 3)

	n1 := tc.Node("n1")
	for what, o := range map[string]client.Options{
		"a never-joined node's certificate, the cluster CA's": p.nodeClient(t, "n4"),
		"a node certificate of --tls-client-ca":               clientCA.nodeClient(t, "n1"),
	} {
		// The client's TLS verifies the nodes with the cluster CA.
		o.TLS.RootCAs = clientOptions(t, n1).TLS.RootCAs
		na, err := client.NewAdmin([]string{n1.Addrs().Client}, o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = na.CreateUser(ctx, "mallory", "mallory-password", []client.Grant{{Pattern: "*", Actions: []string{"all"}}})
		wantErr(t, what+": user create", err, client.ErrNotAuthenticated)
		if err != nil && !strings.Contains(err.Error(), "node certificate is not a user") {
			t.Errorf("%s: refused with %q; want it to say a node certificate is not a user", what, err)
		}
		wantErr(t, what+": queue delete", na.DeleteQueue(ctx, "kept"), client.ErrNotAuthenticated)
		_, _, err = na.Connections(ctx)
		wantErr(t, what+": connection list", err, client.ErrNotAuthenticated)
		na.Close()
		if c, err := client.Dial(ctx, []string{n1.Addrs().Client}, o); err == nil {
			_, err = c.Session(client.AutoAck)
			if err == nil {
				t.Errorf("%s: a connection opened a session", what)
			}
			c.Close()
		} else if !errors.Is(err, client.ErrNotAuthenticated) {
			t.Errorf("%s: dial: %v; want ErrNotAuthenticated", what, err)
		}
	}
	if users, err := a.ListUsers(ctx); err != nil || slices.ContainsFunc(users, func(u client.UserInfo) bool { return u.Name == "mallory" }) {
		t.Fatalf("users after the refusals: %v, %v", users, err)
	}
	checkQueue(t, a, "kept", 3, 0)

	// The connection list still spans both nodes: they ask each other on
	// the peer API, as nodes.
	tc.Dial("n2")
	conns, unreachable, err := a.Connections(ctx)
	if err != nil || len(unreachable) > 0 {
		t.Fatalf("connection list: %+v, unreachable %v, %v", conns, unreachable, err)
	}
	nodes := map[string]bool{}
	for _, c := range conns {
		nodes[c.Node] = true
	}
	if !nodes["n1"] || !nodes["n2"] {
		t.Fatalf("connection list from n1 names connections of %v; want n1's and n2's", nodes)
	}
}

// liarDelegate gossips a node's meta: addresses, serving.
type liarDelegate struct{ meta []byte }

func (d liarDelegate) NodeMeta(int) []byte           { return d.meta }
func (liarDelegate) NotifyMsg([]byte)                {}
func (liarDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (liarDelegate) LocalState(bool) []byte          { return nil }
func (liarDelegate) MergeRemoteState([]byte, bool)   {}

// Gossip names no one: a member that joins gossip with the gossip key and
// a node certificate the cluster CA signed (n4's, a node that never
// joined) under another name, "evil", is heard (alive in every node's
// gossip: the fault landed) but never registered, placed or made a meta
// non-voter, its peer address unable to show a certificate naming evil.
func TestGossip_AMemberWhoseNameNoCertificateProvesStaysOut(t *testing.T) {
	t.Parallel()
	p, tc := newTLSCluster(t, 3)
	ctx := testCtx(t)
	tc.CreateSpread(ctx, map[string]int{"placed": 3})

	pair, err := certs.NewNode(p.ca, "n4", []string{"127.0.0.1"}, certs.CertValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := pair.Write(p.dir, "n4", true)
	if err != nil {
		t.Fatal(err)
	}
	n4, err := certs.LoadNodeTLS("n4", certFile, keyFile, filepath.Join(p.dir, "ca.pem"), "")
	if err != nil {
		t.Fatal(err)
	}
	// Its "peer API" shows n4's certificate.
	peerLn, err := tls.Listen("tcp", "127.0.0.1:0", n4.PeerServer())
	if err != nil {
		t.Fatal(err)
	}
	defer peerLn.Close()
	go func() {
		for {
			c, err := peerLn.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	meta, _ := json.Marshal(nodeMeta{Boot: "liar", Client: peerLn.Addr().String(), Peer: peerLn.Addr().String(), Raft: peerLn.Addr().String(), HTTP: peerLn.Addr().String(), Serving: true})
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
	if err != nil {
		t.Fatal(err)
	}
	conf := memberlist.DefaultLANConfig()
	conf.Name, conf.SecretKey, conf.Delegate = "evil", testGossipKey, liarDelegate{meta}
	conf.BindAddr, conf.AdvertiseAddr, conf.AdvertisePort = "127.0.0.1", "127.0.0.1", nt.GetAutoBindPort()
	conf.Transport = newTLSGossip(nt, n4)
	conf.LogOutput = io.Discard
	ml, err := memberlist.Create(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if _, err := ml.Join([]string{tc.cfgs[0].GossipAddr}); err != nil {
		t.Fatal(err)
	}
	wait.For(untested{t}, 20*time.Second, "evil alive in every node's gossip", func() bool {
		for _, id := range tc.IDs() {
			if !tc.Node(id).gossip.alive("evil") {
				return false
			}
		}
		return true
	})
	wait.Holds(t, 5*time.Second, "evil unregistered, unplaced, out of the meta group", func() bool {
		for _, id := range tc.IDs() {
			nd := tc.Node(id)
			var in bool
			nd.meta.Read(func(m *fsm.Meta) {
				_, in = m.Node("evil")
				for _, d := range m.Destinations() {
					for _, mb := range d.Members {
						in = in || slices.Contains(mb.Replicas, "evil")
					}
				}
			})
			if in || inConfiguration(nd.meta.Raft(), "evil") {
				return false
			}
		}
		return true
	})
	// The proof is what kept it out: a member that shows its own name's
	// certificate proves it.
	for _, id := range tc.IDs() {
		m := metaNode{tc.Node(id)}
		if err := m.Proves(ctx, metagroup.Member{ID: "evil", Peer: peerLn.Addr().String()}); err == nil {
			t.Fatal("evil's peer address proved evil's name")
		}
		if err := m.Proves(ctx, metagroup.Member{ID: "n4", Peer: peerLn.Addr().String()}); err != nil {
			t.Fatalf("n4's certificate did not prove n4: %v", err)
		}
	}
}

// raftAs speaks hashicorp/raft's transport to group on the Raft ports,
// showing node as's certificate.
func raftAs(t *testing.T, p *testPKI, as, group string) *raft.NetworkTransport {
	t.Helper()
	nt, err := certs.LoadNodeTLS(as, filepath.Join(p.dir, as+".pem"), filepath.Join(p.dir, as+"-key.pem"), filepath.Join(p.dir, "ca.pem"), "")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := raftmux.New(ln, nil, func(address string, timeout time.Duration) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", address, nt.PeerClient(""))
	}, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { mux.Close() })
	layer, err := mux.Layer(group)
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 1, Timeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { trans.Close() })
	return trans
}

// The Raft port ties every RPC to its connection's certificate: a removed
// node's certificate, as a leader with a higher term, is refused on the
// meta group and on a member's, as is a member's certificate claiming to
// be another node, or a node's own sent to it; nothing is applied and no
// liar's term is taken. A node
// of the cluster speaking as itself is answered (what the refusals are
// measured against).
func TestRaftPort_ARemovedNodeOrALiarIsRefused(t *testing.T) {
	t.Parallel()
	p, tc := newTLSCluster(t, 3)
	ctx := testCtx(t)
	a := tc.Admin(tc.MetaLeader())
	if _, err := a.CreateQueue(ctx, "kept", client.QueueOptions{Members: 1, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitHost("kept#0")
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(host), client.AutoAck), "kept"), "m", 10)
	victim := tc.Others(tc.MetaLeader())[0]
	if victim == host {
		victim = tc.Others(tc.MetaLeader())[1]
	}
	tc.crashAndRemove(a, victim)
	// target is sent the RPCs; peer, the third node, lies in one and
	// speaks as itself in another.
	target, peer := tc.Others(victim)[0], tc.Others(victim)[1]
	wait.For(t, 10*time.Second, target+" learning that "+victim+" was removed", func() (removed bool) {
		tc.Node(target).meta.Read(func(m *fsm.Meta) { removed = m.Removed(victim) })
		return removed
	})
	nd := tc.Node(target)
	d, ok := nd.meta.Destination("kept")
	if !ok {
		t.Fatal("no queue kept")
	}
	memberGroup := groupID(d, 0)
	terms := func() (meta, member uint64) {
		r, _ := nd.groups.replica("kept#0")
		return nd.meta.Raft().CurrentTerm(), r.Raft().CurrentTerm()
	}
	metaTerm, memberTerm := terms()
	addr := raft.ServerAddress(nd.Addrs().Raft)
	appendAs := func(cert, claimed, group string, term uint64) error {
		req := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(claimed), Addr: []byte(nd.Addrs().Raft)},
			Term: term, Entries: []*raft.Log{{Index: 1 << 40, Term: term, Type: raft.LogCommand, Data: []byte("junk")}}}
		var resp raft.AppendEntriesResponse
		return raftAs(t, p, cert, group).AppendEntries(raft.ServerID(target), addr, &req, &resp)
	}
	for what, err := range map[string]error{
		"removed " + victim + " leading the meta group":           appendAs(victim, victim, metagroup.ID, metaTerm+100),
		"removed " + victim + " leading kept#0's group":           appendAs(victim, victim, memberGroup, memberTerm+100),
		peer + " claiming to be " + target + " on the meta group": appendAs(peer, target, metagroup.ID, metaTerm+100),
		target + "'s own certificate, sent to itself":             appendAs(target, target, metagroup.ID, metaTerm+100),
	} {
		if err == nil {
			t.Errorf("%s: answered; want the connection dropped", what)
		}
	}
	// An election of the group's own may come meanwhile (the removal
	// moves replicas); the liars' term, 100 on, is never taken.
	if m, mb := terms(); m >= metaTerm+100 || mb >= memberTerm+100 {
		t.Fatalf("a refused RPC's term was taken: meta %d -> %d, kept#0 %d -> %d", metaTerm, m, memberTerm, mb)
	}
	checkQueue(t, a, "kept", 10, 0)
	// A node of the cluster, as itself, with a stale term: answered (and
	// told the newer term), changing nothing.
	var resp raft.AppendEntriesResponse
	req := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(peer), Addr: []byte(tc.Node(peer).Addrs().Raft)}, Term: 1}
	if err := raftAs(t, p, peer, metagroup.ID).AppendEntries(raft.ServerID(target), addr, &req, &resp); err != nil || resp.Term < metaTerm {
		t.Fatalf("%s as itself: %v, %+v; want an answer with term %d", peer, err, resp, metaTerm)
	}
}
