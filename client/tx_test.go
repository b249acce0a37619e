package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// txSendFate is what a txFake does with a TxSend.
type txSendFate int

const (
	answerTxSend        txSendFate = iota
	answerThenEndStream            // the link ends right after the answer
	answerLate                     // after 30 ms
	swallowTxSend                  // never answered
)

// txFake is a fake node that answers transacted sends and commits, and
// records the commits and rollbacks it gets.
type txFake struct {
	*fakeServer
	commits   chan *clientpb.Commit
	rollbacks atomic.Int32
}

// startTxFake starts a txFake; fate decides each TxSend's, given its
// connection's number (from 1) and how many TxSends came before on it.
func startTxFake(t *testing.T, fate func(conn, before int) txSendFate) *txFake {
	f := &txFake{fakeServer: startFakeServer(t, 0), commits: make(chan *clientpb.Commit, 8)}
	var mu sync.Mutex
	txSends := map[int]int{}
	f.script = func(stream clientpb.ClientService_ConnectServer, conn int, in *clientpb.ClientFrame) (bool, error) {
		reply := &clientpb.Reply{RequestId: in.RequestId}
		switch op := in.Op.(type) {
		case *clientpb.ClientFrame_TxSend:
			mu.Lock()
			what := fate(conn, txSends[conn])
			txSends[conn]++
			mu.Unlock()
			reply.Result = &clientpb.Reply_TxSend{TxSend: f.answer(op.TxSend.Send)}
			switch what {
			case swallowTxSend:
				return true, nil
			case answerLate:
				time.Sleep(30 * time.Millisecond)
			case answerThenEndStream:
				if err := f.sendReply(stream, reply); err != nil {
					return true, err
				}
				return true, errors.New("the link ends right after the answer")
			}
		case *clientpb.ClientFrame_Commit:
			f.commits <- op.Commit
			reply.Result = &clientpb.Reply_Commit{Commit: &clientpb.CommitResult{Committed: true}}
		case *clientpb.ClientFrame_Rollback:
			f.rollbacks.Add(1)
			return false, nil
		default:
			return false, nil
		}
		return true, f.sendReply(stream, reply)
	}
	return f
}

// firstOnEachConnection gives each connection's first TxSend fate, and
// answers the others.
func firstOnEachConnection(fate txSendFate) func(conn, before int) txSendFate {
	return func(_, before int) txSendFate {
		if before == 0 {
			return fate
		}
		return answerTxSend
	}
}

// transactedProducer opens a transacted session on f and a producer in it.
func transactedProducer(t *testing.T, f *txFake) (*Connection, *Session, *Producer) {
	t.Helper()
	conn, _ := dialFake(t, f.fakeServer, Options{ReconnectPolicy: ReconnectAll})
	s, err := conn.Session(Transacted)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Producer("q")
	if err != nil {
		t.Fatal(err)
	}
	return conn, s, p
}

func txCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A commit tells the front-end how many sends it said it holds for the
// transaction, counted afresh in every transaction, so that a front-end
// holding another number (the session moved to it in a reconnect it saw
// too late) rolls back rather than commit part of the work.
func TestCommit_CarriesTheNumberOfHeldSends(t *testing.T) {
	f := startTxFake(t, func(int, int) txSendFate { return answerTxSend })
	_, s, p := transactedProducer(t, f)
	ctx := txCtx(t)
	for _, batches := range [][]int{{2, 1}, {1}} {
		want := 0
		for _, n := range batches {
			ms := make([]*Message, n)
			for i := range ms {
				ms[i] = &Message{Body: []byte("x")}
			}
			if _, err := p.SendBatch(ctx, ms); err != nil {
				t.Fatal(err)
			}
			want += n
		}
		if err := s.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		c := <-f.commits
		if c.Sends == nil || int(*c.Sends) != want {
			t.Fatalf("transaction of batches %v: the commit says the front-end holds %v sends; want %d", batches, c.Sends, want)
		}
	}
}

// The link ends just after a transacted send's answer came, and the
// application commits at once: the commit may start before the session
// learns of the reconnect (or the send's answer be taken in after it), so
// the session does not know its transaction lost work, and the commit goes
// to the next node, which holds none of the sends. It must say how many
// sends it counted, so that the node rolls back rather than commit nothing
// and report success (verify lost committed messages so in the chaos
// suite), or roll back at once.
func TestCommit_AfterASendAnsweredAsTheLinkEnded(t *testing.T) {
	f := startTxFake(t, firstOnEachConnection(answerThenEndStream))
	conn, s, p := transactedProducer(t, f)
	ctx := txCtx(t)
	// Which comes first is the scheduler's choice; before the count, the
	// commit reached the next node in every one of 20 runs.
	for round := 1; round <= 20; round++ {
		if _, err := p.Send(ctx, &Message{Body: []byte("x")}); err != nil {
			t.Fatalf("round %d: send: %v", round, err)
		}
		err := s.Commit(ctx)
		eventuallyTrue(t, "the reconnect", func() bool { return conn.Reconnects() == round })
		select {
		case c := <-f.commits:
			if c.Sends == nil || *c.Sends != 1 {
				t.Fatalf("round %d: the commit went to the next node saying it holds %v sends (Commit: %v); want 1, which that node does not hold", round, c.Sends, err)
			}
		default:
			if !errors.Is(err, ErrTransactionRolledBack) {
				t.Fatalf("round %d: commit after the link ended: %v; want ErrTransactionRolledBack", round, err)
			}
		}
	}
}

// Commit waits for the session's asynchronous sends, and their callbacks,
// so that it commits exactly what was sent before it and counts it right.
func TestCommit_WaitsForTheSessionsAsynchronousSends(t *testing.T) {
	f := startTxFake(t, func(int, int) txSendFate { return answerLate })
	_, s, p := transactedProducer(t, f)
	ctx := txCtx(t)
	const sends = 3
	var called, failed atomic.Int32
	for range sends {
		p.SendAsync(&Message{Body: []byte("x")}, func(_ Receipt, err error) {
			if err != nil {
				failed.Add(1)
			}
			called.Add(1)
		})
	}
	if err := s.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := called.Load(); n != sends || failed.Load() != 0 {
		t.Fatalf("Commit returned with %d of %d asynchronous sends' callbacks called, %d with an error", n, sends, failed.Load())
	}
	if c := <-f.commits; c.Sends == nil || *c.Sends != sends {
		t.Fatalf("the commit says the front-end holds %v sends; want %d", c.Sends, sends)
	}
}

// A send that may or may not have reached the node (its answer never
// came) leaves a transaction that cannot say what it commits: the next
// Commit rolls it back, also when that send was its only one, so the node
// drops what it may hold instead of carrying it into the next transaction.
func TestCommit_RollsBackAfterASendOfUnknownOutcome(t *testing.T) {
	f := startTxFake(t, firstOnEachConnection(swallowTxSend))
	_, s, p := transactedProducer(t, f)
	sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := p.Send(sctx, &Message{Body: []byte("x")}); err == nil {
		t.Fatal("a send the node never answered succeeded")
	}
	ctx := txCtx(t)
	if err := s.Commit(ctx); !errors.Is(err, ErrTransactionRolledBack) {
		t.Fatalf("commit after a send of unknown outcome: %v; want ErrTransactionRolledBack", err)
	}
	if n := f.rollbacks.Load(); n != 1 {
		t.Fatalf("the node got %d rollbacks; want 1, so that it drops the send it may hold", n)
	}
	// The next transaction is whole again.
	if _, err := p.Send(ctx, &Message{Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx); err != nil {
		t.Fatalf("the next transaction's commit: %v", err)
	}
	if c := <-f.commits; c.Sends == nil || *c.Sends != 1 {
		t.Fatalf("the next commit says the front-end holds %v sends; want 1", c.Sends)
	}
}
