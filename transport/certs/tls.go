package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrNotANode is wrapped by a TLS handshake refused because the other side
// did not prove itself a node of the cluster: no certificate, one the
// cluster's CA did not sign, a user's, or another node's than the one
// dialled.
var ErrNotANode = errors.New("not a node of this cluster")

// NodeTLS is a node's TLS material: its certificate, the cluster's CA that
// every node's certificate is signed by, and the CAs a client certificate
// may be signed by.
type NodeTLS struct {
	cert    tls.Certificate
	leaf    *x509.Certificate
	cluster *x509.CertPool
	clients *x509.CertPool
}

// Names are the DNS names the node's certificate serves.
func (t *NodeTLS) Names() []string { return t.leaf.DNSNames }

// LoadNodeTLS reads node id's certificate and key, the cluster's CA and,
// if clientCAFile is not empty, another CA for client certificates (the
// cluster's CA signs client certificates too). The certificate must name
// node id and be signed by the cluster's CA.
func LoadNodeTLS(id, certFile, keyFile, caFile, clientCAFile string) (*NodeTLS, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: --tls-cert %s, --tls-key %s: %v", ErrInvalid, certFile, keyFile, err)
	}
	cluster, err := readPool("--tls-ca", caFile)
	if err != nil {
		return nil, err
	}
	// The cluster's CA signs users' client certificates too (cairn cert
	// client); a node's is no identity on the client API.
	clients := cluster.Clone()
	if clientCAFile != "" {
		if err := appendPEM(clients, "--tls-client-ca", clientCAFile); err != nil {
			return nil, err
		}
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: --tls-cert %s: %v", ErrInvalid, certFile, err)
	}
	if err := verifyNode(leaf, cert.Certificate[1:], cluster, x509.ExtKeyUsageServerAuth, id); err != nil {
		return nil, fmt.Errorf("--tls-cert %s: %w (make it with cairn cert node --node-id %s)", certFile, err, id)
	}
	return &NodeTLS{cert: cert, leaf: leaf, cluster: cluster, clients: clients}, nil
}

// PeerServer is the TLS configuration of the ports only nodes use (peer
// API, Raft, gossip's streams): the caller must present a node's
// certificate signed by the cluster's CA.
func (t *NodeTLS) PeerServer() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return t.verifyPeer(cs, x509.ExtKeyUsageClientAuth, "")
		},
	}
}

// PeerClient is the TLS configuration for dialing another node: it shows
// this node's certificate and accepts only a node's signed by the
// cluster's CA, node's own when node is not empty. A node is known by the
// identity its certificate names, not by the host name it was dialled at.
func (t *NodeTLS) PeerClient(node string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{t.cert},
		InsecureSkipVerify: true, // VerifyConnection verifies the chain and the identity
		VerifyConnection: func(cs tls.ConnectionState) error {
			return t.verifyPeer(cs, x509.ExtKeyUsageServerAuth, node)
		},
	}
}

// ClientServer is the TLS configuration of the ports clients use (client
// API, HTTP): a client certificate is verified when one is presented.
func (t *NodeTLS) ClientServer() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{t.cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    t.clients,
	}
}

func (t *NodeTLS) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage, node string) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: it presented no certificate", ErrNotANode)
	}
	var chain [][]byte
	for _, c := range cs.PeerCertificates[1:] {
		chain = append(chain, c.Raw)
	}
	return verifyNode(cs.PeerCertificates[0], chain, t.cluster, usage, node)
}

// verifyNode checks that c, with the intermediates in chain, is signed by
// roots for usage and names a node, node when it is not empty.
func verifyNode(c *x509.Certificate, chain [][]byte, roots *x509.CertPool, usage x509.ExtKeyUsage, node string) error {
	inter := x509.NewCertPool()
	for _, der := range chain {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%w: certificate %q: %v", ErrNotANode, c.Subject.CommonName, err)
	}
	kind, name, ok := Identity(c)
	switch {
	case !ok || kind != KindNode:
		return fmt.Errorf("%w: certificate %q names no node", ErrNotANode, c.Subject.CommonName)
	case node != "" && name != node:
		return fmt.Errorf("%w: certificate of node %q, not of node %q", ErrNotANode, name, node)
	}
	return nil
}

// ClientTLS is a client's TLS configuration: the servers' certificates
// verified by the CA in caFile (as any TLS client does, with the host name
// dialled), and certFile and keyFile, when given, presented as the
// client's identity.
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	roots, err := readPool("--tls-ca", caFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --tls-cert %s, --tls-key %s: %v", ErrInvalid, certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together", ErrInvalid)
	}
	return cfg, nil
}

func readPool(flag, file string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	return pool, appendPEM(pool, flag, file)
}

func appendPEM(pool *x509.CertPool, flag, file string) error {
	pem, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, flag, err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%w: %s %s holds no PEM certificate", ErrInvalid, flag, file)
	}
	return nil
}
