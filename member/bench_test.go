package member

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// BenchmarkReplica_Enqueue measures committed single-message sends per
// second on one fsynced replica, with several concurrent senders: the
// proposer packs what queues up while Raft writes into the next entry, so
// throughput should grow with the senders while the fsyncs per second stay
// bounded by the disk.
func BenchmarkReplica_Enqueue(b *testing.B) {
	for _, senders := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) {
			r := benchReplica(b)
			body := make([]byte, 1024)
			var seq atomic.Int64
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N / senders
			for s := range senders {
				n := per
				if s == 0 {
					n += b.N % senders
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range n {
						id := fmt.Sprintf("m%d", seq.Add(1))
						if _, err := r.Enqueue(context.Background(), []*fsmpb.Message{{Id: id, Body: body, Priority: 4}}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkReplica_EnqueueBatches measures sends of 512 messages at a time
// by 4 concurrent senders, as asynchronous producers send them: per message,
// the bytes the leader allocates (B/op over the messages) are what its
// collector must keep up with.
func BenchmarkReplica_EnqueueBatches(b *testing.B) {
	const senders, batch = 4, 512
	r := benchReplica(b)
	body := make([]byte, 1024)
	var seq atomic.Int64
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := (b.N + senders - 1 - s) / senders; n > 0; n -= batch {
				ms := make([]*fsmpb.Message, min(n, batch))
				for i := range ms {
					ms[i] = &fsmpb.Message{Id: fmt.Sprintf("ID:%032x", seq.Add(1)), Body: body, Priority: 4}
				}
				if _, err := r.Enqueue(context.Background(), ms); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkReplica_DeliverAck measures the dispatcher and acknowledgement
// path: messages enqueued beforehand are delivered to one consumer with a
// prefetch of 256 and acknowledged in batches of 32.
func BenchmarkReplica_DeliverAck(b *testing.B) {
	r := benchReplica(b)
	ctx := context.Background()
	body := make([]byte, 1024)
	for i := 0; i < b.N; i += 500 {
		msgs := make([]*fsmpb.Message, min(500, b.N-i))
		for j := range msgs {
			msgs[j] = &fsmpb.Message{Id: fmt.Sprintf("m%d", i+j), Body: body, Priority: 4}
		}
		if _, err := r.Enqueue(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.OpenSession(ctx, "s", "o"); err != nil {
		b.Fatal(err)
	}
	got := make(chan []fsm.Delivery, 1024)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	if err := r.AddConsumer(&Consumer{ID: "c", Session: "s", Push: func(d []fsm.Delivery) bool { got <- d; return true }}, 256); err != nil {
		b.Fatal(err)
	}
	var pending []uint64
	for acked := 0; acked < b.N; {
		for _, d := range <-got {
			pending = append(pending, d.DeliveryID)
		}
		if len(pending) >= 32 || acked+len(pending) == b.N {
			n, _, err := r.Ack(ctx, "s", pending)
			if err != nil {
				b.Fatal(err)
			}
			acked += n
			r.Credit("c", len(pending))
			pending = pending[:0]
		}
	}
}

// benchReplica keeps bodies in memory up to the nodes' default, as a node does.
func benchReplica(b *testing.B) *Replica {
	return testReplica(b, b.TempDir(), func(c *Config) { c.BodyMemory = DefaultBodyMemory })
}

// BenchmarkRestore measures a restore of 200,000 pending 1 KiB messages
// (CAIRN_BENCH_RESTORE_MESSAGES sets another number) into memory the process
// has not touched yet (it is given back to the system before each one), as
// in a node that restarts: with the records decoded on the restoring
// goroutine alone, on one more goroutine per core, and on those putting the
// bodies past the nodes' default memory into files, as a node does.
func BenchmarkRestore(b *testing.B) {
	n := benchRestoreMessages(b)
	m := fsm.NewMember()
	body := make([]byte, 1024)
	for i := 0; i < n; i += 1000 {
		batch := make([]*fsmpb.Message, 1000)
		for j := range batch {
			batch[j] = &fsmpb.Message{Id: fmt.Sprintf("ID:%032x", i+j), Body: body, Priority: 4}
		}
		data, err := fsm.Encode(fsm.MustCommand(&fsmpb.Enqueue{Now: 1, Messages: batch}))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Apply(uint64(i/1000+1), data); err != nil {
			b.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := m.Capture().WriteTo(&snap); err != nil {
		b.Fatal(err)
	}
	m = nil
	for _, workers := range slices.Compact([]int{1, restoreWorkers()}) {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				debug.FreeOSMemory()
				b.StartTimer()
				got, err := restoreMember(bytes.NewReader(snap.Bytes()), workers, nil)
				if err != nil || got.Stats().Pending != n {
					b.Fatalf("restore: %v", err)
				}
			}
		})
	}
	b.Run(fmt.Sprintf("workers=%d/bodies-away", restoreWorkers()), func(b *testing.B) {
		store, err := openBodyStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			debug.FreeOSMemory()
			first := store.roll()
			b.StartTimer()
			put := &restoreBodies{store: store, memory: DefaultBodyMemory}
			got, err := restoreMember(bytes.NewReader(snap.Bytes()), restoreWorkers(), put)
			if err != nil || got.Stats().Pending != n || put.failed.Load() != nil {
				b.Fatalf("restore: %v", err)
			}
			b.StopTimer()
			store.dropFiles(first, false)
			b.StartTimer()
		}
	})
}

func benchRestoreMessages(b *testing.B) int {
	if s := os.Getenv("CAIRN_BENCH_RESTORE_MESSAGES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	return 200_000
}

// BenchmarkIdleMembers measures what an idle member replica costs this
// node, in heap and goroutines: opened in a group of its own, and opened
// in a group shared with the others (one replica here: a follower's
// replica costs the same or less, as nothing dispatches).
func BenchmarkIdleMembers(b *testing.B) {
	const members = 200
	for _, shared := range []bool{false, true} {
		b.Run(fmt.Sprintf("shared=%v", shared), func(b *testing.B) {
			for range b.N {
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				goroutines := runtime.NumGoroutine()
				var closers []func() error
				var s *Shared
				if shared {
					s = sharedGroup(b, []string{"n1"}, []string{b.TempDir()})[0]
					closers = append(closers, s.Close)
				}
				for i := range members {
					key := fmt.Sprintf("q%d#0@u", i)
					if shared {
						r, err := s.Open(key, Config{Name: key})
						if err != nil {
							b.Fatal(err)
						}
						wait.For(b, 10*time.Second, "hosted", r.Leading)
						continue
					}
					r := testReplica(b, b.TempDir())
					closers = append(closers, r.Close)
				}
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapInuse+after.StackInuse-before.HeapInuse-before.StackInuse)/members, "bytes/member")
				b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/members, "goroutines/member")
				for _, c := range closers {
					c()
				}
			}
		})
	}
}
