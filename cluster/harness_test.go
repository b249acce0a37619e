package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/cairnmq/cairn/cluster/raftgroup"

	"github.com/cairnmq/cairn/client"
)

// fastTiming makes elections quick, yet leaves a leader 150 ms to hear from a
// majority: with 50 ms, three nodes under -race on two cores stepped down
// now and then on their own, and a send then failed as "leadership lost".
var fastTiming = raftgroup.Timing{Heartbeat: 200 * time.Millisecond, Election: 200 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 5 * time.Millisecond}

// testConfig is a single durable node on loopback ports in dir.
func testConfig(t *testing.T, dir string, opts ...func(*Config)) Config {
	cfg := Config{
		NodeID: "n1", DataDir: dir, BootstrapExpect: 1,
		ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
		GossipAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Timing: fastTiming, ExpiryInterval: 20 * time.Millisecond, SnapshotInterval: 100 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// startNode starts a node and waits until it is ready.
func startNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

func dial(t *testing.T, n *Node, opts ...func(*client.Options)) *client.Connection {
	t.Helper()
	var o client.Options
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{n.Addrs().Client}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func admin(t *testing.T, n *Node) *client.Admin {
	t.Helper()
	a, err := client.NewAdmin([]string{n.Addrs().Client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
