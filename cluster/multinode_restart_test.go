package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/raftgroup"
	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
)

// Every node crashes (as with SIGKILL), then all three start again on their
// data: every message sent comes back exactly once, except those acked;
// the ones held unacknowledged by sessions of the crashed front-ends come
// back redelivered with delivery count 2, the others unmarked; the counts
// are right right after the restart.
func TestCluster_FullRestart_EverySentMessageComesBack(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, testFullRestart)
}

// forEachLogStore runs test with the nodes' Raft logs in each log store.
func forEachLogStore(t *testing.T, test func(t *testing.T, store func(*Config))) {
	for _, kind := range []string{raftgroup.LogStoreBolt, raftgroup.LogStoreWAL} {
		t.Run(kind, func(t *testing.T) { test(t, func(c *Config) { c.LogStore = kind }) })
	}
}

func testFullRestart(t *testing.T, store func(*Config)) {
	tc := NewTestCluster(t, 3, store)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "fr", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	hosts := tc.WaitSpread("fr", 3)

	// Per member: 12 sent through n1, 6 received by a consumer on the
	// member's host's neighbour, 3 of them acked, 3 held.
	type fate struct{ acked, held, never []string }
	fates := make([]fate, 3)
	p := mustSession(t, tc.Dial("n1"), client.AutoAck)
	for i := range 3 {
		name := fmt.Sprintf("fr#%d", i)
		bodies := sendN(t, ctx, mustProducer(t, p, name), name+"/", 12)
		front := tc.Others(hosts[i])[0]
		s := mustSession(t, tc.Dial(front), client.IndividualAck)
		k := mustConsumer(t, ctx, s, name, client.WithLimit(6))
		for j, m := range recvN(t, k, 6) {
			if string(m.Body) != bodies[j] || m.Redelivered || m.DeliveryCount != 1 {
				t.Fatalf("%s, message %d: %q redelivered %v count %d", name, j, m.Body, m.Redelivered, m.DeliveryCount)
			}
			if j%2 == 1 {
				fates[i].held = append(fates[i].held, bodies[j])
				continue
			}
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
			fates[i].acked = append(fates[i].acked, bodies[j])
		}
		fates[i].never = bodies[6:]
	}
	checkQueue(t, tc.Admin("n2"), "fr", 18, 9)

	for _, id := range tc.IDs() {
		tc.Crash(id)
	}
	tc.StartAll()

	// The held messages' sessions belonged to the crashed runs: each
	// member's new host releases them as it takes over.
	waitQueue(t, tc.Admin("n3"), "fr", 27, 0)
	ctx = stepCtx(t, 20*time.Second)
	s := mustSession(t, tc.Dial("n2"), client.ClientAck)
	for i := range 3 {
		name := fmt.Sprintf("fr#%d", i)
		k := mustConsumer(t, ctx, s, name)
		got := recvN(t, k, 9)
		expectNothing(t, k, 200*time.Millisecond)
		sameSet(t, name+" after the restart", bodiesOf(got), append(append([]string{}, fates[i].held...), fates[i].never...))
		isHeld := set(fates[i].held)
		for _, m := range got {
			wantCount := 1
			if isHeld[string(m.Body)] {
				wantCount = 2
			}
			if m.Redelivered != (wantCount == 2) || m.DeliveryCount != wantCount {
				t.Errorf("%q: redelivered %v count %d; want count %d", m.Body, m.Redelivered, m.DeliveryCount, wantCount)
			}
		}
		if err := got[len(got)-1].Ack(); err != nil {
			t.Fatal(err)
		}
	}
	checkQueue(t, tc.Admin("n1"), "fr", 0, 0)
}

// A node stopped while its groups' logs move on, and are compacted (a
// snapshot every 32 entries), past everything it holds, catches up by
// installing a snapshot when it comes back: its replicas reach the
// leaders' commit index with the same counts, and the member whose
// preferred host it is is hosted by it again.
func TestCluster_StoppedNodeBehindCompactedLogs_CatchesUpBySnapshot(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sends a few thousand messages")
	}
	forEachLogStore(t, testCatchUpBySnapshot)
}

func testCatchUpBySnapshot(t *testing.T, store func(*Config)) {
	tc := NewTestCluster(t, 3, withSnapshotThreshold(32), store)
	ctx := testCtx(t)
	info, err := tc.Admin("n1").CreateQueue(ctx, "snap", client.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := tc.WaitSpread("snap", 3)
	// The node to stop is n2, the preferred host of one member.
	const stopped = "n2"
	var mine string
	for i, m := range info.Members {
		if m.Replicas[0] == stopped {
			mine = m.Name
			if hosts[i] != stopped {
				t.Fatalf("%s is hosted by %s, not by its preferred host %s", m.Name, hosts[i], stopped)
			}
		}
	}
	if mine == "" {
		t.Fatalf("no member of %+v prefers %s", info.Members, stopped)
	}
	r, _ := tc.Node(stopped).groups.replica(mine)
	before := r.Raft().LastIndex()
	tc.Stop(stopped)
	host := tc.WaitHost(mine)

	// Send and ack through the others until the host's log is compacted
	// past what the stopped node holds (the log keeps 1024 entries behind
	// each snapshot), bounded at 6000 messages.
	var mu sync.Mutex
	sent, acked, ackUnknown := 0, 0, 0
	compacted := func() bool {
		hr, ok := tc.Node(host).groups.replica(mine)
		if !ok {
			return false
		}
		snap, _ := strconv.ParseUint(hr.Raft().Stats()["last_snapshot_index"], 10, 64)
		return snap > before+1024+1
	}
	for round := 0; !compacted(); round++ {
		if round == 6 {
			t.Fatalf("after %d messages the log of %s is not compacted past index %d", sent, mine, before)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			front := tc.Others(stopped)[w%2]
			p := mustProducer(t, mustSession(t, tc.Dial(front), client.AutoAck), mine)
			// Under load a leader change may leave a send's outcome unknown;
			// this test is about catching up, so sends resolve it by dedup id.
			p.SetIdempotent(true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 125 {
					sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := p.Send(sctx, &client.Message{Body: []byte(fmt.Sprintf("r%d-w%d-%d", round, w, j))})
					cancel()
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					sent++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("send to %s with %s stopped: %v", mine, stopped, err)
		}
		// Ack a third of them, one by one.
		s := mustSession(t, tc.Dial(host), client.IndividualAck)
		k := mustConsumer(t, ctx, s, mine, client.WithLimit(333))
		for j := range 333 {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := k.Receive(rctx)
			cancel()
			if err != nil {
				hr, _ := tc.Node(tc.HostOf(mine)).groups.replica(mine)
				t.Fatalf("round %d: receive %d of 333 from %s (consumer on %s, host now %s: %+v, %d consumers): %v", round, j, mine, host, tc.HostOf(mine), hr.Stats(), hr.Consumers(), err)
			}
			// A leadership lost under the ack leaves its outcome unknown
			// (ErrLostServer): acknowledged, or pending again once the
			// session closes.
			switch err := m.Ack(); {
			case err == nil:
				acked++
			case errors.Is(err, client.ErrLostServer):
				ackUnknown++
			default:
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d messages sent to %s while %s was stopped at index %d", sent, mine, stopped, before)

	restarted := time.Now()
	tc.Start(stopped)
	t.Logf("%s ready %v after its restart began", stopped, time.Since(restarted).Round(time.Millisecond))
	wait.For(tc.t, 20*time.Second, stopped+"'s replicas caught up with their leaders", func() bool {
		return replicasMatch(tc, stopped) == ""
	})
	t.Logf("%s caught up %v after its restart began", stopped, time.Since(restarted).Round(time.Millisecond))
	wait.For(tc.t, 20*time.Second, stopped+" hosting "+mine+" again", func() bool { return tc.HostOf(mine) == stopped })
	t.Logf("%s hosts %s again %v after its restart began", stopped, mine, time.Since(restarted).Round(time.Millisecond))
	wait.Until(tc.t, 10*time.Second, "every replica matching its leader after "+stopped+" took "+mine+" back", func() string {
		return replicasMatch(tc, tc.IDs()...)
	})
	q := showQueue(t, tc.Admin(stopped), "snap")
	if least := sent - acked - ackUnknown; q.Delivered != 0 || q.Pending < uint64(least) || q.Pending > uint64(least+ackUnknown) {
		t.Fatalf("queue snap: %+v; want %d pending (%d sent, %d acknowledged, %d acknowledgements of unknown outcome)", q, sent-acked, sent, acked, ackUnknown)
	}
}

// replicasMatch explains how the member replicas of the given nodes differ
// from their leaders' ("" when every one has applied its leader's commit
// index and holds the same counts).
func replicasMatch(tc *TestCluster, ids ...string) string {
	for _, id := range ids {
		if why := nodeReplicasMatch(tc, id); why != "" {
			return why
		}
	}
	return ""
}

func nodeReplicasMatch(tc *TestCluster, id string) string {
	nd := tc.Node(id)
	for _, d := range nd.destinations() {
		for _, p := range d.Members {
			name := fsm.MemberName(d.Name, p.Index)
			r, ok := nd.groups.replica(name)
			if !ok {
				return name + " not open on " + id
			}
			host := tc.HostOf(name)
			if host == "" {
				return name + " has no host"
			}
			l, _ := tc.Node(host).groups.replica(name)
			commit := l.Raft().CommitIndex()
			if applied := r.Raft().AppliedIndex(); applied < commit {
				return fmt.Sprintf("%s on %s applied %d of %d", name, id, applied, commit)
			}
			if a, b := r.Stats(), l.Stats(); a != b {
				return fmt.Sprintf("%s on %s: %+v, on its host %s: %+v", name, id, a, host, b)
			}
		}
	}
	return ""
}

// metaCaughtUp explains how a node's meta replica lags the meta leader's
// commit index ("" when it does not).
func metaCaughtUp(tc *TestCluster, id string) string {
	leader := tc.MetaLeader()
	if leader == "" {
		return "no meta leader"
	}
	commit := tc.Node(leader).meta.Raft().CommitIndex()
	if applied := tc.Node(id).meta.Raft().AppliedIndex(); applied < commit {
		return fmt.Sprintf("meta replica on %s applied %d of %d", id, applied, commit)
	}
	return ""
}

// A preferred host that comes back with a replica still applying its log
// is not handed the member's leadership until it has applied it: a new
// leader serves only once its state machine has every committed entry, so
// a member handed to a node replaying a deep queue waited for the replay.
func TestCluster_PreferredHostCatchingUp_IsNotHandedTheLeadership(t *testing.T) {
	catchingUp := holdCatchingUp(t)
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	preferred := tc.queueOnItsPreferredHost(ctx, "cu")
	sent := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(tc.Others(preferred)[0]), client.AutoAck), "cu"), "cu/", 3)

	catchingUp.hold(preferred)
	tc.Stop(preferred)
	var stand string
	wait.For(tc.t, 20*time.Second, "another host for cu#0", func() bool {
		stand = tc.HostOf("cu#0")
		return stand != "" && stand != preferred
	})
	tc.Start(preferred)
	tc.waitCatchingUp(stand, preferred, true)
	// The stand-in checks its members every 2 s and moves one at most every
	// 5 s: long enough for a move that should not happen to happen.
	for deadline := time.Now().Add(transferEvery + 2*time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if h := tc.HostOf("cu#0"); h == preferred {
			t.Fatalf("cu#0 was handed back to %s while its replica was catching up", preferred)
		}
	}

	catchingUp.release()
	wait.For(tc.t, 20*time.Second, "cu#0 back on its preferred host "+preferred, func() bool { return tc.HostOf("cu#0") == preferred })
	k := mustConsumer(t, ctx, mustSession(t, tc.Dial(preferred), client.AutoAck), "cu")
	sameSet(t, "cu after the move back", bodiesOf(recvN(t, k, 3)), sent)
}

// A node whose groups have no leader for the moment (an election; here no
// quorum at all) is not catching up: it has opened and applied all it
// holds. Counted, it had every node of a group that just lost its leader
// say it was catching up, and a node stopping then found no replica to
// wait for or to hand its leaderships to.
func TestCluster_LeaderlessGroups_AreNotCatchingUp(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	host := tc.queueOnItsPreferredHost(ctx, "lg")
	survivor := tc.Others(host)[0]
	n := tc.Node(survivor)
	wait.For(tc.t, 10*time.Second, survivor+" caught up", func() bool { return !n.catchingUp() })
	tc.Crash(host)
	tc.Crash(tc.Others(host, survivor)[0])
	wait.For(tc.t, 10*time.Second, "lg#0 on "+survivor+" without a leader", func() bool {
		r, ok := n.groups.replica("lg#0")
		if !ok {
			return false
		}
		_, leader := r.Raft().LeaderWithID()
		return leader == ""
	})
	if n.catchingUp() {
		t.Fatalf("%s says it is catching up because its groups have no leader: %v", survivor, n.Ready())
	}
}

// queueOnItsPreferredHost creates a queue of one member and waits until
// the member's preferred host hosts it; it returns that host.
func (tc *TestCluster) queueOnItsPreferredHost(ctx context.Context, name string) string {
	tc.t.Helper()
	info, err := tc.Admin("n1").CreateQueue(ctx, name, client.QueueOptions{Members: 1})
	if err != nil {
		tc.t.Fatal(err)
	}
	preferred := info.Members[0].Replicas[0]
	if host := tc.WaitSpread(name, 1)[0]; host != preferred {
		tc.t.Fatalf("%s#0 is hosted by %s, not by its preferred host %s", name, host, preferred)
	}
	return preferred
}

// catchingUpHold makes one node say it is catching up (its replicas
// lagging) until released.
type catchingUpHold struct{ node atomic.Pointer[string] }

// holdCatchingUp wraps replicasLagging; it must run before the nodes start,
// whose readiness loops read it.
func holdCatchingUp(t *testing.T) *catchingUpHold {
	h := &catchingUpHold{}
	lagging := replicasLagging
	t.Cleanup(func() { replicasLagging = lagging })
	replicasLagging = func(gs *groups) bool {
		if held := h.node.Load(); held != nil && *held == gs.n.cfg.NodeID {
			return true
		}
		return lagging(gs)
	}
	return h
}

func (h *catchingUpHold) hold(node string) { h.node.Store(&node) }
func (h *catchingUpHold) release()         { h.node.Store(nil) }

// holdBehind makes node say it is catching up, and waits until gossip on
// each of seenBy says so. It first waits until they have seen every node
// caught up: gossip starts with every node catching up, and the news that
// node caught up, still on its way, would otherwise undo the hold for a
// while.
func (tc *TestCluster) holdBehind(h *catchingUpHold, node string, seenBy ...string) {
	tc.t.Helper()
	for _, from := range seenBy {
		for _, of := range tc.Others(from) {
			tc.waitCatchingUp(from, of, false)
		}
	}
	h.hold(node)
	for _, from := range seenBy {
		tc.waitCatchingUp(from, node, true)
	}
}

// waitCatchingUp waits until gossip on node from says whether node of is
// catching up.
func (tc *TestCluster) waitCatchingUp(from, of string, catchingUp bool) {
	tc.t.Helper()
	wait.For(tc.t, 10*time.Second, fmt.Sprintf("gossip on %s to say whether %s is catching up (%v)", from, of, catchingUp), func() bool {
		for _, m := range tc.Node(from).gossip.members() {
			if m.ID == of {
				return m.State == "alive" && m.Meta.CatchingUp == catchingUp
			}
		}
		return false
	})
}

// A node that leaves hands its leaderships to a replica that can lead at
// once, not to one still applying its log: hashicorp/raft's own pick is the
// most up-to-date log, which such a replica has too, and the member would
// wait for its replay. The node first waits for that replica
// (TestCluster_GracefulStop_WaitsForAReplicaCatchingUp); here the wait runs
// out.
func TestCluster_Leave_HandsLeadershipToACaughtUpReplica(t *testing.T) {
	catchingUp := holdCatchingUp(t)
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	host := tc.queueOnItsPreferredHost(ctx, "ho")
	sent := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(host), client.AutoAck), "ho"), "ho/", 3)
	// Raft would pick the first voter of the configuration among those
	// whose logs are equally up to date: hold that one back.
	r, _ := tc.Node(host).groups.replica("ho#0")
	f := r.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var behind, ready string
	for _, s := range f.Configuration().Servers {
		switch {
		case string(s.ID) == host:
		case behind == "":
			behind = string(s.ID)
		default:
			ready = string(s.ID)
		}
	}
	tc.holdBehind(catchingUp, behind, host, ready)

	leaveCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = tc.Node(host).Leave(leaveCtx)
	wait.For(tc.t, 20*time.Second, "a new host for ho#0", func() bool { h := tc.HostOf("ho#0"); return h != "" && h != host })
	if h := tc.HostOf("ho#0"); h != ready {
		t.Fatalf("ho#0 was handed to %s, which was catching up, not to %s", h, ready)
	}
	catchingUp.release()
	tc.Stop(host)
	k := mustConsumer(t, ctx, mustSession(t, tc.Dial(ready), client.AutoAck), "ho")
	sameSet(t, "ho after the handover", bodiesOf(recvN(t, k, 3)), sent)
}

// A node that stops gracefully while a replica its groups need for a
// quorum without it is still catching up waits for that replica before it
// hands its leaderships over: stopping at once, in a rolling restart right
// after the node before came back, left a deep queue's member with a
// leader and one replica too busy replaying its log to answer.
func TestCluster_GracefulStop_WaitsForAReplicaCatchingUp(t *testing.T) {
	catchingUp := holdCatchingUp(t)
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	host := tc.queueOnItsPreferredHost(ctx, "wq")
	behind := tc.Others(host)[0]
	tc.holdBehind(catchingUp, behind, host)
	nd := tc.Node(host)
	if need := nd.catchingUpForQuorum(); !slices.Equal(need, []string{behind}) {
		t.Fatalf("%s needs %v, catching up, for a quorum without it; want [%s]", host, need, behind)
	}
	r, ok := nd.groups.replica("wq#0")
	if !ok {
		t.Fatalf("%s has no replica of wq#0", host)
	}

	stopped := make(chan struct{})
	go func() { nd.Stop(); close(stopped) }()
	// Handed over at once, the leadership would be gone in milliseconds.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !r.Leading() {
			leader, _ := r.Raft().LeaderWithID()
			t.Fatalf("%s gave wq#0 up (raft %s, leader now %q) while %s, which the member needs for a quorum without it, was catching up",
				host, r.Raft().State(), leader, behind)
		}
	}
	select {
	case <-stopped:
		t.Fatalf("%s stopped while %s was catching up", host, behind)
	default:
	}
	catchingUp.release()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not stop once %s had caught up", host, behind)
	}
	tc.nodes[tc.index(host)] = nil
	rest := tc.Others(host)
	sent := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(rest[0]), client.AutoAck), "wq"), "wq/", 3)
	k := mustConsumer(t, ctx, mustSession(t, tc.Dial(rest[1]), client.AutoAck), "wq")
	sameSet(t, "wq without "+host, bodiesOf(recvN(t, k, 3)), sent)
}

// A node restarted while another is down rejoins with the one left: it has
// cluster state, whatever its log store, so it waits for one other node in
// gossip, not for --bootstrap-expect of them.
func TestCluster_RestartWhileAnotherIsDown(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, func(t *testing.T, store func(*Config)) {
		tc := NewTestCluster(t, 3, store)
		tc.Crash("n3")
		tc.Stop("n1")
		tc.Start("n1")
		assertServes(t, tc.Node("n1"), "after")
	})
}

// Every node must be able to stop, even when all stop at once with
// leaderships moving and connections breaking. hashicorp/raft's pipelined
// replication deadlocks in exactly that case (hashicorp/raft#612): a
// replication goroutine parks in netPipeline.AppendEntries while the
// pipeline's decoder has already returned, and Raft.Shutdown, so Node.Stop
// and Node.Crash, never return. raftgroup/group.go turns pipelining off
// (MaxRPCsInFlight 1) for it. Before that, about one cluster in 8 to 15
// hung here on a 2-core machine under -race; each round is one more chance.
func TestCluster_EveryNodeStopsAtOnceUnderLoad(t *testing.T) {
	t.Parallel()
	for round := range 8 {
		tc := NewTestCluster(t, 3)
		ctx := stepCtx(t, 20*time.Second)
		if _, err := tc.Admin("n1").CreateQueue(ctx, "dl", client.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
		tc.WaitSpread("dl", 3)
		for _, id := range tc.IDs() {
			s := mustSession(t, tc.Dial(id), client.ClientAck)
			sendN(t, ctx, mustProducer(t, s, "dl"), id+"-", 10)
			recv(t, mustConsumer(t, ctx, s, "dl"))
		}
		var mu sync.Mutex
		var hung []string
		var wg sync.WaitGroup
		for i, nd := range tc.nodes {
			tc.nodes[i] = nil
			wg.Add(1)
			go func() {
				defer wg.Done()
				done := make(chan struct{})
				go func() { nd.Stop(); close(done) }()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					mu.Lock()
					hung = append(hung, nd.ID())
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(hung) > 0 {
			t.Fatalf("round %d: Stop of %v did not return within 20 s", round, hung)
		}
	}
}
