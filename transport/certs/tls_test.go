package certs

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// pki is a CA and certificates written to a directory, as cairn cert
// writes them.
type pki struct {
	t   *testing.T
	dir string
	ca  Pair
}

func newPKI(t *testing.T) *pki {
	ca, err := NewCA(CAValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: t.TempDir(), ca: ca}
	if _, _, err := ca.Write(p.dir, "ca", false); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) caFile() string { return filepath.Join(p.dir, "ca.pem") }

// node writes node id's certificate and returns its files.
func (p *pki) node(id string) (cert, key string) {
	pair, err := NewNode(p.ca, id, []string{"127.0.0.1"}, CertValidity, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(pair, id)
}

func (p *pki) user(name string) (cert, key string) {
	pair, err := NewUser(p.ca, name, CertValidity, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(pair, name)
}

func (p *pki) write(pair Pair, name string) (cert, key string) {
	cert, key, err := pair.Write(p.dir, name, false)
	if err != nil {
		p.t.Fatal(err)
	}
	return cert, key
}

func (p *pki) nodeTLS(id string) *NodeTLS {
	cert, key := p.node(id)
	nt, err := LoadNodeTLS(id, cert, key, p.caFile(), "")
	if err != nil {
		p.t.Fatal(err)
	}
	return nt
}

// handshake runs a TLS handshake between a client and a server config and
// returns each side's error.
func handshake(t *testing.T, client, server *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(b, server)
		err := s.Handshake()
		if err == nil {
			// A TLS 1.3 client learns of a refused certificate on its
			// first read: the server's side ends with the handshake.
			_, err = s.Write([]byte{1})
		}
		b.Close()
		done <- err
	}()
	c := tls.Client(a, client)
	clientErr = c.Handshake()
	if clientErr == nil {
		_, clientErr = c.Read(make([]byte, 1))
	}
	a.Close()
	return clientErr, <-done
}

// The peer ports take a node of the cluster, and a node dialing one takes
// only the node it meant: a user's certificate, no certificate, another
// CA's node and the wrong node are each refused with ErrNotANode.
func TestNodeTLS_OnlyNodesOfTheClusterMeetOnPeerPorts(t *testing.T) {
	p := newPKI(t)
	n1, n2 := p.nodeTLS("n1"), p.nodeTLS("n2")
	if cerr, serr := handshake(t, n2.PeerClient("n1"), n1.PeerServer()); cerr != nil || serr != nil {
		t.Fatalf("node n2 dialing n1: client %v, server %v", cerr, serr)
	}
	if cerr, _ := handshake(t, n2.PeerClient("n3"), n1.PeerServer()); !errors.Is(cerr, ErrNotANode) {
		t.Errorf("n2 dialing n3 and reaching n1: %v; want ErrNotANode", cerr)
	}
	userCert, userKey := p.user("alice")
	user, err := ClientTLS(p.caFile(), userCert, userKey)
	if err != nil {
		t.Fatal(err)
	}
	user.InsecureSkipVerify = true // the server is not what is tested
	if _, serr := handshake(t, user, n1.PeerServer()); !errors.Is(serr, ErrNotANode) {
		t.Errorf("a user's certificate on a peer port: %v; want ErrNotANode", serr)
	}
	if _, serr := handshake(t, &tls.Config{InsecureSkipVerify: true}, n1.PeerServer()); serr == nil {
		t.Error("a peer port took a caller without a certificate")
	}
	other := newPKI(t).nodeTLS("n1")
	otherDialing := other.PeerClient("n1")
	otherDialing.VerifyConnection = nil // the server is not what is tested
	if _, serr := handshake(t, otherDialing, n1.PeerServer()); !errors.Is(serr, ErrNotANode) {
		t.Errorf("another cluster's node on a peer port: %v; want ErrNotANode", serr)
	}
	if cerr, _ := handshake(t, n2.PeerClient("n1"), other.PeerServer()); !errors.Is(cerr, ErrNotANode) {
		t.Errorf("dialing another cluster's node: %v; want ErrNotANode", cerr)
	}
}

// The client port takes clients with and without certificates, verifies
// the certificates it is shown, and a client verifies the node by its CA
// and the host dialled.
func TestNodeTLS_ClientPort(t *testing.T) {
	p := newPKI(t)
	n1 := p.nodeTLS("n1")
	plain, err := ClientTLS(p.caFile(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	plain.ServerName = "127.0.0.1"
	if cerr, serr := handshake(t, plain, n1.ClientServer()); cerr != nil || serr != nil {
		t.Fatalf("a client without a certificate: client %v, server %v", cerr, serr)
	}
	userCert, userKey := p.user("alice")
	user, err := ClientTLS(p.caFile(), userCert, userKey)
	if err != nil {
		t.Fatal(err)
	}
	user.ServerName = "127.0.0.1"
	if cerr, serr := handshake(t, user, n1.ClientServer()); cerr != nil || serr != nil {
		t.Fatalf("a client with a certificate: client %v, server %v", cerr, serr)
	}
	stranger := newPKI(t)
	sCert, sKey := stranger.user("mallory")
	forged, err := ClientTLS(p.caFile(), sCert, sKey)
	if err != nil {
		t.Fatal(err)
	}
	forged.ServerName = "127.0.0.1"
	if _, serr := handshake(t, forged, n1.ClientServer()); serr == nil {
		t.Error("the client port took a certificate another CA signed")
	}
	wrongCA, err := ClientTLS(stranger.caFile(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	wrongCA.ServerName = "127.0.0.1"
	if cerr, _ := handshake(t, wrongCA, n1.ClientServer()); cerr == nil {
		t.Error("a client trusting another CA took the node's certificate")
	}
}

// A node's TLS material must name the node and be signed by the CA given;
// a client's certificate and key go together.
func TestLoadNodeTLS_RefusesWhatIsNotTheNodes(t *testing.T) {
	p := newPKI(t)
	cert, key := p.node("n1")
	if _, err := LoadNodeTLS("n2", cert, key, p.caFile(), ""); !errors.Is(err, ErrNotANode) {
		t.Errorf("n1's certificate loaded as n2's: %v; want ErrNotANode", err)
	}
	if _, err := LoadNodeTLS("n1", cert, key, newPKI(t).caFile(), ""); !errors.Is(err, ErrNotANode) {
		t.Errorf("a certificate loaded with another CA: %v; want ErrNotANode", err)
	}
	uCert, uKey := p.user("alice")
	if _, err := LoadNodeTLS("alice", uCert, uKey, p.caFile(), ""); !errors.Is(err, ErrNotANode) {
		t.Errorf("a user's certificate loaded as a node's: %v; want ErrNotANode", err)
	}
	if _, err := LoadNodeTLS("n1", cert, uKey, p.caFile(), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("a certificate with another's key: %v; want ErrInvalid", err)
	}
	if _, err := LoadNodeTLS("n1", cert, key, filepath.Join(p.dir, "missing.pem"), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("a missing CA file: %v; want ErrInvalid", err)
	}
	if _, err := ClientTLS(p.caFile(), uCert, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("--tls-cert without --tls-key: %v; want ErrInvalid", err)
	}
}
