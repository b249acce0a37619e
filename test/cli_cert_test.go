package test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `cairn cert` makes a CA, a node certificate valid for its hosts, for
// serving and dialing, and a user's client certificate, in the files the
// contract names; it refuses to replace a file, and a bad node id, before
// writing anything.
func TestCLICert(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustOK(t, nil, "cert", "ca", "--out", dir)
	mustOK(t, nil, "cert", "node", "--ca", dir, "--node-id", "cairn-0", "--hosts", "cairn-0.cairn,127.0.0.1", "--out", dir)
	mustOK(t, nil, "cert", "client", "--ca", dir, "--user", "billing", "--out", dir)
	read := func(name string) *x509.Certificate {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s holds no PEM block", name)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	roots := x509.NewCertPool()
	roots.AddCert(read("ca.pem"))
	node, user := read("cairn-0.pem"), read("billing.pem")
	for _, c := range []struct {
		what  string
		cert  *x509.Certificate
		host  string
		usage x509.ExtKeyUsage
	}{
		{"the node serving", node, "cairn-0.cairn", x509.ExtKeyUsageServerAuth},
		{"the node serving its address", node, "127.0.0.1", x509.ExtKeyUsageServerAuth},
		{"the node dialing", node, "", x509.ExtKeyUsageClientAuth},
		{"the user dialing", user, "", x509.ExtKeyUsageClientAuth},
	} {
		if _, err := c.cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.host, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
	}
	for _, key := range []string{"ca-key.pem", "cairn-0-key.pem", "billing-key.pem"} {
		if fi, err := os.Stat(filepath.Join(dir, key)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v; want mode 0600", key, err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"cert", "ca", "--out", dir}, "exists"},
		{[]string{"cert", "node", "--ca", dir, "--node-id", "../n1", "--hosts", "h", "--out", dir}, "node id"},
		{[]string{"cert", "node", "--ca", t.TempDir(), "--node-id", "n1", "--hosts", "h", "--out", dir}, "cairn cert ca"},
		{[]string{"cert", "client", "--ca", dir, "--out", dir}, "user"},
	} {
		if line, _ := mustFail(t, nil, c.args...); !strings.Contains(line, c.says) {
			t.Errorf("cairn %s: %q does not say %q", strings.Join(c.args, " "), line, c.says)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(after) != string(before) {
		t.Error("a refused cairn cert ca replaced ca.pem")
	}
}

// A node started with the certificates cairn cert makes serves TLS only:
// the CLI reaches it with --tls-ca (or CAIRN_TLS_CA), and is refused with
// a clear error without it or with another CA; cairn health checks it over
// HTTPS.
func TestCLITLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustOK(t, nil, "cert", "ca", "--out", dir)
	mustOK(t, nil, "cert", "node", "--ca", dir, "--node-id", "n1", "--hosts", "127.0.0.1,localhost", "--out", dir)
	mustOK(t, nil, "cert", "client", "--ca", dir, "--user", "alice", "--out", dir)
	key := strings.TrimSpace(mustOK(t, nil, "cert", "gossip-key").stdout)
	ca := filepath.Join(dir, "ca.pem")
	s := newServer(t)
	s.extra["tls-cert"], s.extra["tls-key"], s.extra["tls-ca"] = filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), ca
	s.extra["gossip-key"] = key
	s.tlsCA = ca
	s.start()

	s.ok("--tls-ca", ca, "queue", "create", "secure")
	env := []string{"CAIRN_TLS_CA=" + ca}
	mustOK(t, env, "--server", s.addrs.client, "send", "secure", "--count", "3", "--body", "x")
	got := jsonLines(t, mustOK(t, nil, "--server", s.addrs.client, "--tls-ca", ca, "--tls-cert", filepath.Join(dir, "alice.pem"),
		"--tls-key", filepath.Join(dir, "alice-key.pem"), "receive", "secure", "--count", "3", "--json").stdout)
	if len(got) != 3 {
		t.Errorf("received %d messages over TLS; want 3", len(got))
	}
	mustOK(t, append(env, "CAIRN_HTTP_ADDR="+s.addrs.http), "health")

	line, _ := s.fails("queue", "list")
	t.Logf("without --tls-ca: %s", line)
	if !strings.Contains(line, "TLS") {
		t.Errorf("the error without --tls-ca does not say TLS may be the cause: %s", line)
	}
	other := t.TempDir()
	mustOK(t, nil, "cert", "ca", "--out", other)
	line, _ = s.fails("--tls-ca", filepath.Join(other, "ca.pem"), "queue", "list")
	t.Logf("with another CA: %s", line)
	if !strings.Contains(line, "certificate") {
		t.Errorf("the error with another CA does not name the certificate: %s", line)
	}
	line, _ = s.fails("--tls-cert", filepath.Join(dir, "alice.pem"), "queue", "list")
	if !strings.Contains(line, "--tls-ca") {
		t.Errorf("--tls-cert without --tls-ca: %s", line)
	}
}
