package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"
)

// A client id is the cluster's: while one connection holds it, another is
// refused on every node; the same client reconnecting through another
// node after its node died takes it over at once; closing frees it; and a
// crashed node run's client ids are freed by the meta leader once the run
// has looked gone for a while.
func TestCluster_ClientIDIsTheClusters(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := func(id string) string { return tc.Node(id).Addrs().Client }
	dialID := func(clientID string, policy client.ReconnectPolicy, nodes ...string) (*client.Connection, error) {
		var addrs []string
		for _, id := range nodes {
			addrs = append(addrs, addr(id))
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := client.Dial(dctx, addrs, client.Options{ClientID: clientID, ReconnectPolicy: policy})
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	holder := func(clientID string) string {
		owner := ""
		tc.Node(tc.MetaLeader()).meta.Read(func(m *fsm.Meta) {
			for _, c := range m.ClientIDs() {
				if c.ClientId == clientID {
					owner = c.Owner
				}
			}
		})
		return owner
	}
	refusedEverywhere := func(clientID string, nodes ...string) {
		t.Helper()
		for _, id := range nodes {
			c, err := dialID(clientID, client.ReconnectNone, id)
			if err == nil {
				c.Close()
			}
			wantErr(t, "a second connection with client id "+clientID+" on "+id, err, client.ErrClientIDInUse)
		}
	}

	if _, err := dialID("audit", client.ReconnectNone, "n3"); err != nil {
		t.Fatal(err)
	}
	billing, err := dialID("billing", client.ReconnectAll, "n1", "n2", "n3")
	if err != nil {
		t.Fatal(err)
	}
	refusedEverywhere("billing", "n1", "n2", "n3")
	refusedEverywhere("audit", "n1", "n2")

	// billing's node dies: the client reconnects through another node and
	// takes its id over from the dead node's connection, not waiting for
	// the meta leader's sweep; anyone else is still refused.
	tc.Crash("n1")
	wait.For(t, 30*time.Second, "billing reconnected and holding its client id", func() bool {
		return billing.Node() != "n1" && billing.Node() != "" && strings.HasPrefix(holder("billing"), billing.Node()+"/")
	})
	refusedEverywhere("billing", "n2")
	if err := billing.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dialID("billing", client.ReconnectNone, "n2"); err != nil {
		t.Fatalf("client id billing after its connection closed: %v", err)
	}

	// audit's node dies: its connection holds the id until the meta leader
	// sees the node run gone for orphanGrace.
	tc.Start("n1")
	tc.Crash("n3")
	wait.For(t, time.Minute, "client id audit of a dead node's connection free again", func() bool {
		c, err := dialID("audit", client.ReconnectNone, "n2")
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}
