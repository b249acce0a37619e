package fsm_test

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// BenchmarkMember_EnqueueDeliverAck measures the state machine's cost per
// message for the whole life of a message, 64 messages of 1 KiB per entry,
// as the proposer batches them: enqueue, deliver, ack.
func BenchmarkMember_EnqueueDeliverAck(b *testing.B) {
	const batch = 64
	body := make([]byte, 1024)
	m := fsm.NewMember()
	var index uint64
	next := func(cmd *fsmpb.Command) []fsm.Result {
		index++
		data, err := fsm.Encode(cmd)
		if err != nil {
			b.Fatal(err)
		}
		res, err := m.Apply(index, data)
		if err != nil || res[0].Err != nil {
			b.Fatalf("apply: %v %v", err, res[0].Err)
		}
		return res
	}
	next(fsm.MustCommand(&fsmpb.OpenSession{Session: "s", Owner: "o"}))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		msgs := make([]*fsmpb.Message, batch)
		ids := make([]string, batch)
		for j := range msgs {
			ids[j] = fmt.Sprintf("m%d-%d", i, j)
			msgs[j] = &fsmpb.Message{Id: ids[j], Body: body, Priority: 4}
		}
		next(fsm.MustCommand(&fsmpb.Enqueue{Now: int64(i), Messages: msgs}))
		res := next(fsm.MustCommand(&fsmpb.Deliver{Session: "s", Now: int64(i), MessageIds: ids}))
		dids := make([]uint64, len(res[0].Delivered))
		for j, d := range res[0].Delivered {
			dids[j] = d.DeliveryID
		}
		next(fsm.MustCommand(&fsmpb.Ack{Session: "s", DeliveryIds: dids}))
	}
}

// BenchmarkMember_ScanPending measures the dispatcher's read of the pending
// order over a deep queue.
func BenchmarkMember_ScanPending(b *testing.B) {
	m := fsm.NewMember()
	for i := range 100 {
		msgs := make([]*fsmpb.Message, 1000)
		for j := range msgs {
			msgs[j] = &fsmpb.Message{Id: fmt.Sprintf("m%d-%d", i, j), Priority: uint32(j % 10)}
		}
		data, _ := fsm.Encode(fsm.MustCommand(&fsmpb.Enqueue{Messages: msgs}))
		if _, err := m.Apply(uint64(i+1), data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		n := 0
		m.ScanPending(0, func([]byte) bool { n++; return n < 256 })
	}
}

// BenchmarkMember_WriteSnapshot measures writing a snapshot of 100,000
// pending 1 KiB messages, per message: what each replica of a large queue
// spends while its members go on applying.
func BenchmarkMember_WriteSnapshot(b *testing.B) {
	const n = 100_000
	m := pendingMember(b, n, make([]byte, 1024))
	img := m.Capture()
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += n {
		if _, err := img.WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// pendingMember is a member holding n pending messages with the given body.
func pendingMember(b *testing.B, n int, body []byte) *fsm.Member {
	return fillPending(b, fsm.NewMember(), n, body)
}

// fillPending stores n pending messages with the given body in m.
func fillPending(b *testing.B, m *fsm.Member, n int, body []byte) *fsm.Member {
	for i := range n / 1000 {
		msgs := make([]*fsmpb.Message, 1000)
		for j := range msgs {
			msgs[j] = &fsmpb.Message{Id: fmt.Sprintf("ID:%032d", i*1000+j), Body: body, Priority: 4}
		}
		data, err := fsm.Encode(fsm.MustCommand(&fsmpb.Enqueue{Now: 1, Messages: msgs}))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Apply(uint64(i+1), data); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

// BenchmarkMember_Restore measures reading a snapshot of 100,000 pending
// 1 KiB messages back into a state: what a restarted node spends before it
// serves, per message.
func BenchmarkMember_Restore(b *testing.B) {
	const n = 100_000
	m := pendingMember(b, n, make([]byte, 1024))
	var snap bytes.Buffer
	if _, err := m.Capture().WriteTo(&snap); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(snap.Len()) / n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += n {
		got, err := fsm.RestoreMember(bytes.NewReader(snap.Bytes()))
		if err != nil || got.Stats().Pending != n {
			b.Fatalf("restore: %v, %d pending", err, got.Stats().Pending)
		}
	}
}

// BenchmarkMember_Capture measures taking a snapshot's image of a million
// pending messages: hashicorp/raft calls it on the goroutine that applies
// entries, so the member commits nothing while it runs.
func BenchmarkMember_Capture(b *testing.B) {
	m := pendingMember(b, 1_000_000, []byte("x"))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if img := m.Capture(); img == nil {
			b.Fatal("no image")
		}
	}
}

// BenchmarkMember_CaptureBodiesAway is BenchmarkMember_Capture for a
// member that put its bodies away, as the member package's do: most of its
// messages are held by their records alone.
func BenchmarkMember_CaptureBodiesAway(b *testing.B) {
	m := awayMember(b, 1_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if img := m.Capture(); img == nil {
			b.Fatal("no image")
		}
	}
}

// countingPut puts bodies away to a place that only counts them.
func countingPut() func(bodies [][]byte) ([]fsm.BodyRef, error) {
	var at uint64
	return func(bodies [][]byte) ([]fsm.BodyRef, error) {
		refs := make([]fsm.BodyRef, len(bodies))
		for i, body := range bodies {
			at += uint64(len(body))
			refs[i] = fsm.BodyRef{At: at, Len: uint32(len(body))}
		}
		return refs, nil
	}
}

// awayMember is a member holding n pending 1 KiB messages whose bodies it
// put away.
func awayMember(b *testing.B, n int) *fsm.Member {
	m := fsm.NewMember()
	m.TrackBodies()
	fillPending(b, m, n, make([]byte, 1024))
	if err := m.PutBodiesAway(0, countingPut()); err != nil || m.HeldBodyBytes() != 0 {
		b.Fatalf("put away: %v, %d bytes held", err, m.HeldBodyBytes())
	}
	return m
}

// BenchmarkMember_CollectBesideAMillion measures one full collection of a
// heap holding a member with a million pending messages whose bodies were
// put away, as the member package does beside a deep queue: the collector
// marks the per-message state on every cycle, so its cost is what a node
// pays again and again while a million messages wait (docs/performance.md).
// Read the figure with GOMAXPROCS=2, as on the reference machines.
func BenchmarkMember_CollectBesideAMillion(b *testing.B) {
	m := awayMember(b, 1_000_000)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		runtime.GC()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc)/1e6, "live-MB")
	b.ReportMetric(float64(after.HeapObjects)/1e6, "Mobjects")
	runtime.KeepAlive(m)
}

// BenchmarkMember_EnqueuePuttingBodiesAway measures the state machine's
// cost per message stored into a queue, as a member that puts bodies away
// runs it (64 messages of 1 KiB per entry, every body put away after its
// entry, to a place that only counts them), in a queue of 1,000 and in one
// of a million, as the million-pending rows of docs/performance.md compare
// sends beside each. Nothing is consumed, so each queue grows by what is
// measured: with -benchtime 50000x, as the suite's rows send, from 1,000
// to 51,000 and from a million to 1,050,000.
func BenchmarkMember_EnqueuePuttingBodiesAway(b *testing.B) {
	for _, depth := range []int{1000, 1000000} {
		// One member per depth, filled on the first call only: the testing
		// package calls the function again with a larger b.N.
		m := fsm.NewMember()
		m.TrackBodies()
		enqueue := enqueuer(m)
		filled := false
		b.Run(fmt.Sprintf("beside-%d", depth), func(b *testing.B) {
			if !filled {
				if err := enqueue(depth); err != nil {
					b.Fatal(err)
				}
				filled = true
			}
			b.SetBytes(1024)
			b.ReportAllocs()
			b.ResetTimer()
			if err := enqueue(b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// enqueuer returns a function that applies count more 1 KiB messages to m,
// 64 per entry, putting every body away after its entry.
func enqueuer(m *fsm.Member) func(count int) error {
	const batch = 64
	body := make([]byte, 1024)
	put := countingPut()
	var index uint64
	var sent int
	return func(count int) error {
		for end := sent + count; sent < end; {
			msgs := make([]*fsmpb.Message, min(batch, end-sent))
			for j := range msgs {
				msgs[j] = &fsmpb.Message{Id: fmt.Sprintf("ID:%032d", sent), Body: body, Priority: 4}
				sent++
			}
			data, err := fsm.Encode(fsm.MustCommand(&fsmpb.Enqueue{Now: int64(sent), Messages: msgs}))
			if err != nil {
				return err
			}
			index++
			if _, err := m.Apply(index, data); err != nil {
				return err
			}
			if err := m.PutBodiesAway(0, put); err != nil {
				return err
			}
			if held := m.HeldBodyBytes(); held != 0 {
				return fmt.Errorf("%d bytes of bodies still held after putting them away", held)
			}
		}
		return nil
	}
}
