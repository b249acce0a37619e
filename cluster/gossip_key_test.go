package cluster

import (
	"bytes"
	"testing"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"
)

// With a gossip key, a node without it, or with another, is not heard:
// never seen alive, never registered; a node with the cluster's key joins.
func TestGossip_KeyKeepsStrangersOut(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	tc := NewTestCluster(t, 1, func(c *Config) { c.GossipKey = key })
	n1 := tc.Node("n1")
	registered := func(id string) (ok bool) {
		n1.meta.Read(func(m *fsm.Meta) { _, ok = m.Node(id) })
		return ok
	}
	for i, strangerKey := range [][]byte{nil, bytes.Repeat([]byte{8}, 32)} {
		id := []string{"clear", "other-key"}[i]
		cfg := TestConfig(t, t.TempDir(), func(c *Config) {
			c.NodeID, c.BootstrapExpect, c.GossipKey = id, 0, strangerKey
			c.Join = []string{tc.cfgs[0].GossipAddr}
		})
		stranger, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wait.Holds(t, 3*time.Second, "a node gossiping with the wrong key stays unheard", func() bool {
			return !n1.gossip.alive(id) && !registered(id)
		})
		haltNode(stranger, false, 20*time.Second)
	}
	tc.AddNode(func(c *Config) { c.GossipKey = key })
	wait.For(t, 20*time.Second, "a node with the key registered", func() bool {
		return registered("n2") && n1.gossip.alive("n2")
	})
}

// A gossip key rotates as Consul's does, through rolling restarts: a node
// that writes with the new key and still reads the old one gossips with a
// node that writes with the old one and already reads the new one.
func TestGossip_KeyRotates(t *testing.T) {
	t.Parallel()
	oldKey, newKey := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{9}, 32)
	tc := NewTestCluster(t, 1, func(c *Config) { c.GossipKey, c.OldGossipKeys = oldKey, [][]byte{newKey} })
	n1 := tc.Node("n1")
	tc.AddNode(func(c *Config) { c.GossipKey, c.OldGossipKeys = newKey, [][]byte{oldKey} })
	wait.For(t, 20*time.Second, "a node on the new key registered and alive", func() bool {
		var ok bool
		n1.meta.Read(func(m *fsm.Meta) { _, ok = m.Node("n2") })
		return ok && n1.gossip.alive("n2")
	})
}
