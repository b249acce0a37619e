package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/test/wait"
	"github.com/cairnmq/cairn/transport/certs"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// testPKI is a cluster CA in a directory, and the certificates it signed
// there, as cairn cert writes them.
type testPKI struct {
	t   *testing.T
	dir string
	ca  certs.Pair
	mu  sync.Mutex
}

var testGossipKey = bytes.Repeat([]byte{7}, 32)

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := certs.NewCA(certs.CAValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	if _, _, err := ca.Write(p.dir, "ca", false); err != nil {
		t.Fatal(err)
	}
	return p
}

// testAdminPassword is user admin's in a cluster of testPKI's nodes.
const testAdminPassword = "admin-password-for-tests"

// node is an option giving a node a certificate of its own id signed by
// the CA, TLS on, the gossip key TLS needs, and user admin's password.
func (p *testPKI) node(c *Config) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pair, err := certs.NewNode(p.ca, c.NodeID, []string{"127.0.0.1"}, certs.CertValidity, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	if c.TLSCert, c.TLSKey, err = pair.Write(p.dir, c.NodeID, true); err != nil {
		p.t.Fatal(err)
	}
	c.TLSCA, c.GossipKey = filepath.Join(p.dir, "ca.pem"), testGossipKey
	c.AdminPasswordFile = filepath.Join(p.dir, "admin-password")
	if err := os.WriteFile(c.AdminPasswordFile, []byte(testAdminPassword+"\n"), 0o600); err != nil {
		p.t.Fatal(err)
	}
}

// waitAdmin waits until user admin exists, as n's meta replica holds it.
func waitAdmin(t *testing.T, n *Node) {
	t.Helper()
	wait.For(t, 20*time.Second, "user admin made from --admin-password-file", func() (ok bool) {
		n.meta.Read(func(m *fsm.Meta) { _, ok = m.User(AdminUser) })
		return ok
	})
}

// newTLSCluster is a cluster of n nodes with TLS on, once user admin
// exists on every node.
func newTLSCluster(t *testing.T, n int) (*testPKI, *TestCluster) {
	t.Helper()
	p := newTestPKI(t)
	tc := NewTestCluster(t, n, p.node)
	for _, id := range tc.IDs() {
		waitAdmin(t, tc.Node(id))
	}
	return p, tc
}

// user writes a user certificate and returns a TLS configuration showing it.
func (p *testPKI) user(name string) *tls.Config {
	pair, err := certs.NewUser(p.ca, name, certs.CertValidity, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	cert, key, err := pair.Write(p.dir, name, true)
	if err != nil {
		p.t.Fatal(err)
	}
	tc, err := certs.ClientTLS(filepath.Join(p.dir, "ca.pem"), cert, key)
	if err != nil {
		p.t.Fatal(err)
	}
	return tc
}

// With TLS on, a three-node cluster forms and serves over TLS alone: a
// queue spread over the nodes takes sends forwarded between them and
// gives them back; a client in clear is not served, nor is HTTP in clear;
// the peer API refuses a user's certificate; a node whose certificate
// another CA signed is never registered, though it has the gossip key.
func TestTLS_TheClusterSpeaksTLSOnly(t *testing.T) {
	t.Parallel()
	p, tc := newTLSCluster(t, 3)
	ctx := testCtx(t)
	tc.CreateSpread(ctx, map[string]int{"secure": 3})
	s := mustSession(t, tc.Dial("n1", func(o *client.Options) { o.NoDirectSends = true }), client.AutoAck)
	var sent []string
	for i := range uint32(3) {
		name := fsm.MemberName("secure", i)
		sent = append(sent, sendN(t, ctx, mustProducer(t, s, name), name+"/", 5)...)
	}
	sameSet(t, "received over TLS", drainMembers(t, mustSession(t, tc.Dial("n2"), client.ClientAck), "secure", 3, len(sent)), sent)

	n1 := tc.Node("n1")
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c, err := client.Dial(dctx, []string{n1.Addrs().Client}, client.Options{}); err == nil {
		c.Close()
		t.Error("a client in clear was served")
	}
	if resp, err := http.Get("http://" + n1.Addrs().HTTP + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("HTTP in clear answered /healthz")
		}
	}
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: clientOptions(t, n1).TLS}}
	resp, err := https.Get("https://" + n1.Addrs().HTTP + "/healthz")
	if err != nil {
		t.Fatalf("/healthz over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz over TLS: %s", resp.Status)
	}

	for what, creds := range map[string]grpc.DialOption{
		"a user's certificate": grpc.WithTransportCredentials(credentials.NewTLS(p.user("alice"))),
		"no TLS":               grpc.WithTransportCredentials(insecure.NewCredentials()),
	} {
		cc, err := grpc.NewClient(n1.Addrs().Peer, creds)
		if err != nil {
			t.Fatal(err)
		}
		_, err = peerpb.NewPeerServiceClient(cc).Member(stepCtx(t, 5*time.Second), &peerpb.MemberRequest{Member: "secure#0"})
		cc.Close()
		if err == nil {
			t.Errorf("the peer API answered a caller with %s", what)
		}
	}

	// The Raft port: a user's certificate, or a stranger in clear, gets
	// nothing but the connection's end.
	for what, dial := range map[string]func() (net.Conn, error){
		"a user's certificate": func() (net.Conn, error) {
			cfg := p.user("bob")
			cfg.InsecureSkipVerify = true // the node is not what is tested
			return tls.Dial("tcp", n1.Addrs().Raft, cfg)
		},
		"no TLS": func() (net.Conn, error) { return net.Dial("tcp", n1.Addrs().Raft) },
	} {
		conn, err := dial()
		if err != nil {
			// A TLS 1.3 client ends its handshake before the server
			// has checked its certificate: the port must speak TLS.
			t.Errorf("the Raft port with %s: %v", what, err)
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte("\x01meta\x00\x00\x00\x00"))
		if n, err := conn.Read(make([]byte, 64)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the Raft port answered a caller with %s: %d bytes, %v", what, n, err)
		}
		conn.Close()
	}

	other := newTestPKI(t)
	stranger, err := Start(TestConfig(t, t.TempDir(), func(c *Config) {
		c.NodeID, c.BootstrapExpect, c.Join = "n9", 0, []string{tc.cfgs[0].GossipAddr}
		other.node(c)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer haltNode(stranger, false, 20*time.Second)
	wait.Holds(t, 3*time.Second, "a node of another CA stays out", func() bool {
		var known bool
		n1.meta.Read(func(m *fsm.Meta) { _, known = m.Node("n9") })
		return !known && !n1.gossip.alive("n9")
	})
}

// A node started with another node's certificate, or without the gossip
// key TLS needs, is refused before it binds anything.
func TestTLS_ConfigRefusals(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	for what, c := range map[string]func(*Config){
		"another node's certificate": func(c *Config) {
			p.node(c)
			c.NodeID = "n2"
		},
		"no gossip key": func(c *Config) {
			p.node(c)
			c.GossipKey = nil
		},
		"a certificate without a CA": func(c *Config) {
			p.node(c)
			c.TLSCA = ""
		},
	} {
		_, err := Start(TestConfig(t, t.TempDir(), c))
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v; want ErrConfig", what, err)
		}
	}
}

// The peer API applies the client API's checks: the meta leader refuses a
// RemoveNode of a live node that comes to it from another node, and the
// node stays registered.
func TestPeerAPI_RefusesWhatTheClientAPIRefuses(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	leader := tc.MetaLeader()
	victim := tc.Others(leader)[0]
	cmd, err := fsm.NewCommand(&fsmpb.RemoveNode{Id: victim})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tc.Node(tc.Others(leader)[1]).peers.client(leader)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.MetaApply(testCtx(t), &peerpb.MetaApplyRequest{Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetResult().GetReject() == "" {
		t.Fatalf("the meta leader applied a RemoveNode of live node %s from a peer: %v", victim, resp)
	}
	var registered bool
	tc.Node(leader).meta.Read(func(m *fsm.Meta) { _, registered = m.Node(victim) })
	if !registered {
		t.Fatalf("node %s was removed", victim)
	}
}

// A node the cluster removed is refused by the peer API though its
// certificate is still valid; a node of the cluster is served.
func TestPeerAPI_RefusesARemovedNodesCertificate(t *testing.T) {
	t.Parallel()
	p, tc := newTLSCluster(t, 3)
	leader := tc.MetaLeader()
	victim, asker := tc.Others(leader)[0], tc.Others(leader)[1]
	tc.crashAndRemove(tc.Admin(leader), victim)

	call := func(as string) error {
		nt, err := certs.LoadNodeTLS(as, filepath.Join(p.dir, as+".pem"), filepath.Join(p.dir, as+"-key.pem"), filepath.Join(p.dir, "ca.pem"), "")
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(tc.Node(asker).Addrs().Peer, grpc.WithTransportCredentials(credentials.NewTLS(nt.PeerClient(asker))))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		_, err = peerpb.NewPeerServiceClient(cc).Groups(stepCtx(t, 5*time.Second), &peerpb.GroupsRequest{})
		return err
	}
	wait.For(t, 10*time.Second, asker+" learning that "+victim+" was removed", func() (removed bool) {
		tc.Node(asker).meta.Read(func(m *fsm.Meta) { removed = m.Removed(victim) })
		return removed
	})
	if err := call(victim); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the peer API with removed %s's certificate: %v, want PermissionDenied", victim, err)
	}
	if err := call(leader); err != nil {
		t.Errorf("the peer API with %s's certificate: %v", leader, err)
	}
}
