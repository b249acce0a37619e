package client

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
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
