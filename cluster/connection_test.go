package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A connection ended on purpose answers the sends it is serving before its
// Goodbye, as a graceful stop lets unary calls finish, and refuses new ones
// with an error that says they were not stored.
func TestConnection_GoodbyeAnswersTheSendsInFlightFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &connection{n: &Node{log: slog.New(slog.DiscardHandler)}, ctx: ctx, cancel: cancel, out: newOutbox[*clientpb.ServerFrame]()}
	c.sends.Add(1) // a send being served
	said := make(chan struct{})
	go func() {
		c.goodbye(false, "node n1 is shutting down")
		close(said)
	}()
	wait.For(t, 10*time.Second, "the connection closing", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.closing != nil
	})
	c.send(7, &clientpb.Send{Request: &clientpb.SendRequest{Destination: "q"}})
	select {
	case <-said:
		t.Fatal("Goodbye said while a send was unanswered")
	default:
	}
	c.sends.Done()
	select {
	case <-said:
	case <-time.After(sendsGrace / 2):
		t.Fatal("Goodbye not said once the send in flight was answered")
	}
	c.out.mu.Lock()
	frames := c.out.items
	c.out.mu.Unlock()
	if len(frames) != 2 {
		t.Fatalf("%d frames queued, want the refusal and the Goodbye: %v", len(frames), frames)
	}
	r := frames[0].GetReply()
	if err := transport.FromProto(r.GetError()); r.GetRequestId() != 7 || !errors.Is(err, transport.ErrNodeStopping) {
		t.Errorf("first frame %v, want a refusal of request 7 with ErrNodeStopping", frames[0])
	}
	if frames[1].GetGoodbye() == nil || frames[1].GetGoodbye().Destroyed {
		t.Errorf("second frame %v, want a Goodbye that lets the client reconnect", frames[1])
	}
}

// After its Goodbye a connection keeps reading until the client half-closes
// it: a send that crossed the Goodbye on the wire is refused, so the client
// knows it was not stored, rather than left unanswered.
func TestConnection_SendAfterTheGoodbyeIsRefusedUntilTheClientHalfCloses(t *testing.T) {
	n := startNode(t, testConfig(t, t.TempDir()))
	ctx := testCtx(t)
	r := openRaw(t, ctx, n)
	r.send(&clientpb.ClientFrame{RequestId: 1, Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{}}})
	hello, err := r.reply(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := admin(t, n)
	if err := a.DestroyConnection(ctx, hello.GetHello().ConnectionId); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := r.st.Recv()
		if err != nil {
			t.Fatalf("stream ended before its Goodbye: %v", err)
		}
		if f.GetGoodbye() != nil {
			break
		}
	}
	send := &clientpb.SendRequest{Destination: "late", Messages: []*clientpb.Message{{Body: []byte("x")}}}
	r.send(&clientpb.ClientFrame{RequestId: 2, Op: &clientpb.ClientFrame_Send{Send: &clientpb.Send{Request: send}}})
	_, err = r.reply(2, nil)
	wantErr(t, "a send after the Goodbye", err, client.ErrUnavailable)
	if err := r.st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	// io.EOF: the node ended the stream for the half-close, not at the
	// goodbyeGrace cut-off (which ends it with a status).
	if f, err := r.st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("frame %v, err %v after the half-close; want the stream's orderly end", f, err)
	}
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("the refused send created %v", names)
	}
}
