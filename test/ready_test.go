package test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// TestReadyMeansServing checks that once /readyz answers 200 after a
// restart, the node serves the queue it holds at once: its member group has
// a leader and has applied its log, `queue show` counts every message, a
// consumer can be created and a send succeeds.
func TestReadyMeansServing(t *testing.T) {
	s := newServer(t)
	s.start()
	const queue = "ready"
	s.createQueue(queue)
	total := 3
	mustOK(t, nil, "--server", s.addrs.client, "send", queue, "--count", "3")
	restarts := 10
	if testing.Short() {
		restarts = 3
	}
	for i := 1; i <= restarts; i++ {
		s.kill()
		s.start()
		if st := s.status(); !s.serving(st, queue+"#0") {
			t.Errorf("restart %d: /readyz answered 200, but the node's status shows %s#0 without a leader or behind its log: %+v", i, queue, st.Groups)
		}
		if info := s.showQueue(queue); info.Pending+info.Delivered != uint64(total) {
			t.Errorf("restart %d: /readyz answered 200, but queue show counts %d pending and %d delivered, want %d in all", i, info.Pending, info.Delivered, total)
		}
		conn := s.dial(client.Options{RequestTimeout: 10 * time.Second})
		sess, err := conn.Session(client.AutoAck)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := sess.Consumer(ctx, queue); err != nil {
			t.Errorf("restart %d: a consumer right after /readyz answered 200: %v", i, err)
		}
		p, err := sess.Producer(queue)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Send(ctx, &client.Message{Body: []byte("after restart")}); err != nil {
			t.Errorf("restart %d: a send right after /readyz answered 200: %v", i, err)
		} else {
			total++
		}
		cancel()
		conn.Close()
	}
}
