package test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"
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

// A node started with the certificates cairn cert makes and
// --admin-password-file serves TLS only and asks who calls: the CLI
// reaches it with --tls-ca (or CAIRN_TLS_CA) and a user's password or
// certificate; without them it exits 3, and a user who may not do a thing
// gets exit status 4. cairn user manages the users; cairn health checks
// the node over HTTPS.
func TestCLITLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustOK(t, nil, "cert", "ca", "--out", dir)
	mustOK(t, nil, "cert", "node", "--ca", dir, "--node-id", "n1", "--hosts", "127.0.0.1,localhost", "--out", dir)
	mustOK(t, nil, "cert", "client", "--ca", dir, "--user", "alice", "--out", dir)
	key := strings.TrimSpace(mustOK(t, nil, "cert", "gossip-key").stdout)
	secret := func(name, pw string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	ca := filepath.Join(dir, "ca.pem")
	s := newServer(t)
	s.extra["tls-cert"], s.extra["tls-key"], s.extra["tls-ca"] = filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), ca
	s.extra["gossip-key"] = key
	s.extra["admin-password-file"] = secret("admin-password", "the-admin-password")
	s.extra["auto-create"] = "false" // the default
	s.tlsCA = ca
	s.start()

	asAdmin := []string{"CAIRN_TLS_CA=" + ca, "CAIRN_USER=admin", "CAIRN_PASSWORD_FILE=" + filepath.Join(dir, "admin-password")}
	srv := []string{"--server", s.addrs.client}
	// The admin is made once the node leads its meta group.
	wait.For(t, 20*time.Second, "user admin creating a queue", func() bool {
		return cli(t, asAdmin, append(srv, "queue", "create", "secure")...).code == 0
	})
	mustOK(t, asAdmin, append(srv, "send", "secure", "--count", "3", "--body", "x")...)
	if line, _ := mustFail(t, asAdmin, append(srv, "send", "secrue", "--body", "x")...); !strings.Contains(line, `"secrue" does not exist: create it with 'cairn queue create secrue'`) {
		t.Errorf("a send to a queue that does not exist, without --auto-create: %q", line)
	}
	mustOK(t, asAdmin, append(srv, "user", "create", "app", "--password-file", secret("app-password", "the-app-password"), "--permit", "send:secure", "--permit", "manage:other")...)
	mustOK(t, asAdmin, append(srv, "user", "create", "alice", "--permit", "receive:secure", "--permit", "browse:secure")...)
	mustOK(t, asAdmin, append(srv, "user", "revoke", "app", "manage:other")...)
	mustOK(t, asAdmin, append(srv, "user", "permit", "app", "browse:secure")...)
	users := jsonObject(t, mustOK(t, asAdmin, append(srv, "user", "list", "--json")...).stdout)
	if list, _ := users["users"].([]any); len(list) != 3 {
		t.Errorf("user list --json: %v; want admin, alice and app", users)
	} else {
		requireFields(t, "a user", list[0].(map[string]any), "name:string", "has_password:bool", "grants:array")
	}
	// The caller's --password-file before the command, the new user's after.
	mustOK(t, nil, append(srv, "--tls-ca", ca, "--user", "admin", "--password-file", filepath.Join(dir, "admin-password"),
		"user", "create", "bob", "--password-file", secret("bob-password", "the-bob-password"))...)
	mustOK(t, []string{"CAIRN_TLS_CA=" + ca, "CAIRN_USER=bob", "CAIRN_PASSWORD=the-bob-password"}, append(srv, "queue", "list")...)
	mustOK(t, asAdmin, append(srv, "user", "delete", "bob")...)

	got := jsonLines(t, mustOK(t, nil, append(srv, "--tls-ca", ca, "--tls-cert", filepath.Join(dir, "alice.pem"),
		"--tls-key", filepath.Join(dir, "alice-key.pem"), "receive", "secure", "--count", "3", "--json")...).stdout)
	if len(got) != 3 {
		t.Errorf("alice received %d messages over TLS; want 3", len(got))
	}
	asApp := []string{"CAIRN_TLS_CA=" + ca, "CAIRN_USER=app", "CAIRN_PASSWORD=the-app-password"}
	mustOK(t, asApp, append(srv, "send", "secure", "--body", "y")...)
	if line, r := mustFail(t, asApp, append(srv, "queue", "purge", "secure")...); r.code != 4 || !strings.Contains(line, "not authorised: manage on secure") {
		t.Errorf("app's purge: exit %d, %s; want exit 4, not authorised: manage on secure", r.code, line)
	}
	if app := jsonObject(t, mustOK(t, asAdmin, append(srv, "user", "list", "--json")...).stdout); !strings.Contains(fmt.Sprint(app), "[map[actions:[send browse] pattern:secure]]") {
		t.Errorf("app after permit browse and revoke manage: %v", app)
	}
	if line, r := mustFail(t, []string{"CAIRN_TLS_CA=" + ca}, append(srv, "queue", "list")...); r.code != 3 || !strings.Contains(line, "--user") {
		t.Errorf("no credentials: exit %d, %s; want exit 3, naming --user", r.code, line)
	}
	mustOK(t, []string{"CAIRN_TLS_CA=" + ca, "CAIRN_HTTP_ADDR=" + s.addrs.http}, "health")

	line, _ := s.fails("queue", "list")
	if !strings.Contains(line, "TLS") {
		t.Errorf("the error without --tls-ca does not say TLS may be the cause: %s", line)
	}
	other := t.TempDir()
	mustOK(t, nil, "cert", "ca", "--out", other)
	line, _ = s.fails("--tls-ca", filepath.Join(other, "ca.pem"), "queue", "list")
	if !strings.Contains(line, "certificate") {
		t.Errorf("the error with another CA does not name the certificate: %s", line)
	}
	line, _ = s.fails("--tls-cert", filepath.Join(dir, "alice.pem"), "queue", "list")
	if !strings.Contains(line, "--tls-ca") {
		t.Errorf("--tls-cert without --tls-ca: %s", line)
	}
}
