package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
)

// Scale 3 → 5 → 3. Two nodes join and the meta leader moves replicas onto
// them by itself, one at a time; then two of the first three (the meta leader among
// them) leave for good with `cairn node leave --decommission`. While they
// leave, every member's group keeps three voters, each open on a running
// node: the replica on a leaving node stays until the one replacing it
// votes. At the end every member is on the three nodes left, all voting,
// none under-replicated, nothing lost; a third decommission, which would
// leave members short, is refused and changes nothing.
func TestCluster_ScaleUpAndDownKeepsFullReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("five nodes")
	}
	tc := NewTestCluster(t, 3)
	meta, _, op, sent := queueOfThree(t, tc)
	n4, n5 := tc.AddNode().ID(), tc.AddNode().ID()
	wait.Until(tc.t, 90*time.Second, "replicas spread onto "+n4+" and "+n5, func() string {
		if why := placedOnNewNodes(tc, op, n4, n5); why != "" {
			return why
		}
		plan, err := op.Rebalance(stepCtx(t, 10*time.Second), true)
		if err != nil {
			return err.Error()
		}
		if len(plan.Moves) > 0 {
			return fmt.Sprintf("moves still planned: %+v", plan.Moves)
		}
		return ""
	})

	leaving := []string{meta, tc.Others(meta, n4, n5)[0]}
	for _, id := range leaving {
		stop := watchVoters(t, tc, "rp", 3)
		node, moved, err := tc.Admin(id).DecommissionNode(stepCtx(t, 60*time.Second))
		stop()
		if err != nil || node != id {
			t.Fatalf("decommissioning %s: node %q, %v", id, node, err)
		}
		t.Logf("%s decommissioned: %d member replicas moved", id, moved)
		tc.Stop(id)
		wait.For(t, 10*time.Second, "a meta leader among the running nodes", func() bool { return tc.MetaLeader() != "" })
	}
	left := tc.Others(leaving...)
	op = tc.Admin(left[0])
	wait.For(tc.t, 30*time.Second, "every member on "+fmt.Sprint(left)+", all voting", func() bool {
		return placedOn(tc, op, "rp", left, left) == ""
	})
	if st := tc.Status(left[0]); st.UnderReplicated != 0 {
		t.Fatalf("status after the scale-down: %d members under-replicated", st.UnderReplicated)
	}
	wait.Until(tc.t, 20*time.Second, "the decommissioned nodes gone from the status", func() string {
		for _, nd := range tc.Status(left[0]).Nodes {
			if slices.Contains(leaving, nd.ID) && nd.Alive {
				return fmt.Sprintf("decommissioned node %s is %s", nd.ID, nd.State)
			}
		}
		return ""
	})

	if _, _, err := tc.Admin(left[0]).DecommissionNode(stepCtx(t, 10*time.Second)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("decommissioning one of the last three nodes of queues of three replicas: %v, want ErrInvalidArgument", err)
	}
	tc.Node(left[0]).meta.Read(func(m *fsm.Meta) {
		if m.Decommissioning(left[0]) {
			t.Fatalf("a refused decommission marked %s decommissioning", left[0])
		}
	})
	wait.Until(tc.t, 10*time.Second, "30 messages pending on the members' hosts", func() string { return tc.counts("rp", 30, 0) })
	s := mustSession(t, tc.Dial(left[0]), client.ClientAck)
	sameSet(t, "received after the scale-down", drainMembers(t, s, "rp", 3, len(sent)), sent)
}

// placedOnNewNodes says what keeps n4 and n5 from each holding a voting
// replica of a member of rp, or "".
func placedOnNewNodes(tc *TestCluster, op *client.Admin, n4, n5 string) string {
	q, err := op.ShowQueue(stepCtx(tc.t, 5*time.Second), "rp")
	if err != nil {
		return err.Error()
	}
	for _, id := range []string{n4, n5} {
		if !slices.ContainsFunc(q.Members, func(m client.MemberInfo) bool {
			host := tc.HostOf(m.Name)
			if host == "" || !slices.Contains(m.Replicas, id) {
				return false
			}
			r, ok := tc.Node(host).groups.replica(m.Name)
			return ok && slices.Contains(voters(r.Raft()), id)
		}) {
			return fmt.Sprintf("no member has a voting replica on %s: %+v", id, q.Members)
		}
	}
	return ""
}

// watchVoters checks, until stop is called, that every member of dest has
// at least want voters in its host's Raft configuration, each with the
// member's replica open on a running node. A sample taken while a member
// has no host is skipped.
func watchVoters(t *testing.T, tc *TestCluster, dest string, want int) (stop func()) {
	t.Helper()
	d, ok := tc.Node(tc.MetaLeader()).meta.Destination(dest)
	if !ok {
		t.Fatalf("no destination %s", dest)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for _, p := range d.Members {
				name := fsm.MemberName(dest, p.Index)
				if why := runningVoters(tc, name, want); why != "" {
					t.Errorf("%s: %s", name, why)
					return
				}
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// runningVoters says why member name has fewer than want voters open on
// running nodes, or "".
func runningVoters(tc *TestCluster, name string, want int) string {
	host := tc.HostOf(name)
	if host == "" {
		return ""
	}
	r, ok := tc.Node(host).groups.replica(name)
	if !ok {
		return ""
	}
	vs := voters(r.Raft())
	if len(vs) == 0 { // the replica just closed or lost its leadership
		return ""
	}
	running := 0
	for _, nd := range tc.nodes {
		if nd == nil || !slices.Contains(vs, nd.ID()) {
			continue
		}
		if vr, ok := nd.groups.replica(name); ok && vr.Raft().State() != raft.Shutdown {
			running++
		}
	}
	if running < want {
		return fmt.Sprintf("voters %v, %d of them open on a running node; want at least %d", vs, running, want)
	}
	return ""
}
