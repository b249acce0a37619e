package cluster

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/client"
)

// Random interleavings of three transacted sessions on three nodes, each
// sending to and receiving from a distributed queue, committing and rolling
// back, against one cluster. At the end of each sequence the queue is
// drained and must hold exactly: every input no committed transaction
// consumed, and every send of a committed transaction, each once; nothing a
// rolled-back transaction sent. No send of a rolled-back transaction is ever
// received, and a message a rolled-back transaction received comes again
// marked redelivered, with a delivery count above the one it had then.
func TestTx_Property_RandomInterleavings(t *testing.T) {
	t.Parallel()
	// Each sequence costs a queue and three sessions: a few dozen steps in
	// a handful of sequences, unless -rapid.checks says otherwise.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		_ = flag.Set("rapid.checks", "6")
		t.Cleanup(func() { _ = flag.Set("rapid.checks", f.DefValue) })
	}
	tc := NewTestCluster(t, 3)
	const q = "tq"
	if _, err := tc.Admin("n1").CreateQueue(stepCtx(t, 20*time.Second), q, client.QueueOptions{Members: 3}); err != nil {
		t.Fatal(err)
	}
	tc.WaitSpread(q, 3)
	round := 0
	rapid.Check(t, func(rt *rapid.T) {
		// Each sequence starts on the empty queue the last one drained.
		ctx := stepCtx(t, 30*time.Second)
		round++
		prefix := fmt.Sprintf("r%d", round)
		input := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), q), prefix+"-in-", 6)

		type worker struct {
			s        *client.Session
			k        *client.Consumer
			sent     []string
			consumed []*client.Message
		}
		var ws []*worker
		for i, id := range tc.IDs() {
			s := mustTx(t, tc.Dial(id))
			ws = append(ws, &worker{s: s, k: mustConsumer(t, ctx, s, fmt.Sprintf("%s#%d", q, i), client.WithPrefetch(2))})
		}
		committedSends, committedTaken, rolledBack := map[string]bool{}, map[string]bool{}, map[string]bool{}
		// The delivery count each message had when a transaction that
		// received it rolled back, until a committed one consumes it.
		returned := map[string]int{}
		// check fails on a message no one may receive, or one a rollback
		// returned that comes back unmarked or with its count not raised.
		check := func(rt *rapid.T, m *client.Message) {
			b := string(m.Body)
			if rolledBack[b] {
				rt.Fatalf("%q, sent by a rolled-back transaction, was received", b)
			}
			if c, ok := returned[b]; ok && (!m.Redelivered || m.DeliveryCount <= c) {
				rt.Fatalf("%q came back from a rollback with redelivered %v and delivery count %d; want true and above %d",
					b, m.Redelivered, m.DeliveryCount, c)
			}
		}
		end := func(w *worker, commit bool) {
			var err error
			if commit {
				err = w.s.Commit(ctx)
			} else {
				err = w.s.Rollback(ctx)
			}
			if err != nil {
				rt.Fatalf("commit %v: %v", commit, err)
			}
			for _, b := range w.sent {
				if commit {
					committedSends[b] = true
				} else {
					rolledBack[b] = true
				}
			}
			for _, m := range w.consumed {
				b := string(m.Body)
				if !commit {
					returned[b] = m.DeliveryCount
					continue
				}
				if committedTaken[b] {
					rt.Fatalf("%q consumed by two committed transactions", b)
				}
				committedTaken[b] = true
				delete(returned, b)
			}
			w.sent, w.consumed = nil, nil
		}
		n := 0
		pick := rapid.IntRange(0, 2)
		rt.Repeat(map[string]func(*rapid.T){
			"send": func(rt *rapid.T) {
				w := ws[pick.Draw(rt, "worker")]
				n++
				b := fmt.Sprintf("%s-tx-%d", prefix, n)
				dest := fmt.Sprintf("%s#%d", q, rapid.IntRange(0, 2).Draw(rt, "member"))
				if _, err := mustProducer(t, w.s, dest).Send(ctx, &client.Message{Body: []byte(b)}); err != nil {
					rt.Fatal(err)
				}
				w.sent = append(w.sent, b)
			},
			"receive": func(rt *rapid.T) {
				w := ws[pick.Draw(rt, "worker")]
				m, err := w.k.ReceiveTimeout(20 * time.Millisecond)
				if err != nil {
					rt.Fatal(err)
				}
				if m != nil {
					if committedTaken[string(m.Body)] {
						rt.Fatalf("%q came again after a committed transaction consumed it", m.Body)
					}
					check(rt, m)
					w.consumed = append(w.consumed, m)
				}
			},
			"commit":   func(rt *rapid.T) { end(ws[pick.Draw(rt, "worker")], true) },
			"rollback": func(rt *rapid.T) { end(ws[pick.Draw(rt, "worker")], false) },
		})
		for _, w := range ws {
			end(w, rapid.Bool().Draw(rt, "last commit"))
			if err := w.s.Close(); err != nil {
				rt.Fatal(err)
			}
		}
		var want []string
		for _, b := range input {
			if !committedTaken[b] {
				want = append(want, b)
			}
		}
		for b := range committedSends {
			if !committedTaken[b] {
				want = append(want, b)
			}
		}
		drained := drainUntil(t, mustSession(t, tc.Dial("n2"), client.ClientAck), q, 3, func(got []*client.Message) bool { return len(got) >= len(want) })
		for _, m := range drained {
			check(rt, m)
		}
		got := bodiesOf(drained)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			rt.Fatalf("queue %s holds %v; want %v (rolled back: %v)", q, got, want, rolledBack)
		}
	})
}
