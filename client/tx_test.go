package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// A commit tells the front-end how many sends it said it holds for the
// transaction, counted afresh in every transaction, so that a front-end
// holding another number (the session moved to it in a reconnect it saw
// too late) rolls back rather than commit part of the work.
func TestCommit_CarriesTheNumberOfHeldSends(t *testing.T) {
	f := startFakeServer(t, 0)
	commits := make(chan *clientpb.Commit, 4)
	f.script = func(stream clientpb.ClientService_ConnectServer, _ int, in *clientpb.ClientFrame) (bool, error) {
		reply := &clientpb.Reply{RequestId: in.RequestId}
		switch op := in.Op.(type) {
		case *clientpb.ClientFrame_TxSend:
			reply.Result = &clientpb.Reply_TxSend{TxSend: f.answer(op.TxSend.Send)}
		case *clientpb.ClientFrame_Commit:
			commits <- op.Commit
			reply.Result = &clientpb.Reply_Commit{Commit: &clientpb.CommitResult{Committed: true}}
		default:
			return false, nil
		}
		return true, f.sendReply(stream, reply)
	}
	conn, _ := dialFake(t, f, Options{})
	s, err := conn.Session(Transacted)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Producer("q")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
		c := <-commits
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
	f := startFakeServer(t, 0)
	commits := make(chan *clientpb.Commit, 1)
	cut := map[int]bool{}
	f.script = func(stream clientpb.ClientService_ConnectServer, conn int, in *clientpb.ClientFrame) (bool, error) {
		reply := &clientpb.Reply{RequestId: in.RequestId}
		switch op := in.Op.(type) {
		case *clientpb.ClientFrame_TxSend:
			reply.Result = &clientpb.Reply_TxSend{TxSend: f.answer(op.TxSend.Send)}
			f.mu.Lock()
			first := !cut[conn]
			cut[conn] = true
			f.mu.Unlock()
			if err := f.sendReply(stream, reply); err != nil || !first {
				return true, err
			}
			return true, errors.New("the link ends right after the answer")
		case *clientpb.ClientFrame_Commit:
			commits <- op.Commit
			reply.Result = &clientpb.Reply_Commit{Commit: &clientpb.CommitResult{Committed: true}}
			return true, f.sendReply(stream, reply)
		}
		return false, nil
	}
	conn, _ := dialFake(t, f, Options{ReconnectPolicy: ReconnectAll})
	s, err := conn.Session(Transacted)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Producer("q")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Which comes first is the scheduler's choice; before the count, the
	// commit reached the next node in every one of 20 runs.
	for round := 1; round <= 20; round++ {
		if _, err := p.Send(ctx, &Message{Body: []byte("x")}); err != nil {
			t.Fatalf("round %d: send: %v", round, err)
		}
		err := s.Commit(ctx)
		eventuallyTrue(t, "the reconnect", func() bool { return conn.Reconnects() == round })
		select {
		case c := <-commits:
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
