package cluster

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// A bad flag value is an ErrConfig that names the flag, before anything is
// opened; every log store kind the flag offers is accepted.
func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	valid := func() Config {
		c := Config{NodeID: "n1", DataDir: t.TempDir()}
		c.setDefaults()
		return c
	}
	for _, store := range []string{"", "bolt", "wal"} {
		c := valid()
		c.LogStore = store
		if err := c.validate(); err != nil {
			t.Errorf("--log-store %q: %v", store, err)
		}
	}
	for _, bad := range []struct {
		flag   string
		change func(*Config)
	}{
		{"--node-id", func(c *Config) { c.NodeID = "" }},
		{"--bootstrap-expect", func(c *Config) { c.BootstrapExpect = -1 }},
		{"--log-store", func(c *Config) { c.LogStore = "rocks" }},
		{"--body-memory-mib", func(c *Config) { c.BodyMemoryMiB = -2 }},
		{"--client-addr", func(c *Config) { c.ClientAddr = "7650" }},
		{"--max-message-bytes", func(c *Config) { c.MaxMessageBytes = -1 }},
		{"--max-message-bytes", func(c *Config) { c.MaxMessageBytes = MaxMaxMessageBytes + 1 }},
		{"--gossip-key", func(c *Config) { c.GossipKey = []byte("short") }},
		{"--min-free-disk-mib", func(c *Config) { c.MinFreeDiskMiB = -2 }},
		{"--max-sessions", func(c *Config) { c.MaxSessions = -1 }},
	} {
		c := valid()
		bad.change(&c)
		err := c.validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), bad.flag) {
			t.Errorf("bad %s: %v, want ErrConfig naming the flag", bad.flag, err)
		}
	}
}

// An open node serves its own host only: its addresses on every
// interface become 127.0.0.1's, and one on another interface, or an
// --advertise others would reach it at, is refused, unless
// --insecure-allow-remote (or TLS) says otherwise.
func TestConfig_AnOpenNodeIsLocal(t *testing.T) {
	base := func(mod func(*Config)) Config {
		c := Config{NodeID: "n1", DataDir: t.TempDir()}
		c.setDefaults()
		if mod != nil {
			mod(&c)
		}
		return c
	}
	c := base(nil)
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.listenAddrs() {
		if host, _, _ := net.SplitHostPort(*a.addr); host != "127.0.0.1" {
			t.Errorf("%s of an open node: %s; want 127.0.0.1's", a.flag, *a.addr)
		}
	}
	for what, mod := range map[string]func(*Config){
		"--client-addr on another interface": func(c *Config) { c.ClientAddr = "192.0.2.10:7650" },
		"--raft-addr on another interface":   func(c *Config) { c.RaftAddr = "192.0.2.10:7652" },
		"--gossip-addr by name":              func(c *Config) { c.GossipAddr = "cairn-0:7653" },
		"--advertise another address":        func(c *Config) { c.Advertise = "192.0.2.10" },
	} {
		c := base(mod)
		err := c.validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--insecure-allow-remote") {
			t.Errorf("%s: %v; want ErrConfig naming --insecure-allow-remote", what, err)
		}
	}
	for what, mod := range map[string]func(*Config){
		"--insecure-allow-remote": func(c *Config) { c.InsecureAllowRemote = true },
		"TLS": func(c *Config) {
			c.TLSCert, c.TLSKey, c.TLSCA, c.GossipKey = "c.pem", "k.pem", "ca.pem", make([]byte, 32)
		},
	} {
		c := base(func(c *Config) { mod(c); c.ClientAddr, c.Advertise = "192.0.2.10:7650", "192.0.2.10" })
		if err := c.validate(); err != nil || c.ClientAddr != "192.0.2.10:7650" || c.HTTPAddr != DefaultHTTPAddr {
			t.Errorf("with %s: %v, client %s, http %s; want the addresses as given", what, err, c.ClientAddr, c.HTTPAddr)
		}
	}
	for _, host := range []string{"localhost", "127.0.0.2", "::1"} {
		c := base(func(c *Config) { c.ClientAddr = net.JoinHostPort(host, "7650") })
		if err := c.validate(); err != nil {
			t.Errorf("--client-addr on %s: %v", host, err)
		}
	}
}

// Started open, on every interface, a node is reached on 127.0.0.1 and
// not on the machine's other addresses.
func TestStart_AnOpenNodeListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	ip, err := privateIP()
	if err != nil || net.ParseIP(ip).IsLoopback() {
		t.Skipf("SKIPPED: this machine has no address but loopback to try (%v)", err)
	}
	n := startNode(t, TestConfig(t, t.TempDir(), func(c *Config) {
		c.ClientAddr, c.PeerAddr, c.RaftAddr, c.GossipAddr, c.HTTPAddr = ":0", ":0", ":0", ":0", ":0"
	}))
	for what, addr := range map[string]string{"client": n.Addrs().Client, "peer": n.Addrs().Peer, "raft": n.Addrs().Raft, "http": n.Addrs().HTTP} {
		host, port, _ := net.SplitHostPort(addr)
		if host != "127.0.0.1" {
			t.Errorf("the %s address: %s; want 127.0.0.1's", what, addr)
		}
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, port), 2*time.Second); err == nil {
			conn.Close()
			t.Errorf("the %s port answered on %s", what, ip)
		}
	}
	assertServes(t, n, "alive")
}
