package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// The node that leads the meta group crashes: the survivors elect a new
// meta leader; a queue created through a surviving follower is created (the
// follower forwards the meta command to the leader) and serves; the crashed
// node, restarted on its data, catches up with every group it replicates,
// including the entries it missed (cluster status: alive, lag 0 everywhere).
func TestCluster_MetaLeaderCrash_NewLeaderTakesMetaCommandsAndOldLeaderCatchesUp(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "before", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	var old string
	wait.For(t, 10*time.Second, "a meta leader", func() bool { old = tc.MetaLeader(); return old != "" })
	p := mustProducer(t, mustSession(t, tc.Dial(tc.Others(old)[0]), client.AutoAck), "before")
	sendN(t, ctx, p, "b", 9)
	tc.Crash(old)

	var leader string
	wait.For(t, 10*time.Second, "a new meta leader among the survivors", func() bool {
		leader = tc.MetaLeader()
		return leader != "" && leader != old
	})
	follower := tc.Others(old, leader)[0]
	// The follower learns of the new leader from its first append. (A meta
	// command through it before that fails at once with ErrUnavailable:
	// unlike member commands, meta commands do not wait out an election.)
	wait.For(t, 10*time.Second, follower+" following the new meta leader "+leader, func() bool {
		_, id := tc.Node(follower).meta.Raft().LeaderWithID()
		return string(id) == leader
	})

	// A meta command through a follower: it is forwarded to the new leader.
	ctx = stepCtx(t, 20*time.Second)
	info, err := tc.Admin(follower).CreateQueue(ctx, "after", client.QueueOptions{})
	if err != nil {
		t.Fatalf("create through follower %s with %s crashed and %s leading: %v", follower, old, leader, err)
	}
	if len(info.Members) == 0 {
		t.Fatalf("queue created with no members: %+v", info)
	}
	if _, ok := tc.Node(leader).meta.Destination("after"); !ok {
		t.Fatalf("meta leader %s does not know the queue created through %s", leader, follower)
	}
	s := mustSession(t, tc.Dial(follower), client.ClientAck)
	sent := sendN(t, ctx, mustProducer(t, s, "after"), "a", 6)
	sameSet(t, "received from the queue created during the crash", drainMembers(t, s, "after", len(info.Members), len(sent)), sent)

	// Entries the crashed node misses, in a member group and in the meta group.
	sendN(t, ctx, p, "missed", 20)
	if _, err := tc.Admin(leader).CreateQueue(ctx, "later", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}

	tc.Start(old)
	wait.Until(tc.t, 20*time.Second, "restarted "+old+" alive with lag 0 on every group it replicates", func() string {
		return caughtUp(tc.Status(leader), old)
	})
	for _, name := range []string{"before", "after", "later"} {
		if _, ok := tc.Node(old).meta.Destination(name); !ok {
			t.Fatalf("restarted %s does not know queue %s", old, name)
		}
	}
	if q := showQueue(t, tc.Admin(old), "before"); q.Pending != 29 || q.Delivered != 0 {
		t.Fatalf("queue before, shown by %s: %+v; want 29 pending", old, q)
	}
}

// caughtUp explains why a node is not shown alive and caught up on every
// group that places a replica on it ("" when it is).
func caughtUp(st client.ClusterStatus, id string) string {
	alive := false
	for _, n := range st.Nodes {
		if n.ID == id {
			alive = n.Alive
		}
	}
	if !alive {
		return id + " is not alive"
	}
	for _, g := range st.Groups {
		for _, r := range g.Replicas {
			if r.Node != id {
				continue
			}
			if !r.Reachable || r.Lag != 0 || g.Leader == "" {
				return fmt.Sprintf("group %s: leader %q, replica on %s reachable %v lag %d", g.Name, g.Leader, id, r.Reachable, r.Lag)
			}
		}
	}
	return ""
}

// A queue created with the default replication factor while a node
// restarts waits for it, and gets three replicas, not the two that were
// alive: it would otherwise keep two for good, and lose its quorum when
// one of them came back empty.
func TestCluster_DefaultReplicasWaitForARestartingNode(t *testing.T) {
	defer func(d time.Duration) { restartWait = d }(restartWait)
	restartWait = 30 * time.Second
	tc := NewTestCluster(t, 3)
	tc.Stop("n3")
	created := make(chan error, 1)
	var info client.QueueInfo
	go func() {
		var err error
		info, err = tc.Admin("n1").CreateQueue(stepCtx(t, 40*time.Second), "while-restarting", client.QueueOptions{})
		created <- err
	}()
	tc.Start("n3")
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if info.Replicas != 3 {
		t.Fatalf("replication factor %d; want 3, the restarted node included", info.Replicas)
	}
}
