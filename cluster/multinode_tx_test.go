package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport/clientpb"
)

func mustTx(t *testing.T, c *client.Connection) *client.Session {
	t.Helper()
	return mustSession(t, c, client.Transacted)
}

// createQueues creates queues, each with the given number of members.
func createQueues(t *testing.T, ctx context.Context, a *client.Admin, members map[string]int) {
	t.Helper()
	for name, n := range members {
		if _, err := a.CreateQueue(ctx, name, client.QueueOptions{Members: n}); err != nil {
			t.Fatalf("create queue %s: %v", name, err)
		}
	}
}

func commit(t *testing.T, s *client.Session) {
	t.Helper()
	if err := s.Commit(testCtx(t)); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// A transaction over three members and a second queue: its sends are
// invisible to every consumer until Commit, its receives held; Commit makes
// all of them happen, Rollback none, returning the receives marked
// redelivered. Prepared work shows in queue show while it waits.
func TestTx_AtomicAcrossMembersAndQueues(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, time.Minute)
	a := tc.Admin("n1")
	createQueues(t, ctx, a, map[string]int{"ta": 3, "tb": 1})
	tc.WaitSpread("ta", 3)
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n2"), client.AutoAck), "tb"), "in-", 4)

	conn := tc.Dial("n1")
	tx := mustTx(t, conn)
	in := mustConsumer(t, ctx, tx, "tb")
	watch := mustSession(t, tc.Dial("n3"), client.AutoAck)
	var watchers []*client.Consumer
	for i := range 3 {
		watchers = append(watchers, mustConsumer(t, ctx, watch, fmt.Sprintf("ta#%d", i)))
	}

	// Round 1: receive two, send one to each member, roll back.
	got := recvN(t, in, 2)
	for i := range 3 {
		send(t, ctx, mustProducer(t, tx, fmt.Sprintf("ta#%d", i)), fmt.Sprint("r1-", i))
	}
	for _, k := range watchers {
		expectNothing(t, k, 100*time.Millisecond)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	again := recvN(t, in, 2)
	sameSet(t, "received again after the rollback", bodiesOf(again), bodiesOf(got))
	for _, m := range again {
		if !m.Redelivered || m.DeliveryCount != 2 {
			t.Errorf("%q after rollback: redelivered %v count %d", m.Body, m.Redelivered, m.DeliveryCount)
		}
	}
	for _, k := range watchers {
		expectNothing(t, k, 100*time.Millisecond)
	}

	// Round 2: the same, committed, with the prepared work counted first
	// (a two-phase commit prepares on all four members).
	for i := range 3 {
		send(t, ctx, mustProducer(t, tx, fmt.Sprintf("ta#%d", i)), fmt.Sprint("r2-", i))
	}
	if q := showQueue(t, a, "ta"); q.Pending != 0 {
		t.Fatalf("ta before the commit: %+v; want nothing pending", q)
	}
	commit(t, tx)
	var after []string
	for _, k := range watchers {
		after = append(after, string(recv(t, k).Body))
	}
	sameSet(t, "visible after the commit", after, []string{"r2-0", "r2-1", "r2-2"})
	// The two it never handed out wait in the consumer's prefetch.
	waitQueue(t, a, "tb", 0, 2)
	if q := showQueue(t, a, "ta"); q.Prepared != 0 {
		t.Fatalf("ta after the commit: %+v; want nothing prepared", q)
	}

	// A transaction with nothing in it commits.
	commit(t, tx)
}

// Prepared work whose front-end never decides (it died between the phases,
// here by never sending the decision) is rolled back by the primary's host
// once the transaction times out, even after that host was killed: the
// participants learn the decision from the primary's new host. A decided
// commit a participant missed is learned the same way, whether the
// primary's host or the participant's was killed after the decision.
func TestTx_PreparedTransactionsAreDecidedWithoutTheirFrontEnd(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3, func(c *Config) { c.TxTimeout = 2 * time.Second })
	ctx := stepCtx(t, time.Minute)
	a := tc.Admin("n1")
	createQueues(t, ctx, a, map[string]int{"tp": 3})
	hosts := tc.WaitSpread("tp", 3)
	front := tc.Node(hosts[2]) // neither the primary's host nor the participant's
	prepareOn := func(tx, member string, ids ...string) {
		t.Helper()
		var msgs []*fsmpb.Message
		for _, id := range ids {
			msgs = append(msgs, &fsmpb.Message{Id: id, Body: []byte(id), Priority: 4})
		}
		res, err := front.submit(ctx, member, &fsmpb.TxPrepare{Tx: tx, Primary: "tp#0", Session: "none", Now: time.Now().UnixNano(), Messages: msgs})
		if err != nil || res.Err != nil {
			t.Fatalf("prepare %s on %s: %v %v", tx, member, err, res.Err)
		}
	}

	// t-abort: prepared on tp#0 (primary) and tp#1; nobody decides; the
	// primary's host dies.
	prepareOn("t-abort", "tp#0", "a0")
	prepareOn("t-abort", "tp#1", "a1")
	// t-commit: prepared on both, commit recorded by the primary only.
	prepareOn("t-commit", "tp#0", "c0")
	prepareOn("t-commit", "tp#1", "c1")
	res, err := front.submit(ctx, "tp#0", &fsmpb.TxDecide{Tx: "t-commit", Commit: true, Record: true, Now: time.Now().UnixNano()})
	if err != nil || !res.Committed {
		t.Fatalf("decide t-commit: %v %+v", err, res)
	}
	if q := showQueue(t, a, "tp"); q.Prepared != 3 || q.Pending != 1 {
		t.Fatalf("tp with t-abort prepared twice and t-commit once: %+v", q)
	}
	tc.Crash(hosts[0])

	s := mustSession(t, tc.Dial(hosts[1]), client.AutoAck)
	wait.For(tc.t, 30*time.Second, "both transactions decided on every member", func() bool {
		q, err := tc.Admin(hosts[1]).ShowQueue(ctx, "tp")
		return err == nil && q.Prepared == 0 && q.Pending == 2
	})
	got := drainMembers(t, s, "tp", 3, 2)
	sameSet(t, "messages after the decisions", got, []string{"c0", "c1"})

	// A participant's host dies after the primary decided commit, before
	// the participant applied it: its new host learns the decision.
	tc.Start(hosts[0])
	tc.WaitSpread("tp", 3)
	prepareOn("t-late", "tp#0", "l0")
	prepareOn("t-late", "tp#1", "l1")
	if res, err := front.submit(ctx, "tp#0", &fsmpb.TxDecide{Tx: "t-late", Commit: true, Record: true, Now: time.Now().UnixNano()}); err != nil || !res.Committed {
		t.Fatalf("decide t-late: %v %+v", err, res)
	}
	tc.Crash(hosts[1])
	s2 := mustSession(t, tc.Dial(hosts[0]), client.AutoAck)
	wait.For(tc.t, 30*time.Second, "t-late applied by the participant's new host", func() bool {
		q, err := tc.Admin(hosts[0]).ShowQueue(ctx, "tp")
		return err == nil && q.Prepared == 0 && q.Pending == 2
	})
	sameSet(t, "messages of t-late", drainMembers(t, s2, "tp", 3, 2), []string{"l0", "l1"})
}

// The front-end dies in the middle of a transaction: the first Commit after
// the refresh fails with ErrTransactionRolledBack, the sends never show,
// the receives come again marked redelivered, and the same work done again
// on the same objects commits. A transaction with nothing pending commits.
func TestTx_FrontEndKilledMidTransaction(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, time.Minute)
	a := tc.Admin("n1")
	createQueues(t, ctx, a, map[string]int{"tin": 1, "tout": 1})
	front := tc.Others(tc.WaitSpread("tin", 1)[0], tc.WaitSpread("tout", 1)[0])[0]
	other := tc.Others(front)[0]
	sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(other), client.AutoAck), "tin"), "in-", 2)

	conn := dialVia(t, []string{tc.Node(front).Addrs().Client}, client.Options{ReconnectPolicy: client.ReconnectAll})
	tx := mustTx(t, conn)
	idle := mustTx(t, conn)
	in := mustConsumer(t, ctx, tx, "tin")
	out := mustProducer(t, tx, "tout")
	m := recv(t, in)
	send(t, ctx, out, "out-1")

	tc.Crash(front)
	wait.For(t, 15*time.Second, "a reconnect", func() bool { return conn.Reconnects() == 1 })
	if err := tx.Commit(ctx); !errors.Is(err, client.ErrTransactionRolledBack) {
		t.Fatalf("first commit after the refresh: %v; want ErrTransactionRolledBack", err)
	}
	if err := idle.Commit(ctx); err != nil {
		t.Fatalf("commit after the refresh of a transaction with nothing pending: %v", err)
	}
	// Do it again: the message held when the node died comes again once
	// the cluster released the dead front-end's session.
	rctx := stepCtx(t, 20*time.Second)
	var again *client.Message
	for again == nil || string(again.Body) != string(m.Body) {
		var err error
		if again, err = in.Receive(rctx); err != nil {
			t.Fatalf("waiting for %q again: %v", m.Body, err)
		}
	}
	if !again.Redelivered {
		t.Errorf("%q came again unmarked", again.Body)
	}
	send(t, ctx, out, "out-1")
	commit(t, tx)
	q := showQueue(t, tc.Admin(other), "tout")
	if q.Pending != 1 {
		t.Fatalf("tout after the retried commit: %+v; want exactly the retried send", q)
	}
}

// Many transacted sessions take the same messages concurrently: each
// message is consumed-and-committed exactly once, and every committed send
// is there once.
func TestTx_ConcurrentTransactionsOnTheSameMessages(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, time.Minute)
	a := tc.Admin("n1")
	createQueues(t, ctx, a, map[string]int{"cin": 2, "cout": 3})
	const total = 60
	inputs := map[string]bool{}
	for i := range 2 {
		for _, b := range sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), fmt.Sprintf("cin#%d", i)), fmt.Sprintf("m%d-", i), total/2) {
			inputs[b] = true
		}
	}
	var mu sync.Mutex
	committed := map[string]int{}
	// Workers stop once as many transactions committed as there are
	// inputs (or the step's deadline passes), not after a quiet spell: a
	// rolled-back message may take a while to come again on a loaded
	// machine.
	var commits atomic.Int32
	var wg sync.WaitGroup
	for w := range 6 {
		conn := tc.Dial(tc.IDs()[w%3])
		tx := mustTx(t, conn)
		k := mustConsumer(t, ctx, tx, fmt.Sprintf("cin#%d", w%2), client.WithPrefetch(2))
		p := mustProducer(t, tx, "cout")
		wg.Go(func() {
			for commits.Load() < total && ctx.Err() == nil {
				m, err := k.ReceiveTimeout(100 * time.Millisecond)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if m == nil {
					continue
				}
				if _, err := p.Send(ctx, &client.Message{Body: append([]byte("out:"), m.Body...)}); err != nil {
					t.Errorf("worker %d: send: %v", w, err)
					return
				}
				// Every third transaction rolls back and is done again.
				if m.Body[len(m.Body)-1]%3 == 0 && !m.Redelivered {
					if err := tx.Rollback(ctx); err != nil {
						t.Errorf("worker %d: rollback: %v", w, err)
						return
					}
					continue
				}
				err = tx.Commit(ctx)
				if errors.Is(err, client.ErrTransactionRolledBack) {
					continue
				}
				if err != nil {
					t.Errorf("worker %d: commit: %v", w, err)
					return
				}
				mu.Lock()
				committed[string(m.Body)]++
				mu.Unlock()
				commits.Add(1)
			}
		})
	}
	wg.Wait()
	for b := range inputs {
		if committed[b] != 1 {
			t.Errorf("%q consumed in %d committed transactions; want 1", b, committed[b])
		}
	}
	waitQueue(t, a, "cin", 0, 0)
	s := mustSession(t, tc.Dial("n2"), client.AutoAck)
	got := drainMembers(t, s, "cout", 3, total)
	count := map[string]int{}
	for _, b := range got {
		count[b]++
	}
	for b := range inputs {
		if count["out:"+b] != 1 {
			t.Errorf("%q: its committed send is there %d times", "out:"+b, count["out:"+b])
		}
	}
	if len(got) != total {
		t.Errorf("cout holds %d messages; want %d", len(got), total)
	}
}

// The connection loses its node during Commit. When the commit reached the
// node and only its answer was lost, Commit learns from the transaction's
// primary, through the node it reconnects to, that it committed, and
// returns no error; when the commit never reached the node, it learns that
// it was rolled back. Either way the messages are there exactly as the
// answer says.
func TestTx_CommitCutOffLearnsItsOutcome(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, time.Minute)
	a := tc.Admin("n1")
	createQueues(t, ctx, a, map[string]int{"tco": 3})
	tc.WaitSpread("tco", 3)
	for _, c := range []struct {
		cut       string
		committed bool
	}{{"downstream", true}, {"upstream", false}} {
		t.Run("cut "+c.cut, func(t *testing.T) {
			proxy := newClientProxy(t, tc.Node("n1").Addrs().Client)
			conn := dialVia(t, []string{proxy.addr()}, client.Options{ReconnectPolicy: client.ReconnectAll})
			tx := mustTx(t, conn)
			bodies := []string{c.cut + "-0", c.cut + "-1"}
			for i, b := range bodies {
				send(t, ctx, mustProducer(t, tx, fmt.Sprintf("tco#%d", i)), b)
			}
			proxy.cutOneWay(t, c.cut)
			err := tx.Commit(ctx)
			if conn.Reconnects() != 1 {
				t.Fatalf("commit returned (%v) after %d reconnects; want it to have waited for one", err, conn.Reconnects())
			}
			want := bodies
			if c.committed {
				if err != nil {
					t.Fatalf("commit whose answer was lost: %v; want it to learn it committed", err)
				}
			} else {
				if !errors.Is(err, client.ErrTransactionRolledBack) {
					t.Fatalf("commit that never reached the node: %v; want ErrTransactionRolledBack", err)
				}
				want = nil
			}
			got := drainMembers(t, mustSession(t, tc.Dial("n2"), client.ClientAck), "tco", 3, len(want))
			sameSet(t, "after the commit", got, want)
		})
	}
}

// A commit cut off from its node whose primary's group then loses its
// majority cannot learn its outcome: after ReconnectBlockingTime it reports
// ErrCommitUnknown, and the messages of the next transaction carry the
// possible-duplicate property.
func TestTx_CommitUnknownWhenThePrimaryCannotAnswer(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, time.Minute)
	createQueues(t, ctx, tc.Admin("n1"), map[string]int{"tu": 1})
	host := tc.WaitSpread("tu", 1)[0]
	survivor := tc.Others(host)[0]
	proxy := newClientProxy(t, tc.Node(survivor).Addrs().Client)
	conn := dialVia(t, []string{proxy.addr()}, client.Options{ReconnectPolicy: client.ReconnectAll, ReconnectBlockingTime: 2 * time.Second})
	tx := mustTx(t, conn)
	p := mustProducer(t, tx, "tu")
	send(t, ctx, p, "maybe")
	// The commit's answer is lost, and the member's group loses two of
	// its three replicas: nobody can say what became of it.
	proxy.cutOneWay(t, "downstream")
	for _, id := range tc.Others(survivor) {
		tc.Crash(id)
	}
	if err := tx.Commit(ctx); !errors.Is(err, client.ErrCommitUnknown) {
		t.Fatalf("commit whose primary cannot answer: %v; want ErrCommitUnknown", err)
	}
	m := &client.Message{Body: []byte("again")}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := p.Send(sctx, m)
	if err != nil {
		t.Fatalf("send in the next transaction: %v", err)
	}
	if m.Properties[client.PossibleDuplicateProperty] != "true" {
		t.Fatalf("message sent after an unknown commit has properties %v; want %s", m.Properties, client.PossibleDuplicateProperty)
	}
}

// A commit whose client counts other sends than the front-end holds (its
// session moved here in a reconnect it saw too late, and the sends were
// held by the node it left) is rolled back and enqueues nothing; one that
// counts the same, or counts nothing (a client that does not say), commits.
func TestTx_CommitCountingOtherSendsRollsBack(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	r := openRaw(t, ctx, n)
	id := uint64(0)
	frame := func(f *clientpb.ClientFrame) *clientpb.ClientFrame {
		id++
		f.RequestId = id
		return f
	}
	if err := r.call(frame(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{}}})); err != nil {
		t.Fatalf("hello: %v", err)
	}
	if err := r.call(frame(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_TRANSACTED}}})); err != nil {
		t.Fatalf("open session: %v", err)
	}
	txSend := func(msgID string) string {
		t.Helper()
		f := frame(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_TxSend{TxSend: &clientpb.TxSend{Session: 1, Send: &clientpb.SendRequest{
			Destination: "txc", Messages: []*clientpb.Message{{Id: msgID, Body: []byte(msgID)}}}}}})
		r.send(f)
		reply, err := r.reply(f.RequestId, nil)
		if err != nil {
			t.Fatalf("transacted send %s: %v", msgID, err)
		}
		return reply.GetTxSend().GetResults()[0].GetMember()
	}
	commit := func(tx, primary string, sends *uint32) error {
		return r.call(frame(&clientpb.ClientFrame{Op: &clientpb.ClientFrame_Commit{Commit: &clientpb.Commit{Session: 1, Tx: tx, Primary: primary, Sends: sends}}}))
	}
	two, one := uint32(2), uint32(1)

	// The case of the chaos suite: the client's sends were held by the node
	// it left, and this one holds none.
	wantErr(t, "commit counting a send where none is held", commit("t0", "txc#0", &one), client.ErrTransactionRolledBack)
	member := txSend("held-alone")
	wantErr(t, "commit counting two sends where one is held", commit("t1", member, &two), client.ErrTransactionRolledBack)
	checkQueue(t, a, "txc", 0, 0)
	if err := commit("t2", txSend("counted"), &one); err != nil {
		t.Fatalf("commit counting the one send held: %v", err)
	}
	checkQueue(t, a, "txc", 1, 0)
	if err := commit("t3", txSend("uncounted"), nil); err != nil {
		t.Fatalf("commit that counts nothing: %v", err)
	}
	checkQueue(t, a, "txc", 2, 0)
}
