package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
)

// `cairn node leave` on the node that leads the meta group and hosts a
// member: when LeaveNode returns, it leads no group (every leadership was
// handed to another node), its Left channel is closed, and once it stops,
// sends and receives carry on through the others with nothing lost.
func TestCluster_NodeLeave_HandsLeadershipsOverAndSendsCarryOn(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "lv", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	hosts := tc.WaitSpread("lv", 3)
	var leaving string
	wait.For(t, 10*time.Second, "a meta leader", func() bool { leaving = tc.MetaLeader(); return leaving != "" })
	stay := tc.Others(leaving)[0]
	s := mustSession(t, tc.Dial(stay), client.ClientAck)
	p := mustProducer(t, s, "lv")
	sent := sendN(t, ctx, p, "before-", 9)

	id, err := tc.Admin(leaving).LeaveNode(ctx)
	if err != nil || id != leaving {
		t.Fatalf("leave %s: node %q, %v", leaving, id, err)
	}
	nd := tc.Node(leaving)
	select {
	case <-nd.Left():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Left not closed after LeaveNode returned", leaving)
	}
	if st := nd.meta.Raft().State(); st == raft.Leader {
		t.Errorf("%s still leads the meta group after leaving", leaving)
	}
	for _, r := range nd.groups.all() {
		if r.Raft().State() == raft.Leader {
			t.Errorf("%s still leads %s after leaving (it hosted %v)", leaving, r.Name(), hosts)
		}
		// The replica hears of its lost leadership through Raft's notify
		// channel, a moment later.
		wait.For(t, 10*time.Second, leaving+" no longer hosting "+r.Name(), func() bool { return !r.Leading() })
	}
	tc.Stop(leaving) // as cmd/cairn does once Left is closed

	wait.For(t, 10*time.Second, "a meta leader among the nodes that stay", func() bool { return tc.MetaLeader() != "" })
	ctx = stepCtx(t, 20*time.Second)
	for i := range 3 {
		name := fmt.Sprintf("lv#%d", i)
		if h := tc.WaitHost(name); h == leaving {
			t.Fatalf("%s hosted by %s, which left", name, h)
		}
		sent = append(sent, sendN(t, ctx, mustProducer(t, s, name), name+"/after-", 2)...)
	}
	sent = append(sent, sendN(t, ctx, p, "after-", 3)...)
	sameSet(t, "received after "+leaving+" left", drainMembers(t, s, "lv", 3, len(sent)), sent)
}

// `cairn node remove`: refused for a live node; for a crashed node in a
// 4-node cluster with a queue of 3 replicas, every member that had a
// replica on it gets one on the node it lacked, the member groups' Raft
// configurations (and the meta group's) drop it, no message is lost, and
// the removed id is not registered again, placed or let into a group, on
// any node, even when that node comes back (twice, and under a new meta
// leader).
func TestCluster_NodeRemove_ReplacesReplicasAndNeverReadmits(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("four nodes, a crash and a re-placement")
	}
	tc := NewTestCluster(t, 4)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "rm", client.QueueOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		tc.WaitHost(fmt.Sprintf("rm#%d", i))
	}
	var meta string
	wait.For(t, 10*time.Second, "a meta leader", func() bool { meta = tc.MetaLeader(); return meta != "" })
	// The removed node is one that does not lead the meta group; the
	// operator talks to another.
	var victim string
	for _, id := range slices.Backward(tc.IDs()) {
		if id != meta {
			victim = id
			break
		}
	}
	op := tc.Admin(tc.Others(victim)[0])

	err := op.RemoveNode(ctx, victim)
	wantErr(t, "remove live node "+victim, err, client.ErrInvalidArgument)

	p := mustProducer(t, mustSession(t, tc.Dial(meta), client.AutoAck), "rm")
	sent := sendN(t, ctx, p, "m", 20)
	// Counts come from each member's host: ShowQueue through a node without
	// a replica may not find a member whose host moved (see
	// TestCluster_ShowQueueFollowsMovedHost).
	if why := tc.counts("rm", 20, 0); why != "" {
		t.Fatalf("before the crash: %s", why)
	}
	before := showQueue(t, op, "rm")
	lacked := map[string]string{} // member -> the node that had no replica of it
	for _, m := range before.Members {
		if slices.Contains(m.Replicas, victim) {
			for _, id := range tc.IDs() {
				if !slices.Contains(m.Replicas, id) {
					lacked[m.Name] = id
				}
			}
		}
	}
	if len(lacked) != 3 {
		t.Fatalf("members %+v: want 3 with a replica on %s", before.Members, victim)
	}

	tc.crashAndRemove(op, victim)

	wait.Until(tc.t, 60*time.Second, "the replicas on "+victim+" re-placed and the groups' configurations following", func() string {
		return replacedEverywhere(tc, op, victim, lacked)
	})
	st := tc.Status(tc.Others(victim)[0])
	for _, n := range st.Nodes {
		if n.ID == victim && n.MetaRole != "none" {
			t.Errorf("removed %s has meta role %q", victim, n.MetaRole)
		}
	}
	for _, g := range st.Groups {
		for _, r := range g.Replicas {
			if r.Node == victim {
				t.Errorf("status: group %s still lists a replica on removed %s", g.Name, victim)
			}
		}
		if g.Name != metagroup.ID && len(g.Replicas) != 3 {
			t.Errorf("status: group %s has replicas %+v; want 3", g.Name, g.Replicas)
		}
	}

	// Nothing lost.
	wait.Until(tc.t, 10*time.Second, "20 messages pending on the members' hosts", func() string { return tc.counts("rm", 20, 0) })
	s := mustSession(t, tc.Dial(tc.Others(victim)[1]), client.ClientAck)
	sameSet(t, "received after "+victim+" was removed", drainMembers(t, s, "rm", 4, len(sent)), sent)

	// The removed node, started again by mistake on its old data, is never
	// registered again (a replacement needs a new id). The meta leader
	// registers every node gossip holds alive, each second: the restart,
	// a new meta leader, and a second restart each give it the chance.
	// Through all of them every other node's meta replica keeps the node
	// removed, out of the registry and of every placement (a queue created
	// meanwhile included), and no group's configuration takes it back.
	out := func() string { return staysRemoved(tc, victim) }
	what := victim + " staying removed, unregistered, unplaced and out of every group on every other node"
	restarted := func(nd *Node) {
		t.Helper()
		wait.For(untested{t}, 20*time.Second, "every other node's gossip holding "+victim+" alive again, as the meta leader's registration sees it", func() bool {
			for _, id := range tc.Others(victim) {
				if !tc.Node(id).gossip.aliveWithBoot(victim, nd.boot) {
					return false
				}
			}
			return true
		})
	}
	restarted(tc.launch(victim))
	wait.Steady(t, 5*time.Second, what+" after its restart", out)

	old := ""
	wait.For(t, 10*time.Second, "a meta leader", func() bool { old = tc.MetaLeader(); return old != "" && old != victim })
	wait.For(untested{t}, 20*time.Second, "the meta group's leadership handed over from "+old, func() bool {
		l := tc.MetaLeader()
		if l == old {
			if err := tc.Node(old).meta.Raft().LeadershipTransfer().Error(); err != nil {
				t.Logf("handing the meta group's leadership over from %s: %v", old, err)
			}
		}
		return l != "" && l != old && l != victim
	})
	wait.Steady(t, 5*time.Second, what+" under a new meta leader", out)

	tc.Crash(victim)
	restarted(tc.launch(victim))
	if _, err := op.CreateQueue(stepCtx(t, 20*time.Second), "rm2", client.QueueOptions{Members: 3, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if h := tc.WaitHost(fmt.Sprintf("rm2#%d", i)); h == victim {
			t.Fatalf("rm2#%d hosted by removed %s", i, victim)
		}
	}
	wait.Steady(t, 5*time.Second, what+" after its second restart", out)

	// Meanwhile the others serve every member.
	ctx = stepCtx(t, 20*time.Second)
	s = mustSession(t, tc.Dial(tc.Others(victim)[0]), client.ClientAck)
	sent = nil
	for i := range 4 {
		name := fmt.Sprintf("rm#%d", i)
		send(t, ctx, mustProducer(t, s, name), name+"/last")
		sent = append(sent, name+"/last")
	}
	sameSet(t, "received with removed "+victim+" running again", drainMembers(t, s, "rm", 4, len(sent)), sent)
}

// staysRemoved explains how removed is back ("" while it is not), as the
// other nodes see it: a node's meta replica registers it, no longer counts
// it removed or places a replica on it, or the node's replica of the meta
// group or of a member group has it in its configuration.
func staysRemoved(tc *TestCluster, removed string) string {
	for _, id := range tc.Others(removed) {
		nd := tc.Node(id)
		var why string
		nd.meta.Read(func(m *fsm.Meta) {
			if _, ok := m.Node(removed); ok {
				why = "registered"
				return
			}
			if !m.Removed(removed) {
				why = "no longer counted removed"
				return
			}
			for _, d := range m.Destinations() {
				for i, mb := range d.Members {
					if slices.Contains(mb.Replicas, removed) {
						why = fmt.Sprintf("in the placement of %s#%d, %v", d.Name, i, mb.Replicas)
						return
					}
				}
			}
		})
		if why == "" && inConfiguration(nd.meta.Raft(), removed) {
			why = "in the meta group's configuration"
		}
		for _, r := range nd.groups.all() {
			if why == "" && inConfiguration(r.Raft(), removed) {
				why = "in the configuration of " + r.Name()
			}
		}
		if why != "" {
			return fmt.Sprintf("%s sees %s %s", id, removed, why)
		}
	}
	return ""
}

// drainMembers consumes every member of dest at once, through s (client
// acknowledge), until want messages came or 20 s passed, then checks that
// nothing more comes and that none came marked redelivered; it returns the
// bodies received. With a consumer on every member none of them strands
// its messages, so none moves.
func drainMembers(t *testing.T, s *client.Session, dest string, members, want int) []string {
	t.Helper()
	got := drainUntil(t, s, dest, members, func(got []*client.Message) bool { return len(got) >= want })
	for _, m := range got {
		if m.Redelivered {
			t.Errorf("%q redelivered, though never delivered before", m.Body)
		}
	}
	return bodiesOf(got)
}

// drainUntil is drainMembers until done holds of what came, whatever their
// redelivery marks.
func drainUntil(t *testing.T, s *client.Session, dest string, members int, done func(got []*client.Message) bool) []*client.Message {
	t.Helper()
	ctx := stepCtx(t, 20*time.Second)
	var ks []*client.Consumer
	for i := range members {
		ks = append(ks, mustConsumer(t, ctx, s, fmt.Sprintf("%s#%d", dest, i)))
	}
	var got []*client.Message
	take := func(wait time.Duration) {
		for _, k := range ks {
			m, err := k.ReceiveTimeout(wait)
			if err != nil {
				t.Fatal(err)
			}
			if m == nil {
				continue
			}
			got = append(got, m)
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for deadline := time.Now().Add(20 * time.Second); !done(got) && time.Now().Before(deadline); {
		take(50 * time.Millisecond)
	}
	take(300 * time.Millisecond)
	for _, k := range ks {
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// replacedEverywhere explains what is left to do after removing a node
// ("" when done): the placement of every member that had a replica on it
// names the node it lacked instead, and the member's Raft configuration on
// its host is exactly its placement; the meta group dropped the node.
func replacedEverywhere(tc *TestCluster, op *client.Admin, removed string, lacked map[string]string) string {
	ctx := stepCtx(tc.t, 5*time.Second)
	q, err := op.ShowQueue(ctx, "rm")
	if err != nil {
		return err.Error()
	}
	for _, m := range q.Members {
		if slices.Contains(m.Replicas, removed) || len(m.Replicas) != 3 {
			return fmt.Sprintf("%s placed on %v", m.Name, m.Replicas)
		}
		if want := lacked[m.Name]; want != "" && !slices.Contains(m.Replicas, want) {
			return fmt.Sprintf("%s placed on %v, not on %s", m.Name, m.Replicas, want)
		}
		host := tc.HostOf(m.Name)
		if host == "" {
			return m.Name + " has no host"
		}
		r, _ := tc.Node(host).groups.replica(m.Name)
		if got := configuration(r.Raft()); !slices.Equal(got, sorted(m.Replicas)) {
			return fmt.Sprintf("%s: Raft configuration %v, placement %v", m.Name, got, m.Replicas)
		}
	}
	for _, id := range tc.Others(removed) {
		if inConfiguration(tc.Node(id).meta.Raft(), removed) {
			return "the meta group on " + id + " still has " + removed
		}
	}
	return ""
}

// configuration lists the servers of a group's latest Raft configuration.
func configuration(r *raft.Raft) []string { return servers(r, false) }

// voters lists the voters of a group's latest Raft configuration.
func voters(r *raft.Raft) []string { return servers(r, true) }

func servers(r *raft.Raft, votersOnly bool) []string {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		if !votersOnly || s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	return sorted(out)
}

// crashAndRemove crashes victim, waits until gossip holds it dead, and
// removes it through op, as an operator would a node gone for good.
func (tc *TestCluster) crashAndRemove(op *client.Admin, victim string) {
	tc.t.Helper()
	tc.Crash(victim)
	wait.For(tc.t, 15*time.Second, "gossip declaring "+victim+" dead", func() bool {
		for _, n := range tc.Status(tc.Others(victim)[0]).Nodes {
			if n.ID == victim {
				return !n.Alive
			}
		}
		return false
	})
	// The node answering may hear of the death a moment after the one
	// asked above: "alive" is asked again.
	var err error
	wait.For(tc.t, 20*time.Second, "the removal of crashed "+victim, func() bool {
		err = op.RemoveNode(stepCtx(tc.t, 10*time.Second), victim)
		return err == nil || !strings.Contains(err.Error(), "is alive")
	})
	if err != nil {
		tc.t.Fatalf("remove crashed %s: %v", victim, err)
	}
}

func inConfiguration(r *raft.Raft, id string) bool {
	return slices.Contains(configuration(r), id)
}

// A fourth node started later with only --join (no bootstrap, a fresh data
// directory) is added to the meta group as a voter, shows alive and a
// follower in cluster status, and a queue created afterwards places members
// on it and has it host one.
func TestCluster_NodeJoinsLater_BecomesMetaVoterAndHostsNewMembers(t *testing.T) {
	t.Parallel()
	// Without the automatic spreading, which would move old's replicas
	// (and with them new's placement) meanwhile.
	byHand := func(c *Config) { c.NoAutoRebalance = true }
	tc := NewTestCluster(t, 3, byHand)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "old", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	nd := tc.AddNode(withLogs(t), byHand)
	id := nd.ID()
	wait.For(t, 10*time.Second, id+" a voter of the meta group", func() bool {
		f := tc.Node("n1").meta.Raft().GetConfiguration()
		if f.Error() != nil {
			return false
		}
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == id {
				return s.Suffrage == raft.Voter
			}
		}
		return false
	})
	for _, from := range []string{"n1", id} {
		st := tc.Status(from)
		i := slices.IndexFunc(st.Nodes, func(n client.NodeStatus) bool { return n.ID == id })
		if i < 0 || !st.Nodes[i].Alive || st.Nodes[i].MetaRole != "follower" {
			t.Fatalf("status from %s: nodes %+v; want %s alive, meta follower", from, st.Nodes, id)
		}
	}

	// A queue created now has a member per node, one preferring the new node.
	info, err := tc.Admin(id).CreateQueue(ctx, "new", client.QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Members) != 4 {
		t.Fatalf("queue created on 4 nodes: %+v", info)
	}
	hosts := tc.WaitSpread("new", 4)
	if !slices.Contains(hosts, id) {
		t.Fatalf("hosts %v: none on %s", hosts, id)
	}
	replicas := 0
	for _, m := range info.Members {
		if slices.Contains(m.Replicas, id) {
			replicas++
		}
	}
	if replicas != 3 {
		t.Errorf("%s holds %d replicas of the 4 members of 3 replicas; want 3", id, replicas)
	}
	// The queue created before it joined stays where it was.
	if q := showQueue(t, tc.Admin(id), "old"); len(q.Members) != 3 {
		t.Errorf("queue old: %+v", q)
	}
	s := mustSession(t, tc.Dial(id), client.ClientAck)
	var sent []string
	for i := range 4 {
		name := fmt.Sprintf("new#%d", i)
		send(t, ctx, mustProducer(t, s, name), name)
		sent = append(sent, name)
	}
	sameSet(t, "sent to each member through "+id, drainMembers(t, s, "new", 4, len(sent)), sent)
	wait.For(tc.t, 10*time.Second, id+" caught up on every group", func() bool { return caughtUp(tc.Status("n1"), id) == "" })
}
