package client

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// lockedBuffer is a log sink several connections write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A link found silent is closed by its watchdog, which also ends the
// reader's Recv: the connection reports the watchdog's cause, not the
// reader's "context canceled" that follows from it. The 8 connections
// share one gRPC connection, which the first watchdog to fire closes under
// the other links: they too report the silence, not gRPC's "the client
// connection is closing". (The fake node sends no heartbeats, so every link
// falls silent.)
func TestLinkDown_ReportsTheSilenceNotItsEcho(t *testing.T) {
	f := startFakeServer(t, 1<<20)
	var logs lockedBuffer
	opts := Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	const conns = 8
	var mu sync.Mutex
	var told []error // what the exception listeners were told
	for range conns {
		c, _ := dialFake(t, f, opts)
		c.SetExceptionListener(func(err error) {
			mu.Lock()
			told = append(told, err)
			mu.Unlock()
		})
	}
	lost := func() []string {
		var out []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "lost its node") {
				out = append(out, line)
			}
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(lost()) < conns && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	got := lost()
	if len(got) < conns {
		t.Fatalf("%d of %d connections reported their node lost within 10 s", len(got), conns)
	}
	for _, line := range got[:conns] {
		if !strings.Contains(line, "no word from the server") {
			t.Errorf("logged cause is not the silence: %s", line)
		}
	}
	// The listener is called on its own goroutine, after the log line.
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(told)
		mu.Unlock()
		if n >= conns {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) < conns {
		t.Fatalf("%d of %d exception listeners were called", len(told), conns)
	}
	for _, err := range told[:conns] {
		if !errors.Is(err, ErrLostServer) || !strings.Contains(err.Error(), "no word from the server") {
			t.Errorf("the exception listener was told %v, not the silence", err)
		}
	}
}

// A link that ends with an error every new link would meet again (here the
// node refusing to push a frame over its limit) ends the connection with
// that error: Receive returns it, not ErrLostServer, the exception
// listener hears it, and the connection does not reconnect in a loop.
func TestLinkDown_StuckLinkEndsTheConnection(t *testing.T) {
	f := startFakeServer(t, 1<<20)
	f.heartbeat = 100 * time.Millisecond
	const refusal = "trying to send message larger than max (2097311 vs. 2097152)"
	f.script = func(stream clientpb.ClientService_ConnectServer, _ int, in *clientpb.ClientFrame) (bool, error) {
		if _, ok := in.Op.(*clientpb.ClientFrame_CreateConsumer); !ok {
			return false, nil
		}
		created := &clientpb.Reply_CreateConsumer{CreateConsumer: &clientpb.CreateConsumerResult{Member: "q#0"}}
		if err := f.sendReply(stream, &clientpb.Reply{RequestId: in.RequestId, Result: created}); err != nil {
			return true, err
		}
		return true, status.Error(codes.ResourceExhausted, refusal)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, []string{f.addr}, Options{ReconnectPolicy: ReconnectAll})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	told := make(chan error, 1)
	c.SetExceptionListener(func(err error) { told <- err })
	s, err := c.Session(AutoAck)
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Consumer(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Receive(ctx)
	if !errors.Is(err, ErrMessageTooLarge) || errors.Is(err, ErrLostServer) || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("Receive: %v; want the node's refusal, as ErrMessageTooLarge and not ErrLostServer", err)
	}
	select {
	case err := <-told:
		if !errors.Is(err, ErrMessageTooLarge) {
			t.Fatalf("the exception listener was told %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the exception listener was not told")
	}
	f.mu.Lock()
	hellos := f.hellos
	f.mu.Unlock()
	if hellos != 1 {
		t.Fatalf("the connection said Hello %d times: it reconnected", hellos)
	}
}
