package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// A front-end crashes while a ClientAck consumer connected to it holds
// messages of a member hosted elsewhere: once gossip declares the front-end
// dead, the member's host releases the session, and a consumer on another
// node gets the held messages again, marked redelivered with delivery count
// 2 (the messages it never held come unmarked). Cluster status then shows
// the crashed node dead and its replicas unreachable.
func TestCluster_FrontEndCrash_HostReleasesItsSessions(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "fe", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("fe", 1)[0]
	rest := tc.Others(host)
	front, other := rest[0], rest[1]

	sent := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(other), client.AutoAck), "fe"), "fe-", 10)
	s := mustSession(t, tc.Dial(front), client.ClientAck)
	k := mustConsumer(t, ctx, s, "fe", client.WithLimit(5))
	held := bodiesOf(recvN(t, k, 5))
	sameSet(t, "held by the consumer on "+front, held, sent[:5])
	checkQueue(t, tc.Admin(other), "fe", 5, 5)

	tc.Crash(front)
	crashed := time.Now()

	// Within gossip's failure detection (about 5 s) and a sweep, the held
	// messages come back; 12 s leaves room for a loaded machine.
	s2 := mustSession(t, tc.Dial(other), client.ClientAck)
	k2 := mustConsumer(t, ctx, s2, "fe")
	rctx := stepCtx(t, 12*time.Second)
	var last *client.Message
	got := map[string]*client.Message{}
	for len(got) < 10 {
		m, err := k2.Receive(rctx)
		if err != nil {
			t.Fatalf("after %v, %d of 10 messages received on %s (%v): %v", time.Since(crashed).Round(time.Millisecond), len(got), other, keys(got), err)
		}
		if got[string(m.Body)] != nil {
			t.Fatalf("%q received twice by one session", m.Body)
		}
		got[string(m.Body)] = m
		last = m
	}
	t.Logf("front-end %s crashed; its session's messages redelivered on %s after %v", front, other, time.Since(crashed).Round(time.Millisecond))
	for i, b := range sent {
		m := got[b]
		wantRedelivered, wantCount := i < 5, 1
		if wantRedelivered {
			wantCount = 2
		}
		if m.Redelivered != wantRedelivered || m.DeliveryCount != wantCount {
			t.Errorf("%q: redelivered %v count %d; want %v %d", b, m.Redelivered, m.DeliveryCount, wantRedelivered, wantCount)
		}
	}
	if err := last.Ack(); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, tc.Admin(other), "fe", 0, 0)

	t.Run("status shows the crashed node dead and its replicas unreachable", func(t *testing.T) {
		// The host that released the sessions saw the crash; the node
		// asked here may hear of it a moment later.
		var st client.ClusterStatus
		wait.For(t, 10*time.Second, "status on "+other+" showing "+front+" dead", func() bool {
			st = tc.Status(other)
			return !slices.ContainsFunc(st.Nodes, func(n client.NodeStatus) bool { return n.ID == front && n.Alive })
		})
		checkStatusShape(t, st)
		for _, n := range st.Nodes {
			if wantAlive := n.ID != front; n.Alive != wantAlive {
				t.Errorf("node %s: alive %v (state %s); want %v", n.ID, n.Alive, n.State, wantAlive)
			}
		}
		for _, g := range st.Groups {
			if g.Leader == "" || g.Leader == front {
				t.Errorf("group %s: leader %q", g.Name, g.Leader)
			}
			for _, r := range g.Replicas {
				if wantReachable := r.Node != front; r.Reachable != wantReachable {
					t.Errorf("group %s, replica on %s: reachable %v; want %v", g.Name, r.Node, r.Reachable, wantReachable)
				}
			}
		}
		if i := slices.IndexFunc(st.Groups, func(g client.GroupStatus) bool { return g.Name == "fe#0" }); i < 0 || len(st.Groups[i].Replicas) != 3 {
			t.Errorf("status groups %+v: want fe#0 with 3 replicas", st.Groups)
		}
	})
}

// The JSON shape of cluster status on a healthy cluster: every node alive
// with its meta role (one leader), the meta group and every member group
// with a leader and every replica reachable with its lag.
func TestCluster_Status_JSONShape(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "shape", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.WaitSpread("shape", 3)
	var st client.ClusterStatus
	wait.For(tc.t, 10*time.Second, "every replica caught up", func() bool {
		st = tc.Status("n2")
		for _, id := range tc.IDs() {
			if caughtUp(st, id) != "" {
				return false
			}
		}
		return true
	})
	checkStatusShape(t, st)
	if st.AnsweredBy != "n2" {
		t.Errorf("answered_by %q; want n2", st.AnsweredBy)
	}
	leaders := 0
	for _, n := range st.Nodes {
		switch n.MetaRole {
		case "leader":
			leaders++
		case "follower":
		default:
			t.Errorf("node %s: meta_role %q", n.ID, n.MetaRole)
		}
		if !n.Alive || n.State != "alive" {
			t.Errorf("node %s: alive %v state %q", n.ID, n.Alive, n.State)
		}
	}
	if leaders != 1 {
		t.Errorf("%d meta leaders in %+v", leaders, st.Nodes)
	}
	var names []string
	for _, g := range st.Groups {
		names = append(names, g.Name)
		roles := map[string]int{}
		for _, r := range g.Replicas {
			roles[r.Role]++
			if r.Role == "leader" && r.Node != g.Leader {
				t.Errorf("group %s: replica %s has role leader; leader is %s", g.Name, r.Node, g.Leader)
			}
		}
		if len(g.Replicas) != 3 || roles["leader"] != 1 || roles["follower"] != 2 {
			t.Errorf("group %s: replicas %+v; want one leader and two followers", g.Name, g.Replicas)
		}
	}
	sameSet(t, "groups", names, []string{"meta", "shape#0", "shape#1", "shape#2"})
}

// checkStatusShape checks the JSON form of a cluster status: the keys
// `cairn cluster status --json` promises.
func checkStatusShape(t *testing.T, st client.ClusterStatus) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	has := func(obj any, what string, keys ...string) map[string]any {
		m, ok := obj.(map[string]any)
		if !ok {
			t.Fatalf("%s is %T in %s", what, obj, b)
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s has no %q in %s", what, k, b)
			}
		}
		return m
	}
	list := func(v any, what string) []any {
		l, ok := v.([]any)
		if !ok || len(l) == 0 {
			t.Fatalf("%s is %v, want a non-empty list, in %s", what, v, b)
		}
		return l
	}
	has(doc, "status", "nodes", "groups")
	for i, n := range list(doc["nodes"], "nodes") {
		has(n, fmt.Sprintf("nodes[%d]", i), "id", "alive", "meta_role")
	}
	for i, g := range list(doc["groups"], "groups") {
		gm := has(g, fmt.Sprintf("groups[%d]", i), "name", "leader", "replicas")
		for j, r := range list(gm["replicas"], fmt.Sprintf("groups[%d].replicas", i)) {
			has(r, fmt.Sprintf("groups[%d].replicas[%d]", i, j), "node", "role", "lag", "reachable")
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return sorted(out)
}

// A node that gossip still holds alive (other nodes vouch for it) but that
// does not answer this node shows as suspect, not dead: alive stays true,
// since nothing has declared it failed. Once the link heals it is alive
// again.
func TestCluster_Status_UnansweringNodeIsSuspect(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	state := func() (string, bool) {
		for _, n := range tc.Status("n1").Nodes {
			if n.ID == "n2" {
				return n.State, n.Alive
			}
		}
		return "missing", false
	}
	tc.CutLink("n1", "n2")
	wait.For(tc.t, 15*time.Second, "n1's status showing n2 suspect", func() bool {
		st, _ := state()
		return st == "suspect"
	})
	if st, alive := state(); st == "suspect" && !alive {
		t.Errorf("n2 suspect but alive false; a suspect node is not declared dead")
	}
	tc.Heal("n1", "n2")
	wait.For(tc.t, 15*time.Second, "n1's status showing n2 alive again", func() bool {
		st, alive := state()
		return st == "alive" && alive
	})
}

// `cairn queue show` through a node that holds no replica of a member asks
// the member's host as this node last learned it. When the member has
// moved since (the first leader elected at creation handed it to its
// preferred host; then its host crashed), the show must find the new host
// rather than report the member unhosted and empty.
func TestCluster_ShowQueueFollowsMovedHost(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 4)
	ctx := testCtx(t)
	info, err := tc.Admin("n1").CreateQueue(ctx, "sq", client.QueueOptions{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	hosts := tc.WaitSpread("sq", 4)
	i := slices.IndexFunc(info.Members, func(m client.MemberInfo) bool { return !slices.Contains(m.Replicas, "n1") })
	name, host := info.Members[i].Name, hosts[i]
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(host), client.AutoAck), name), "x", 3)
	a := tc.Admin("n1")
	shows := func(when, host string) {
		t.Helper()
		wait.Until(tc.t, 10*time.Second, when+", n1 showing "+name+" on its host "+host+" with its 3 messages", func() string {
			m := showQueue(t, a, "sq").Members[i]
			if m.Host == host && m.Pending == 3 {
				return ""
			}
			return fmt.Sprintf("n1 shows %s hosted by %q with %d pending (it caches %q as its host)", name, m.Host, m.Pending, tc.Node("n1").hostCache.get(name))
		})
	}
	// The host n1 learned when the queue was created is the first leader
	// elected, which then handed the member to its preferred host.
	shows("after the queue was created", host)
	tc.Crash(host)
	shows("after its host crashed", tc.WaitHost(name))
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
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, time.Minute)
	createQueues(t, ctx, tc.Admin("n1"), map[string]int{"rr": 1})
	host := tc.WaitSpread("rr", 1)[0]
	front := tc.Others(host)[0]

	conn := tc.Dial(front)
	k := mustConsumer(t, ctx, mustSession(t, conn, client.ClientAck), "rr")
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(host), client.AutoAck), "rr"), "rr-", 3)
	recvN(t, k, 3)
	wait.Until(tc.t, 10*time.Second, "three messages held by the consumer", func() string { return tc.counts("rr", 0, 3) })

	tc.CutLink(front, host)
	_ = conn.Close()
	fe := tc.Node(front)
	wait.For(t, 30*time.Second, "the front-end retrying the release", func() bool { return fe.releasesRetrying.Load() > 0 })
	if why := tc.counts("rr", 0, 3); why != "" {
		t.Fatalf("the release failed, yet: %s", why)
	}

	tc.Heal(front, host)
	wait.Until(tc.t, 30*time.Second, "the held messages available again", func() string { return tc.counts("rr", 3, 0) })
	wait.For(t, 10*time.Second, "no release left to retry", func() bool { return fe.releasesRetrying.Load() == 0 })
	if !tc.Node(tc.HostOf("rr#0")).ownerLive(fe.owner()) {
		t.Fatalf("the host holds %s dead: its sweep, not the retry, may have released the session", front)
	}
}
