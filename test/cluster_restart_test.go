package test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// TestCluster3_FullRestart kills all three nodes of a cluster with
// SIGKILL while consumers on every front-end hold messages unacknowledged,
// and starts all three again at the same moment with the same flags
// (--bootstrap-expect 3 and --join included) and data. The cluster must
// come back as it was, not bootstrap a second, empty one: the same nodes,
// the same queue with the same members and replicas, and the same
// messages (those held come back to pending); then it serves traffic, and
// after a drain the history shows nothing lost, nothing acknowledged come
// back, and every message held at the kill redelivered with its mark.
func TestCluster3_FullRestart(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	const queue, members = "restart", 3
	c.createQueue(queue, members)
	h := newHistory()
	var budget atomic.Int64

	// Traffic on every front-end; then the producers and consumers stop,
	// with the consumers' connections open and their held messages
	// unacknowledged.
	l := startLoad(c, h, &budget, loadConfig{
		queue: queue, members: members, phase: "before",
		producers: 2, sendsPerPro: 150, recvPerCons: 40, sendPause: 2 * time.Millisecond, noEndAcks: true,
	})
	defer l.finish()
	l.waitUntil(60*time.Second, "traffic before the kill", func() bool {
		s, r := l.totals()
		return s >= 600 && r >= 200
	})
	l.halt()
	l.report()
	before := c.showQueue(0, queue)
	beforeStatus, err := c.statusFrom(0)
	if err != nil {
		t.Fatalf("cluster status before the kill: %v", err)
	}
	var beforeMeta uint64
	for _, g := range beforeStatus.Groups {
		if g.Name == "meta" {
			beforeMeta = g.CommitIndex
		}
	}
	if before.Delivered == 0 {
		t.Fatalf("queue %s: nothing delivered and unacknowledged before the kill: %+v", queue, before)
	}
	t.Logf("before the kill: queue %s holds %d pending and %d delivered (held) messages; meta group at commit %d", queue, before.Pending, before.Delivered, beforeMeta)

	// SIGKILL all three, as close together as the signals go.
	for i, s := range c.nodes {
		l.fault(i)
		if err := s.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL %s: %v", s.nodeID, err)
		}
	}
	for _, s := range c.nodes {
		s.kill() // waits for the exit
	}
	l.finish()
	runsBefore := make([]int, len(c.nodes))
	for i, s := range c.nodes {
		runsBefore[i] = s.runs
	}

	// All three again at the same moment, same flags, same data.
	c.startAll()
	for i, s := range c.nodes {
		if out := logOfRun(s, runsBefore[i]+1); strings.Contains(out, "meta group bootstrapped") {
			t.Errorf("%s bootstrapped the meta group again when restarted with its data", s.nodeID)
		}
	}
	after, err := c.statusFrom(0)
	if err != nil {
		t.Fatalf("cluster status after the restart: %v", err)
	}
	if got, want := nodeIDs(after), nodeIDs(beforeStatus); !slices.Equal(got, want) {
		t.Errorf("after the restart the cluster has nodes %v, want %v", got, want)
	}
	if got, want := groupNames(after), groupNames(beforeStatus); !slices.Equal(got, want) {
		t.Errorf("after the restart the cluster has groups %v, want %v", got, want)
	}
	for _, g := range after.Groups {
		if g.Name == "meta" && g.CommitIndex < beforeMeta {
			t.Errorf("after the restart the meta group is at commit %d, below %d before: a new cluster?", g.CommitIndex, beforeMeta)
		}
	}
	var queues []client.QueueInfo
	if err := c.admin(0, func(ctx context.Context, a *client.Admin) error {
		var err error
		queues, err = a.ListQueues(ctx)
		return err
	}); err != nil {
		t.Fatalf("list queues after the restart: %v", err)
	}
	if len(queues) != 1 || queues[0].Name != queue {
		t.Fatalf("after the restart the cluster lists queues %+v, want only %s", queues, queue)
	}
	// Every message is there; those held by the dead sessions return to
	// pending once the new hosts release the sessions of the old runs.
	var now client.QueueInfo
	deadline := time.Now().Add(20 * time.Second)
	for {
		now = c.showQueue(0, queue)
		if now.Delivered == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after the restart: queue %s holds %d pending and %d delivered messages", queue, now.Pending, now.Delivered)
	if now.Delivered != 0 {
		t.Errorf("20 s after the restart queue %s still counts %d messages delivered to sessions of the killed runs", queue, now.Delivered)
	}
	if got, want := now.Pending+now.Delivered, before.Pending+before.Delivered; got != want {
		t.Errorf("after the restart queue %s holds %d messages, want the %d it held before the kill", queue, got, want)
	}
	if got, want := memberLayout(now), memberLayout(before); got != want {
		t.Errorf("after the restart queue %s's members are %s, want %s as before", queue, got, want)
	}
	for _, m := range before.Members {
		for _, m2 := range now.Members {
			if m.Name == m2.Name && m.Pending+m.Delivered != m2.Pending+m2.Delivered {
				t.Errorf("after the restart %s holds %d messages, want %d", m.Name, m2.Pending+m2.Delivered, m.Pending+m.Delivered)
			}
		}
	}

	// The restarted cluster serves traffic.
	l2 := startLoad(c, h, &budget, loadConfig{
		queue: queue, members: members, phase: "after",
		producers: 1, sendsPerPro: 100, recvPerCons: 40, sendPause: 2 * time.Millisecond,
	})
	defer l2.finish()
	l2.waitUntil(60*time.Second, "traffic after the restart", func() bool {
		s, r := l2.totals()
		return s >= 200 && r >= 200
	})
	l2.finish()
	l2.report()
	if t.Failed() {
		t.FailNow()
	}
	c.drainCluster(h, queue, members, 1)
	reportHistory(t, h)
	checkDeliveryCounts(t, h, budget.Load())
}

// showQueue asks node i for a queue's counts.
func (c *processCluster) showQueue(i int, name string) client.QueueInfo {
	c.t.Helper()
	var info client.QueueInfo
	if err := c.admin(i, func(ctx context.Context, a *client.Admin) error {
		var err error
		info, err = a.ShowQueue(ctx, name)
		return err
	}); err != nil {
		c.t.Fatalf("show queue %s: %v", name, err)
	}
	return info
}

// logOfRun is what run (from 1) of the server printed.
func logOfRun(s *server, run int) string {
	out := s.log.String()
	if i := strings.Index(out, fmt.Sprintf("=== test: run %d of ", run)); i >= 0 {
		return out[i:]
	}
	return ""
}

func nodeIDs(st client.ClusterStatus) []string {
	var out []string
	for _, n := range st.Nodes {
		out = append(out, n.ID)
	}
	slices.Sort(out)
	return out
}

func groupNames(st client.ClusterStatus) []string {
	var out []string
	for _, g := range st.Groups {
		out = append(out, g.Name)
	}
	slices.Sort(out)
	return out
}

// memberLayout is a queue's members and their replicas, as text.
func memberLayout(q client.QueueInfo) string {
	var parts []string
	for _, m := range q.Members {
		parts = append(parts, fmt.Sprintf("%s%v", m.Name, m.Replicas))
	}
	slices.Sort(parts)
	return fmt.Sprintf("%d replicas: %s", q.Replicas, strings.Join(parts, " "))
}
