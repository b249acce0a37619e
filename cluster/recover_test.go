package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/test/wait"
)

// A meta group that lost two of its three voters for good comes back with
// cairn node recover-meta: the stopped survivor, made the only voter,
// starts as the meta leader, keeps the destinations, creates new ones,
// and removes the lost nodes. A node's own data directory is checked
// first: another node's id, or no voters, is refused.
func TestRecoverMeta_AfterLosingAQuorum(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "before", client.QueueOptions{Members: 1, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	tc.Crash("n2")
	tc.Crash("n3")
	tc.Stop("n1")
	cfg := tc.cfgs[tc.index("n1")]
	if _, err := RecoverMeta(cfg, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no voters: %v; want ErrConfig", err)
	}
	other := cfg
	other.NodeID = "n2"
	if _, err := RecoverMeta(other, []string{"n2"}); !errors.Is(err, ErrConfig) {
		t.Errorf("n1's data directory as n2's: %v; want ErrConfig", err)
	}
	dropped, err := RecoverMeta(cfg, []string{"n1"})
	if err != nil || dropped != 0 {
		t.Fatalf("recovering n1: dropped %d, %v", dropped, err)
	}
	tc.Start("n1")
	wait.For(t, 20*time.Second, "n1 leading the meta group alone", func() bool { return tc.MetaLeader() == "n1" })
	a := tc.Admin("n1")
	ctx = stepCtx(t, 20*time.Second)
	if _, err := a.ShowQueue(ctx, "before"); err != nil {
		t.Fatalf("the queue made before the loss: %v", err)
	}
	if _, err := a.CreateQueue(ctx, "after", client.QueueOptions{Members: 1, Replicas: 1}); err != nil {
		t.Fatalf("a queue after the recovery: %v", err)
	}
	for _, id := range []string{"n2", "n3"} {
		if err := a.RemoveNode(ctx, id); err != nil {
			t.Fatalf("removing lost node %s: %v", id, err)
		}
	}
}
