package cluster

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// Every node must be able to stop, even when all stop at once with
// leaderships moving and connections breaking. hashicorp/raft's pipelined
// replication deadlocks in exactly that case (hashicorp/raft#612): a
// replication goroutine parks in netPipeline.AppendEntries while the
// pipeline's decoder has already returned, and Raft.Shutdown, so Node.Stop
// and Node.Crash, never return. member/raft.go turns pipelining off
// (MaxRPCsInFlight 1) for it. Before that, about one cluster in 8 to 15
// hung here on a 2-core machine under -race; each round is one more chance.
func TestCluster_EveryNodeStopsAtOnceUnderLoad(t *testing.T) {
	for round := range 8 {
		tc := newCluster(t, 3)
		ctx := stepCtx(t, 20*time.Second)
		if _, err := tc.admin("n1").CreateQueue(ctx, "dl", client.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
		tc.waitSpread("dl", 3)
		for _, id := range tc.ids() {
			s := mustSession(t, tc.dial(id), client.ClientAck)
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

// A node cut off from the others for longer than gossip's failure
// detection must be taken back by gossip once the network heals, as Raft
// takes it back: until then the others hold it dead, so its front-end's
// sessions are released, placement leaves it out and status shows it dead.
// memberlist does not heal such a split by itself (each side probes and
// syncs only with nodes it holds alive); gossip's reconnectLoop joins the
// nodes held dead again, as Serf's reconnect does.
func TestCluster_GossipHealsAfterLongPartition(t *testing.T) {
	tc := newMultiNode(t, 3)
	tc.isolate("n1")
	waitFor(t, 20*time.Second, "n1 and the others holding each other dead", func() bool {
		dead := 0
		for _, id := range tc.ids() {
			for _, m := range tc.node(id).gossip.members() {
				if (id == "n1") != (m.ID == "n1") && m.State != "alive" {
					dead++
				}
			}
		}
		return dead == 4
	})
	tc.rejoin("n1")
	// memberlist's push-pull runs every 30 s; give it that and more.
	waitFor(t, 45*time.Second, "every node alive in every node's gossip after the partition healed", func() bool {
		for _, id := range tc.ids() {
			for _, m := range tc.node(id).gossip.members() {
				if m.State != "alive" {
					return false
				}
			}
		}
		return true
	})
}

// `cairn queue show` through a node that holds no replica of a member asks
// the member's host as this node last learned it. When the member has
// moved since (the first leader elected at creation handed it to its
// preferred host; then its host crashed), the show must find the new host
// rather than report the member unhosted and empty.
func TestCluster_ShowQueueFollowsMovedHost(t *testing.T) {
	tc := newMultiNode(t, 4)
	ctx := testCtx(t)
	info, err := tc.admin("n1").CreateQueue(ctx, "sq", client.QueueOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	hosts := tc.waitSpread("sq", 4)
	i := slices.IndexFunc(info.Members, func(m client.MemberInfo) bool { return !slices.Contains(m.Replicas, "n1") })
	name, host := info.Members[i].Name, hosts[i]
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.dial(host), client.AutoAck), name), "x", 3)
	a := tc.admin("n1")
	shows := func(when, host string) {
		t.Helper()
		tc.settle(10*time.Second, when+", n1 showing "+name+" on its host "+host+" with its 3 messages", func() string {
			m := showQueue(t, a, "sq").Members[i]
			if m.Host == host && m.Pending == 3 {
				return ""
			}
			return fmt.Sprintf("n1 shows %s hosted by %q with %d pending (it caches %q as its host)", name, m.Host, m.Pending, tc.node("n1").hostCache.get(name))
		})
	}
	// The host n1 learned when the queue was created is the first leader
	// elected, which then handed the member to its preferred host.
	shows("after the queue was created", host)
	tc.crash(host)
	shows("after its host crashed", tc.waitHost(name))
}

// A closed connection's front-end releases its sessions; when that release
// fails (here: the front-end cannot reach the member's host for longer
// than a command looks for it), it must try again until it succeeds. No one
// else would release the session: the host sweeps only the sessions of
// front-ends that gossip holds dead, and this one lives. Before the retry,
// the chaos suite's pause scenario found messages delivered to a closed
// connection and never redelivered (the release had failed with
// "leadership lost while committing log").
func TestCluster_FailedSessionReleaseIsRetried(t *testing.T) {
	tc := newMultiNode(t, 3)
	ctx := stepCtx(t, time.Minute)
	createQueues(t, ctx, tc.admin("n1"), map[string]int{"rr": 1})
	host := tc.waitSpread("rr", 1)[0]
	front := tc.others(host)[0]

	conn := tc.dial(front)
	k := mustConsumer(t, ctx, mustSession(t, conn, client.ClientAck), "rr")
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.dial(host), client.AutoAck), "rr"), "rr-", 3)
	recvN(t, k, 3)
	tc.settle(10*time.Second, "three messages held by the consumer", func() string { return tc.counts("rr", 0, 3) })

	tc.net.cutLink(front, host)
	_ = conn.Close()
	fe := tc.node(front)
	waitFor(t, 30*time.Second, "the front-end retrying the release", func() bool { return fe.releasesRetrying.Load() > 0 })
	if why := tc.counts("rr", 0, 3); why != "" {
		t.Fatalf("the release failed, yet: %s", why)
	}

	tc.net.heal(front, host)
	tc.settle(30*time.Second, "the held messages available again", func() string { return tc.counts("rr", 3, 0) })
	waitFor(t, 10*time.Second, "no release left to retry", func() bool { return fe.releasesRetrying.Load() == 0 })
	if !tc.node(tc.hostOf("rr#0")).ownerLive(fe.owner()) {
		t.Fatalf("the host holds %s dead: its sweep, not the retry, may have released the session", front)
	}
}
