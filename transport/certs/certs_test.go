package certs

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func verify(t *testing.T, ca Pair, c *x509.Certificate, usage x509.ExtKeyUsage, host string) error {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// A node certificate serves and dials for the hosts it names, and says the
// node's id; a user certificate dials only, and says the user's; another
// CA's certificates do not verify; a bad name or host is refused.
func TestCertificates_VerifyForWhatTheyAreFor(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(CAValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	node, err := NewNode(ca, "cairn-0", []string{"cairn-0.cairn", "localhost", "127.0.0.1", "::1"}, CertValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"cairn-0.cairn", "localhost", "127.0.0.1", "::1"} {
		if err := verify(t, ca, node.Cert, x509.ExtKeyUsageServerAuth, host); err != nil {
			t.Errorf("node certificate serving %s: %v", host, err)
		}
	}
	if err := verify(t, ca, node.Cert, x509.ExtKeyUsageServerAuth, "cairn-1.cairn"); err == nil {
		t.Error("node certificate verified for a host it does not name")
	}
	if err := verify(t, ca, node.Cert, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("node certificate dialing: %v", err)
	}
	if kind, name, ok := Identity(node.Cert); !ok || kind != KindNode || name != "cairn-0" {
		t.Errorf("node identity %q %q %v", kind, name, ok)
	}

	user, err := NewUser(ca, "billing", CertValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, ca, user.Cert, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("user certificate dialing: %v", err)
	}
	if err := verify(t, ca, user.Cert, x509.ExtKeyUsageServerAuth, ""); err == nil {
		t.Error("a user certificate verified for serving")
	}
	if kind, name, ok := Identity(user.Cert); !ok || kind != KindUser || name != "billing" {
		t.Errorf("user identity %q %q %v", kind, name, ok)
	}
	if _, _, ok := Identity(ca.Cert); ok {
		t.Error("the CA certificate names an identity")
	}

	other, err := NewCA(CAValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := NewNode(other, "cairn-0", []string{"localhost"}, CertValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, ca, stranger.Cert, x509.ExtKeyUsageClientAuth, ""); err == nil {
		t.Error("another CA's node certificate verified")
	}

	for name, err := range map[string]error{
		"node id with a slash": func() error { _, err := NewNode(ca, "../n1", []string{"h"}, CertValidity, now); return err }(),
		"no hosts":             func() error { _, err := NewNode(ca, "n1", nil, CertValidity, now); return err }(),
		"a URL as host":        func() error { _, err := NewNode(ca, "n1", []string{"https://h"}, CertValidity, now); return err }(),
		"empty user":           func() error { _, err := NewUser(ca, "", CertValidity, now); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// Written pairs read back; a key is its owner's alone; nothing is replaced
// without force; a key that is not the certificate's is refused.
func TestPair_WriteAndReadCA(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA(CAValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.Write(dir, "ca", false)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file %s: %v, %v; want mode 0600", keyFile, fi.Mode(), err)
	}
	back, err := ReadCA(dir)
	if err != nil || !back.Cert.Equal(ca.Cert) || !back.Key.Equal(ca.Key) {
		t.Fatalf("ReadCA: %v", err)
	}
	if _, _, err := ca.Write(dir, "ca", false); !errors.Is(err, ErrInvalid) {
		t.Errorf("writing over %s: %v, want ErrInvalid", certFile, err)
	}
	other, err := NewCA(CAValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forced := t.TempDir()
	if _, _, err := ca.Write(forced, "ca", false); err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := other.Write(forced, "ca", true)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ReadCA(forced); err != nil || !back.Cert.Equal(other.Cert) {
		t.Fatalf("ReadCA after a forced write: %v", err)
	}
	if _, err := ReadCA(t.TempDir()); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadCA of an empty directory: %v", err)
	}
	// Mismatched: the first CA's certificate with the other's key.
	mixed := t.TempDir()
	if _, _, err := ca.Write(mixed, "ca", false); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mixed, "ca-key.pem"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCA(mixed); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadCA of a certificate with another key: %v", err)
	}
}
