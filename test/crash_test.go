package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// The crash workload's shape.
const (
	crashProducers      = 3
	crashSendsPerProd   = 3000 // bound of one producer's sends in a cycle
	crashConsumerLimit  = 2000 // messages the consumer takes in a cycle
	crashKillAfterSends = 1000 // successful sends of a cycle before the kill
	crashMinReceived    = 30   // messages the consumer has taken before the kill
	crashKillDeadline   = 45 * time.Second
	drainIdle           = 2 * time.Second // a drain ends after this long without a message
	drainDeadline       = 60 * time.Second
)

// errList collects errors from several goroutines.
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errList) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errList) list() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// createQueue creates a one-member queue with the admin client.
func (s *server) createQueue(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := client.NewAdmin([]string{s.addrs.client})
	if err != nil {
		s.t.Fatal(err)
	}
	defer a.Close()
	info, err := a.CreateQueue(ctx, name, client.QueueOptions{})
	if err != nil {
		s.t.Fatalf("create queue %s: %v", name, err)
	}
	if len(info.Members) != 1 {
		s.t.Fatalf("queue %s has %d members, want 1 on a single node", name, len(info.Members))
	}
}

// TestSIGKILLMidStream is the single-node crash test of promises 1-3: while
// producers send continuously and a consumer receives and acknowledges
// some of what it gets, the server is killed with SIGKILL and restarted on
// the same data directory, twice (once with -short). Then the queue is
// drained. No send that returned ok may be lost, no message whose
// acknowledgement returned ok may come again, every message received and
// not acknowledged must come again marked redelivered with a higher
// delivery count, and nothing may come that was never sent, or twice in
// the drain.
func TestSIGKILLMidStream(t *testing.T) {
	cycles := 2
	if testing.Short() {
		cycles = 1
	}
	s := newServer(t)
	s.start()
	const queue = "crash"
	s.createQueue(queue)
	h := newHistory()
	for c := 1; c <= cycles; c++ {
		phase := fmt.Sprintf("cycle %d", c)
		crashCycle(t, s, h, queue, phase)
		if t.Failed() {
			t.FailNow()
		}
		s.start()
	}
	drain(t, s, h, queue)
	reportHistory(t, h)
}

// crashCycle runs producers and a consumer against the node and kills the
// node with SIGKILL in the middle of it.
func crashCycle(t *testing.T, s *server, h *history.History, queue, phase string) {
	t.Helper()
	opts := client.Options{Prefetch: 16, RequestTimeout: 10 * time.Second}
	prodConn := s.dial(opts)
	consConn := s.dial(opts)
	defer prodConn.Close()
	defer consConn.Close()

	var (
		killed     atomic.Bool
		stop       = make(chan struct{})
		okSends    atomic.Int64
		received   atomic.Int64
		unexpected errList
		wg         sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		if !killed.Load() {
			unexpected.add(fmt.Errorf(format, args...))
		}
	}

	for p := range crashProducers {
		ps, err := prodConn.Session(client.AutoAck)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := ps.Producer(queue)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range crashSendsPerProd {
				select {
				case <-stop:
					return
				default:
				}
				m := &client.Message{ID: client.NewMessageID(), Body: fmt.Appendf(nil, "%s producer %d message %d", phase, p, i)}
				h.Sending(m.ID)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := pr.Send(ctx, m)
				cancel()
				h.Sent(m.ID, err)
				if err != nil {
					// After the kill every producer ends on its first error.
					fail("%s: producer %d: send before the kill: %w", phase, p, err)
					return
				}
				if r.ID != m.ID || r.Duplicate {
					fail("%s: producer %d: sent %s, receipt %+v", phase, p, m.ID, r)
				}
				okSends.Add(1)
			}
		}()
	}

	sess, err := consConn.Session(client.IndividualAck)
	if err != nil {
		t.Fatal(err)
	}
	k, err := sess.Consumer(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Two of every three messages are acknowledged; the third is held,
		// unacknowledged, until the kill.
		for n := 1; n <= crashConsumerLimit; {
			select {
			case <-stop:
				return
			default:
			}
			m, err := k.ReceiveTimeout(100 * time.Millisecond)
			if err != nil {
				fail("%s: receive before the kill: %w", phase, err)
				return
			}
			if m == nil {
				continue
			}
			r := h.Received(phase, m)
			received.Add(1)
			if n%3 != 0 {
				err := m.Ack()
				h.Acked(r, err)
				if err != nil {
					fail("%s: ack before the kill: %w", phase, err)
					return
				}
			}
			n++
		}
	}()

	// Kill once enough has happened, in the middle of the stream.
	start := time.Now()
	for okSends.Load() < crashKillAfterSends || received.Load() < crashMinReceived {
		if errs := unexpected.list(); len(errs) > 0 {
			break
		}
		if time.Since(start) > crashKillDeadline {
			unexpected.add(fmt.Errorf("%s: after %v only %d sends succeeded and %d messages were received; want %d and %d before the kill",
				phase, crashKillDeadline, okSends.Load(), received.Load(), crashKillAfterSends, crashMinReceived))
			break
		}
		time.Sleep(time.Millisecond)
	}
	killed.Store(true)
	s.kill()
	t.Logf("%s: SIGKILL after %v, %d sends ok, %d messages received", phase, time.Since(start).Round(time.Millisecond), okSends.Load(), received.Load())
	close(stop)
	waitDone(t, &wg, 30*time.Second, phase+": producers and consumer after the kill")
	for _, err := range unexpected.list() {
		t.Error(err)
	}
}

// drain receives every message left in the queue with a fresh AutoAck
// consumer until none comes for drainIdle, then checks the queue is empty.
func drain(t *testing.T, s *server, h *history.History, queue string) {
	t.Helper()
	conn := s.dial(client.Options{RequestTimeout: 10 * time.Second})
	sess, err := conn.Session(client.AutoAck)
	if err != nil {
		t.Fatal(err)
	}
	k, err := sess.Consumer(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	limit := h.Attempted() + 100
	start := time.Now()
	n := 0
	for ; ; n++ {
		if n > limit {
			t.Errorf("drain: over %d messages, more than were ever sent", limit)
			break
		}
		if time.Since(start) > drainDeadline {
			t.Errorf("drain: still receiving after %v", drainDeadline)
			break
		}
		m, err := k.ReceiveTimeout(drainIdle)
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
		if m == nil {
			break
		}
		h.Received(history.DrainPhase, m)
	}
	if err := conn.Close(); err != nil {
		t.Errorf("drain: closing the connection: %v", err)
	}
	t.Logf("drain: %d messages in %v", n, time.Since(start).Round(time.Millisecond))
	if info := s.showQueue(queue); info.Pending != 0 || info.Delivered != 0 {
		t.Errorf("after the drain queue %s holds %d pending and %d delivered messages, want none", queue, info.Pending, info.Delivered)
	}
}

// TestSIGTERMGraceful checks that SIGTERM stops the node gracefully, with
// client connections open and messages held unacknowledged: the process
// exits 0 within a few seconds, and after a restart every message is
// there; those held come back marked redelivered.
func TestSIGTERMGraceful(t *testing.T) {
	s := newServer(t)
	s.start()
	const queue = "graceful"
	s.createQueue(queue)
	h := newHistory()

	const producers, perProducer = 4, 50
	prodConn := s.dial(client.Options{RequestTimeout: 10 * time.Second})
	defer prodConn.Close()
	var wg sync.WaitGroup
	var errs errList
	for p := range producers {
		ps, err := prodConn.Session(client.AutoAck)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := ps.Producer(queue)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				m := &client.Message{ID: client.NewMessageID(), Body: fmt.Appendf(nil, "producer %d message %d", p, i)}
				h.Sending(m.ID)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := pr.Send(ctx, m)
				cancel()
				h.Sent(m.ID, err)
				if err != nil {
					errs.add(err)
					return
				}
			}
		}()
	}
	waitDone(t, &wg, 60*time.Second, "producers")
	if e := errs.list(); len(e) > 0 {
		t.Fatalf("sends failed: %v", e)
	}

	// A consumer takes 30 messages, acknowledges 20 and holds 10; its
	// connection stays open through the SIGTERM.
	consConn := s.dial(client.Options{RequestTimeout: 10 * time.Second})
	defer consConn.Close()
	sess, err := consConn.Session(client.IndividualAck)
	if err != nil {
		t.Fatal(err)
	}
	k, err := sess.Consumer(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for n := 1; n <= 30; n++ {
		m, err := k.ReceiveTimeout(10 * time.Second)
		if err != nil || m == nil {
			t.Fatalf("receive %d: %v, %v", n, m, err)
		}
		r := h.Received("before SIGTERM", m)
		if n%3 != 0 {
			err := m.Ack()
			h.Acked(r, err)
			if err != nil {
				t.Fatalf("ack: %v", err)
			}
			acked++
		}
	}

	took, ok := s.terminate()
	if !ok {
		t.Fatalf("server still running %v after SIGTERM", took)
	}
	if code := s.proc.exitCode(); code != 0 {
		t.Errorf("after SIGTERM the server exited with status %d (%v), want 0", code, s.proc.err)
	}
	if took > 10*time.Second {
		t.Errorf("the server took %v to stop after SIGTERM, want a few seconds", took)
	}
	t.Logf("SIGTERM: exited in %v", took.Round(time.Millisecond))

	s.start()
	info := s.showQueue(queue)
	if want := uint64(producers*perProducer - acked); info.Pending+info.Delivered != want {
		t.Errorf("after the restart queue %s holds %d pending and %d delivered, want %d in all", queue, info.Pending, info.Delivered, want)
	}
	drain(t, s, h, queue)
	reportHistory(t, h)
}
