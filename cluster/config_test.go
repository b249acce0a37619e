package cluster

import (
	"errors"
	"strings"
	"testing"
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
