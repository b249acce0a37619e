package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/raftgroup"
	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/member"
)

// Restart without loss: a node stopped and started again on the same data
// directory comes back with every unacknowledged message, exactly.

// restartWorkload sends 50 messages, receives 20 of them (WithLimit, so no
// more are delivered) and individually acks the 10 even ones; between the
// first and the second five acks it calls mid. It returns the bodies acked,
// received-but-unacked, and never received.
func restartWorkload(t *testing.T, n *Node, queue string, mid func()) (acked, held, never []string) {
	t.Helper()
	ctx := testCtx(t)
	c := dial(t, n)
	s := mustSession(t, c, client.IndividualAck)
	all := sendN(t, ctx, mustProducer(t, s, queue), "m", 50)
	k := mustConsumer(t, ctx, s, queue, client.WithLimit(20))
	got := recvN(t, k, 20)
	for i, m := range got {
		if string(m.Body) != all[i] || m.Redelivered || m.DeliveryCount != 1 {
			t.Fatalf("message %d: %q redelivered %v count %d", i, m.Body, m.Redelivered, m.DeliveryCount)
		}
		if i%2 == 1 {
			held = append(held, all[i])
			continue
		}
		if i == 10 && mid != nil {
			mid()
		}
		if err := m.Ack(); err != nil {
			t.Fatalf("ack %q: %v", m.Body, err)
		}
		acked = append(acked, all[i])
	}
	checkQueue(t, admin(t, n), queue, 30, 10)
	// The connection stays open: the node's Stop ends it, and its release.
	return acked, held, all[20:]
}

// restartAndCheck stops n, starts a node with the same config, and checks
// that exactly the unacked messages come back, correctly marked. It returns
// a bug report if the counts right after WaitReady were not yet the
// restored ones.
func restartAndCheck(t *testing.T, n *Node, cfg Config, queue string, acked, held, never []string) (*Node, string) {
	t.Helper()
	n.Stop()
	n2 := startNode(t, cfg)
	a := admin(t, n2)
	var bug string
	if q, err := a.ShowQueue(testCtx(t), queue); err != nil || q.Pending != 40 || q.Delivered != 0 {
		_, open := n2.groups.replica(queue + "#0")
		bug = fmt.Sprintf("right after WaitReady on the restarted node, queue show %s says pending %d delivered %d, error %v (replica open: %v), want 40/0; it settles later", queue, q.Pending, q.Delivered, err, open)
		waitQueue(t, a, queue, 40, 0)
	}

	ctx := testCtx(t)
	c := dial(t, n2)
	s := mustSession(t, c, client.ClientAck)
	k := mustConsumer(t, ctx, s, queue)
	got := recvN(t, k, 40)
	expectNothing(t, k, 300*time.Millisecond)

	isHeld, isNever, isAcked := set(held), set(never), set(acked)
	seen := map[string]bool{}
	for _, m := range got {
		b := string(m.Body)
		switch {
		case seen[b]:
			t.Fatalf("%q received twice after the restart", b)
		case isAcked[b]:
			t.Fatalf("acked message %q came back after the restart", b)
		case isHeld[b]:
			if !m.Redelivered || m.DeliveryCount != 2 {
				t.Fatalf("held message %q: redelivered %v count %d; want true, 2", b, m.Redelivered, m.DeliveryCount)
			}
		case isNever[b]:
			if m.Redelivered || m.DeliveryCount != 1 {
				t.Fatalf("never-delivered message %q: redelivered %v count %d; want false, 1", b, m.Redelivered, m.DeliveryCount)
			}
		default:
			t.Fatalf("unexpected message %q", b)
		}
		seen[b] = true
	}
	if err := got[len(got)-1].Ack(); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, a, queue, 0, 0)
	return n2, bug
}

func set(ss []string) map[string]bool {
	out := make(map[string]bool, len(ss))
	for _, s := range ss {
		out[s] = true
	}
	return out
}

func TestRestart_UnackedMessagesSurviveExactly(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir())
	n := startNode(t, cfg)
	acked, held, never := restartWorkload(t, n, "durable", nil)
	if _, bug := restartAndCheck(t, n, cfg, "durable", acked, held, never); bug != "" {
		t.Fatal(bug)
	}
}

func TestRestart_SnapshotPlusLogReplayRestoresSameState(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir(), withSnapshotThreshold(16))
	n := startNode(t, cfg)
	snapIndex := func(n *Node) uint64 {
		r, ok := n.groups.replica("snap#0")
		if !ok {
			t.Fatal("no replica of snap#0")
		}
		i, _ := strconv.ParseUint(r.Raft().Stats()["last_snapshot_index"], 10, 64)
		return i
	}
	var taken uint64
	// The snapshot lands after the sends, the deliveries and five acks; the
	// other five acks are only in the log after it.
	acked, held, never := restartWorkload(t, n, "snap", func() {
		r, _ := n.groups.replica("snap#0")
		if err := r.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		taken = snapIndex(n)
		if taken == 0 {
			t.Fatal("no snapshot index after a snapshot")
		}
	})
	if r, _ := n.groups.replica("snap#0"); r.Raft().LastIndex() <= taken {
		t.Fatalf("no log entries after the snapshot at %d", taken)
	}
	n2, bug := restartAndCheck(t, n, cfg, "snap", acked, held, never)
	if got := snapIndex(n2); got < taken {
		t.Fatalf("restarted node's snapshot index %d; the snapshot was at %d", got, taken)
	}
	if bug != "" {
		t.Fatal(bug)
	}
}

// Config.SnapshotThreshold is documented as how many entries trigger a
// snapshot; with a threshold of 16, a member with a hundred entries should
// have one well within seconds.
func TestSnapshot_ThresholdTriggersASnapshot(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir(), withSnapshotThreshold(16))
	n := startNode(t, cfg)
	ctx := testCtx(t)
	c := dial(t, n)
	p := mustProducer(t, mustSession(t, c, client.AutoAck), "auto-snap")
	sendN(t, ctx, p, "m", 100)
	r, ok := n.groups.replica("auto-snap#0")
	if !ok {
		t.Fatal("no replica")
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if r.Raft().Stats()["last_snapshot_index"] != "0" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("SnapshotThreshold 16 with %d log entries: no snapshot after 3 s", r.Raft().LastIndex())
}

// The node keeps the whole message: body, properties, priority, expiration.
func TestRestart_MessageFieldsSurvive(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir())
	n := startNode(t, cfg)
	ctx := testCtx(t)
	c := dial(t, n)
	p := mustProducer(t, mustSession(t, c, client.AutoAck), "fields")
	if err := p.SetPriority(7); err != nil {
		t.Fatal(err)
	}
	if err := p.SetTimeToLive(time.Hour); err != nil {
		t.Fatal(err)
	}
	r, err := p.Send(ctx, &client.Message{Body: []byte("body"), Properties: map[string]any{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()

	n2 := startNode(t, cfg)
	c2 := dial(t, n2)
	ctx = testCtx(t)
	s := mustSession(t, c2, client.AutoAck)
	// Ready means ready: the first consumer after WaitReady is served.
	var bug string
	k, err := s.Consumer(ctx, "fields")
	if err != nil {
		bug = fmt.Sprintf("right after WaitReady on the restarted node, creating a consumer of fields fails: %v", err)
		wait.For(t, 10*time.Second, "a consumer of fields", func() bool {
			k, err = s.Consumer(ctx, "fields")
			return err == nil
		})
	}
	m := recv(t, k)
	if m.ID != r.ID || string(m.Body) != "body" || m.Properties["k"] != "v" || m.Priority != 7 ||
		m.Expiration.IsZero() || m.Redelivered || m.DeliveryCount != 1 || m.Member != "fields#0" {
		t.Fatalf("after restart: %+v", *m)
	}
	if bug != "" {
		t.Fatal(bug)
	}
}

// Ready (behind WaitReady and /readyz) must mean the node serves what it
// holds: every member placed on it is open and has applied its log.
func TestRestart_ReadyOnlyOnceMembersAreRestored(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir())
	n := startNode(t, cfg)
	ctx := testCtx(t)
	c := dial(t, n)
	sendN(t, ctx, mustProducer(t, mustSession(t, c, client.AutoAck), "ready"), "m", 5)
	n.Stop()

	n2, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n2.Stop)
	deadline := time.Now().Add(15 * time.Second)
	for n2.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", n2.Ready())
		}
		time.Sleep(time.Millisecond)
	}
	r, open := n2.groups.replica("ready#0")
	var pending int
	if open {
		pending = r.Stats().Pending
	}
	_, known := n2.meta.Destination("ready")
	var metaApplied uint64
	n2.meta.Read(func(m *fsm.Meta) { metaApplied = m.Applied() })
	mr := n2.meta.Raft()
	metaState := fmt.Sprintf("meta FSM applied %d, raft AppliedIndex %d, CommitIndex %d, destination known %v", metaApplied, mr.AppliedIndex(), mr.CommitIndex(), known)
	// Let the member finish its takeover before the cleanup stops the node
	// (a Stop during a takeover can hang: TestStop_ReplicaCloseReturnsDuringTakeover).
	wait.For(t, 10*time.Second, "ready#0 to be hosted", func() bool {
		r, ok := n2.groups.replica("ready#0")
		return ok && r.Leading()
	})
	if !open || pending != 5 {
		t.Fatalf("the restarted node reports Ready while member ready#0 is open=%v with %d of its 5 pending messages applied; at that moment: %s", open, pending, metaState)
	}
}

// A restarted node opens the member replicas placed on it side by side:
// opening one reads its log since its last snapshot, and the node is ready
// only once every one is open, so one after another a node holding two
// deep queues took the sum of both. Members in groups of their own: on one node, shared
// groups put both queues in one.
func TestRestart_MemberReplicasOpenSideBySide(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir())
	cfg.GroupPerMember = true
	n := startNode(t, cfg)
	ctx := testCtx(t)
	s := mustSession(t, dial(t, n), client.AutoAck)
	queues := []string{"side-a", "side-b"}
	for _, q := range queues {
		sendN(t, ctx, mustProducer(t, s, q), q+"/", 3)
	}
	n.Stop()

	// Each open waits until a second one is under way, for at most 5 s:
	// opened one after the other, they never overlap.
	var mu sync.Mutex
	inFlight, most := 0, 0
	overlapped := make(chan struct{})
	var overlap sync.Once
	open := openMember
	t.Cleanup(func() { openMember = open })
	openMember = func(c member.Config) (*member.Replica, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight >= 2 {
			overlap.Do(func() { close(overlapped) })
		}
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		select {
		case <-overlapped:
		case <-time.After(5 * time.Second):
		}
		return open(c)
	}
	n2, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n2.Stop)
	if err := n2.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Fatalf("the restarted node opened its %d member replicas one at a time", len(queues))
	}
	for _, q := range queues {
		r, ok := n2.groups.replica(q + "#0")
		if !ok || r.Stats().Pending != 3 {
			t.Fatalf("%s#0 after the restart: open %v, want 3 pending", q, ok)
		}
	}
}

// A data directory keeps the log store it was started with: started again
// without --log-store, a bolt node stays on bolt and keeps its messages;
// asking for the other kind is refused before anything is opened. A new
// data directory gets wal, the default.
func TestRestart_DataDirKeepsItsLogStore(t *testing.T) {
	t.Parallel()
	cfg := TestConfig(t, t.TempDir(), func(c *Config) { c.LogStore = raftgroup.LogStoreBolt })
	n := startNode(t, cfg)
	ctx := testCtx(t)
	sendN(t, ctx, mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "kept"), "m", 3)
	n.Stop()

	other := cfg
	other.LogStore = raftgroup.LogStoreWAL
	if _, err := Start(other); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "holds bolt logs") {
		t.Fatalf("a bolt data dir started with --log-store wal: %v; want ErrConfig naming the kind it holds", err)
	}
	again := cfg
	again.LogStore = ""
	n = startNode(t, again)
	checkQueue(t, admin(t, n), "kept", 3, 0)
	if got := raftgroup.HeldStore(filepath.Join(cfg.DataDir, "meta")); got != raftgroup.LogStoreBolt {
		t.Fatalf("the meta group's store is %q after a restart without --log-store; want bolt", got)
	}
	n.Stop()

	fresh := startNode(t, TestConfig(t, t.TempDir()))
	if got := raftgroup.HeldStore(filepath.Join(fresh.cfg.DataDir, "meta")); got != raftgroup.LogStoreWAL {
		t.Fatalf("a new data dir's store is %q; want wal, the default", got)
	}
}
