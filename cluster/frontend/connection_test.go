package frontend

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A connection ended on purpose answers the sends it is serving before its
// Goodbye, as a graceful stop lets unary calls finish, and refuses new ones
// with an error that says they were not stored.
func TestConnection_GoodbyeAnswersTheSendsInFlightFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &connection{n: quietNode{}, ctx: ctx, cancel: cancel, out: transport.NewOutbox[*clientpb.ServerFrame]()}
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
	frames := c.out.Stop()
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

// quietNode is a Node whose log is discarded and which authenticates
// nobody; nothing else of it may be called.
type quietNode struct{ Node }

func (quietNode) Logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func (quietNode) Authorize(context.Context, fsm.Action, string) error { return nil }
