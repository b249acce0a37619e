package cluster

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/client"
)

// Stop must return even when it comes while member replicas are taking over
// (the moment right after a start): Node.Stop closes every replica, so a
// replica whose Close hangs hangs the node's Stop. A hung Close leaves its
// goroutines behind, so on a hang the test skips without stopping the node.
func TestStop_ReplicaCloseReturnsDuringTakeover(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir())
	n := startNode(t, cfg)
	ctx := testCtx(t)
	const members = 8
	if _, err := admin(t, n).CreateQueue(ctx, "many", client.QueueOptions{Members: members}); err != nil {
		t.Fatal(err)
	}
	n.Stop()

	for round := range 10 {
		n2, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Close each replica the moment Raft makes it leader, while its
		// takeover (a Raft barrier, then the configure and sweep) runs.
		var wg sync.WaitGroup
		closed := map[string]bool{}
		deadline := time.Now().Add(15 * time.Second)
		for len(closed) < members {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d member replicas led", round, len(closed), members)
			}
			for _, r := range n2.groups.all() {
				if !closed[r.Name()] && r.Raft().State() == raft.Leader {
					closed[r.Name()] = true
					wg.Add(1)
					go func() { defer wg.Done(); _ = r.Close() }()
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: member Replica.Close (and so Node.Stop) hangs when it comes during the replica's takeover", round)
		}
		n2.Stop()
	}
}
