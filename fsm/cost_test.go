package fsm_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// countingMemory is a member that counts memory, limited to maxBytes.
func countingMemory(t tb, maxBytes int64) *member {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxBytes: maxBytes, DedupWindowNs: fsm.DefaultDedupWindowNs, DedupMaxIds: 10, CountMemory: true}})
	return f
}

// A member that counts memory counts what holding a message costs, so a
// limit bounds empty messages and properties too: a 1,000-byte member
// takes four empty messages, not a hundred thousand.
func TestEnqueue_CountingMemoryBoundsEmptyMessagesAndProperties(t *testing.T) {
	f := countingMemory(t, 1000)
	taken := 0
	for i := range 100 {
		r := f.do(&fsmpb.Enqueue{Now: int64(i + 1), Messages: []*fsmpb.Message{msg(fmt.Sprint("m", i), body(""))}})
		if r.Err != nil {
			mustErr(t, r.Err, fsm.ErrMemberFull, "an empty message past the limit")
			break
		}
		taken++
	}
	if want := int(1000 / fsm.MessageCost(msg("m0", body("")), 0)); taken != want || want == 0 {
		t.Fatalf("took %d empty messages under a 1,000-byte limit, want %d", taken, want)
	}
	if st := f.m.Stats(); st.Bytes != int64(taken)*fsm.MessageCost(msg("m0", body("")), 0) {
		t.Fatalf("Bytes = %d for %d empty messages", st.Bytes, taken)
	}

	// 100 one-byte properties: 200 bytes of names and values, counted as
	// what their map costs.
	kv := make([]string, 0, 200)
	for i := range 100 {
		kv = append(kv, fmt.Sprintf("%c%c", 'a'+i/26, 'a'+i%26), "v")
	}
	m := msg("p", body(""), props(kv...))
	if size, cost := fsm.MessageSize(m), fsm.MessageCost(m, 0); size != 300 || cost < 100*48 {
		t.Fatalf("100 properties: size %d, cost %d; want 300 and at least 48 a property", size, cost)
	}
	before := state(t, f.m)
	mustErr(t, f.do(&fsmpb.Enqueue{Now: 200, Messages: []*fsmpb.Message{m}}).Err, fsm.ErrMemberFull, "properties past the limit")
	sameState(t, f.m, before, "a refused enqueue")
}

// A message counts the same whether its body is held or put away, ids and
// headers included, so that replicas and restores agree.
func TestMessageCost_CountsEveryFieldAndTheBodyWhereverItIs(t *testing.T) {
	plain := fsm.MessageCost(msg("id-1", body("")), 0)
	for _, c := range []struct {
		name string
		m    *fsmpb.Message
		away int64
		more int64 // at least, over an empty message
	}{
		{"a body", msg("id-1", body("0123456789")), 0, 10},
		{"the same body put away", msg("id-1", body("")), 10, 10},
		{"a dedup id", msg("id-1", body(""), dedup("dedup-id-1")), 0, 10},
		{"headers", &fsmpb.Message{Id: "id-1", CorrelationId: "c", Type: "t", ReplyTo: "r"}, 0, 3},
		{"a typed property", &fsmpb.Message{Id: "id-1", TypedProperties: map[string]*fsmpb.PropertyValue{"n": {Value: &fsmpb.PropertyValue_Int{Int: 1}}}}, 0, 9},
	} {
		if got := fsm.MessageCost(c.m, c.away); got < plain+c.more {
			t.Errorf("%s: cost %d, want at least %d", c.name, got, plain+c.more)
		}
	}
	if a, b := fsm.MessageCost(msg("id-1", body("0123456789")), 0), fsm.MessageCost(msg("id-1", body("")), 10); a != b {
		t.Errorf("a 10-byte body costs %d held and %d put away", a, b)
	}
}

// A member switches between counting bytes and counting memory only while
// it holds nothing: what it holds keeps counting as when it was stored,
// and a snapshot restores the same count.
func TestConfigure_CountMemoryChangesOnlyWhileEmpty(t *testing.T) {
	f := newMember(t)
	f.enqueue(1, msg("a", body("12345")))
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{CountMemory: true}})
	if f.m.Settings().GetCountMemory() || f.m.Stats().Bytes != 5 {
		t.Fatalf("a member holding a message switched to counting memory: %v, %d bytes", f.m.Settings(), f.m.Stats().Bytes)
	}
	f.enqueue(2, msg("b", body("12")))
	if got := restore(t, snapshotBytes(t, f.m)).Stats().Bytes; got != 7 {
		t.Fatalf("restored Bytes = %d, want 7", got)
	}
	f.ok(&fsmpb.Purge{})
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{CountMemory: true}})
	if !f.m.Settings().GetCountMemory() {
		t.Fatal("an empty member did not switch to counting memory")
	}
	f.enqueue(3, msg("c", body("12345"), props("k", "v")))
	want := fsm.MessageCost(msg("c", body("12345"), props("k", "v")), 0)
	if got := f.m.Stats().Bytes; got != want {
		t.Fatalf("Bytes = %d, want the message's cost %d", got, want)
	}
	if got := restore(t, snapshotBytes(t, f.m)).Stats().Bytes; got != want {
		t.Fatalf("restored Bytes = %d, want %d", got, want)
	}
}

// BenchmarkMember_HeapPerMessage measures the heap a member spends per
// message of several shapes beside what MessageCost counts for it
// (fsm/cost.go's figures come from here).
func BenchmarkMember_HeapPerMessage(b *testing.B) {
	props := func(n int, typed bool) func(i int) *fsmpb.Message {
		return func(i int) *fsmpb.Message {
			m := &fsmpb.Message{Id: fmt.Sprintf("ID:%032d", i)}
			for j := range n {
				k := fmt.Sprintf("key%d", j)
				if typed {
					if m.TypedProperties == nil {
						m.TypedProperties = map[string]*fsmpb.PropertyValue{}
					}
					m.TypedProperties[k] = &fsmpb.PropertyValue{Value: &fsmpb.PropertyValue_Int{Int: int64(j)}}
				} else {
					if m.Properties == nil {
						m.Properties = map[string]string{}
					}
					m.Properties[k] = "value"
				}
			}
			return m
		}
	}
	for _, c := range []struct {
		name string
		make func(i int) *fsmpb.Message
	}{
		{"empty", func(i int) *fsmpb.Message { return &fsmpb.Message{Id: fmt.Sprintf("ID:%032d", i)} }},
		{"64-byte-id", func(i int) *fsmpb.Message { return &fsmpb.Message{Id: fmt.Sprintf("ID:%061d", i)} }},
		{"dedup-id", func(i int) *fsmpb.Message {
			return &fsmpb.Message{Id: fmt.Sprintf("ID:%032d", i), DedupId: fmt.Sprintf("D:%032d", i)}
		}},
		{"100-byte-body", func(i int) *fsmpb.Message {
			return &fsmpb.Message{Id: fmt.Sprintf("ID:%032d", i), Body: make([]byte, 100)}
		}},
		{"1-property", props(1, false)},
		{"10-properties", props(10, false)},
		{"10-typed-properties", props(10, true)},
	} {
		b.Run(c.name, func(b *testing.B) {
			const n = 20_000
			var heap, counted int64
			for range b.N {
				before := heapInUse()
				m := fsm.NewMember()
				m.Apply(1, entry(b, &fsmpb.Configure{Settings: &fsmpb.MemberSettings{CountMemory: true}}))
				for i := 0; i < n; i += 1000 {
					msgs := make([]*fsmpb.Message, 1000)
					for j := range msgs {
						msgs[j] = c.make(i + j)
					}
					// Copied out of the entry, as a body would be once its
					// entry is let go.
					for _, msg := range msgs {
						msg.Body = append([]byte(nil), msg.Body...)
					}
					if _, err := m.Apply(uint64(2+i), entry(b, &fsmpb.Enqueue{Now: 1, Messages: msgs})); err != nil {
						b.Fatal(err)
					}
				}
				heap += int64(heapInUse() - before)
				counted += m.Stats().Bytes
				runtime.KeepAlive(m)
			}
			b.ReportMetric(float64(heap)/float64(n*b.N), "heap-B/msg")
			b.ReportMetric(float64(counted)/float64(n*b.N), "counted-B/msg")
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return s.HeapAlloc
}
