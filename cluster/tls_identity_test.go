package cluster

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"
	"github.com/cairnmq/cairn/transport/certs"
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
