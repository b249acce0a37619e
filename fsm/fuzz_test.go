package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// FuzzDecode: Decode never panics; it either reads an entry of a version it
// knows or returns an error wrapping ErrCorrupt.
func FuzzDecode(f *testing.F) {
	for _, e := range seedEntries(f) {
		f.Add(e)
	}
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x00})
	f.Add([]byte{0x08, 0x63})
	f.Add([]byte("\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := fsm.Decode(data)
		// Decode reads the envelope by hand; proto.Unmarshal is the oracle.
		var ref fsmpb.Entry
		refErr := proto.Unmarshal(data, &ref)
		if refOK := refErr == nil && ref.Version != 0 && ref.Version <= fsm.EntryVersion; refOK != (err == nil) {
			t.Fatalf("Decode error %v, proto.Unmarshal error %v (version %d): they disagree", err, refErr, ref.Version)
		}
		if err == nil {
			// Decode skips unknown fields, which proto.Unmarshal keeps.
			ref.ProtoReflect().SetUnknown(nil)
			for _, c := range ref.Commands {
				c.ProtoReflect().SetUnknown(nil)
			}
			if !proto.Equal(e, &ref) {
				t.Fatalf("Decode = %v; proto.Unmarshal = %v", e, &ref)
			}
		}
		if err != nil {
			if !errors.Is(err, fsm.ErrCorrupt) || e != nil {
				t.Fatalf("Decode = %v, %v; want nil and an error wrapping ErrCorrupt", e, err)
			}
			return
		}
		if v := e.GetVersion(); v == 0 || v > fsm.EntryVersion {
			t.Fatalf("Decode accepted version %d", v)
		}
		// What decoded encodes and decodes again to the same entry.
		again, err := proto.Marshal(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		e2, err := fsm.Decode(again)
		if err != nil || !proto.Equal(e, e2) {
			t.Fatalf("re-decode = %v, %v; want %v", e2, err, e)
		}
	})
}

// frame joins entries into one fuzz input: each is a 2-byte big-endian
// length and then its bytes.
func frame(entries ...[]byte) []byte {
	var b []byte
	for _, e := range entries {
		b = binary.BigEndian.AppendUint16(b, uint16(len(e)))
		b = append(b, e...)
	}
	return b
}

// unframe splits a fuzz input into entries; the last may be short.
func unframe(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// seedEntries are valid entries of every member command, and a few corrupt ones.
func seedEntries(t tb) [][]byte {
	return [][]byte{
		entry(t, &fsmpb.OpenSession{Session: "s1", Owner: "fe-1"}),
		entry(t, &fsmpb.OpenSession{Session: "s2", Owner: "fe-2"}),
		entry(t, &fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxBytes: 200, DedupWindowNs: 100, DedupMaxIds: 3}}),
		entry(t, &fsmpb.Enqueue{Now: 10, Messages: []*fsmpb.Message{
			msg("a", prio(9), dedup("da")),
			msg("b", expires(50), props("k", "v", "k2", "v2")),
			msg("c", prio(0)),
		}}),
		entry(t, &fsmpb.Enqueue{Now: 20, Messages: []*fsmpb.Message{msg("d", dedup("da")), msg("e", dedup("de"))}}),
		entry(t, &fsmpb.Deliver{Session: "s1", Now: 30, MessageIds: []string{"a", "b", "c"}}),
		entry(t, &fsmpb.Deliver{Session: "s2", Now: 30, MessageIds: []string{"e", "a"}}),
		entry(t, &fsmpb.Ack{Session: "s1", DeliveryIds: []uint64{1, 4}}),
		entry(t, &fsmpb.Ack{Session: "s2", UpTo: 5}),
		entry(t, &fsmpb.Return{Session: "s1", DeliveryIds: []uint64{2, 3}}),
		entry(t, &fsmpb.Recover{Session: "s1"}),
		entry(t, &fsmpb.Release{Session: "s2"}),
		entry(t, &fsmpb.Expire{Now: 60, MessageIds: []string{"b", "c"}}),
		entry(t, &fsmpb.Purge{}),
		entry(t, &fsmpb.OpenSession{Session: "s1", Owner: "fe-2"}),
		entry(t, &fsmpb.Enqueue{Now: 30, Messages: []*fsmpb.Message{msg("x", prio(10))}}),
		entry(t, &fsmpb.Deliver{Session: "s2", Now: 30, MessageIds: []string{"a"}},
			&fsmpb.Enqueue{Now: 200, Messages: []*fsmpb.Message{msg("f", dedup("da"))}},
			&fsmpb.Deliver{Session: "s1", Now: 200, MessageIds: []string{"f", "c", "e"}}),
		// 17..: max deliveries, redelivery delays, moves (seedRedelivery).
		entry(t, &fsmpb.Configure{Settings: &fsmpb.MemberSettings{DedupWindowNs: 100, DedupMaxIds: 3,
			MaxDeliveries: 2, RedeliveryDelayNs: 10, RedeliveryBackoff: 2, RedeliveryMaxDelayNs: 40}}),
		entry(t, &fsmpb.Enqueue{Now: 40, Messages: []*fsmpb.Message{
			{Id: "g", Body: []byte("moved here"), DeliveryCount: 1, Redelivered: true},
			msg("h", expires(500)),
		}}),
		entry(t, &fsmpb.Deliver{Session: "s1", Now: 45, MessageIds: []string{"a", "b", "c", "g", "h"}}),
		entry(t, &fsmpb.Recover{Session: "s1", Now: 50}),
		entry(t, &fsmpb.Return{Session: "s1", DeliveryIds: []uint64{1, 2, 3, 4, 5, 6, 7, 8}, Now: 55}),
		entry(t, &fsmpb.Release{Session: "s1", Now: 60}),
		entry(t, &fsmpb.Wake{Now: 100}),
		entry(t, &fsmpb.Move{Target: "q.DLQ#0", MessageIds: []string{"a", "b", "c", "d", "e", "f", "g", "h"}}),
		entry(t, &fsmpb.Moved{MessageIds: []string{"a", "b", "c", "d", "e", "f", "g", "h"}}),
		entry(t, &fsmpb.Move{Target: "q", MessageIds: []string{"a", "h"}}),
		entry(t, &fsmpb.Deliver{Session: "s1", Now: 110, MessageIds: []string{"h"}},
			&fsmpb.Return{Session: "s1", DeliveryIds: []uint64{6, 7, 8, 9, 10, 11, 12}, Now: 120},
			&fsmpb.Wake{Now: 1 << 62},
			&fsmpb.Move{Target: "q#1", MessageIds: []string{"h"}},
			&fsmpb.Expire{Now: 500, MessageIds: []string{"h"}},
			&fsmpb.Purge{}),
		entry(t, &fsmpb.CreateDestination{Destination: &fsmpb.Destination{Name: "q"}}),
		entry(t, &fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxBytes: 2000, DedupWindowNs: 100, DedupMaxIds: 3, CountMemory: true}}),
		rawEntry(t, 2, fsm.MustCommand(&fsmpb.Purge{})),
		rawEntry(t, 1, &fsmpb.Command{Type: 99}),
		[]byte("garbage"),
	}
}

// seedRedelivery is a sequence of seedEntries that takes messages through
// every state: delayed, pending again, dead, moving and dead-lettered.
func seedRedelivery(seeds [][]byte) []byte {
	return frame(seeds[0], seeds[17], seeds[3], seeds[18], seeds[19], seeds[20], seeds[23], seeds[19], seeds[21],
		seeds[26], seeds[24], seeds[4], seeds[24], seeds[25], seeds[1], seeds[6], seeds[22], seeds[13], seeds[27])
}

// FuzzMemberApply: a sequence of arbitrary entries applied to a Member never
// panics, and after each entry either it was refused as corrupt and
// changed nothing, or the Member's counts agree with what its query methods
// list. At the end a snapshot restores to the same state.
func FuzzMemberApply(f *testing.F) {
	seeds := seedEntries(f)
	f.Add(frame(seeds...))
	f.Add(frame(seeds[0], seeds[3], seeds[5], seeds[7], seeds[10], seeds[5]))
	f.Add(frame(seeds[2], seeds[3], seeds[4], seeds[16], seeds[1], seeds[6], seeds[11], seeds[12]))
	f.Add(frame(seeds[0], seeds[1], seeds[3], seeds[5], seeds[6], seeds[8], seeds[9], seeds[13], seeds[14]))
	f.Add(frame(seeds[len(seeds)-4:]...))
	f.Add(seedRedelivery(seeds))
	unseen := entry(f, &fsmpb.Return{Session: "s1", DeliveryIds: []uint64{1, 2, 3}, Now: 35, Unseen: true})
	f.Add(frame(seeds[17], seeds[0], seeds[3], unseen, seeds[3], unseen, seeds[5], seeds[6]))
	f.Add(frame(seeds[17], seeds[3], seeds[0], seeds[19], seeds[22], seeds[23], seeds[26], seeds[0], seeds[19], seeds[20], seeds[24], seeds[27]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := fsm.NewMember()
		for i, e := range unframe(data) {
			idx := uint64(i + 1)
			before := fullState(t, m)
			applied := m.Applied()
			mine := bytes.Clone(e)
			rs, err := m.Apply(idx, mine)
			if err != nil {
				if !errors.Is(err, fsm.ErrCorrupt) || rs != nil {
					t.Fatalf("entry %d: Apply = %+v, %v; want nil and an error wrapping ErrCorrupt", i, rs, err)
				}
				if m.Applied() != applied || !bytes.Equal(before, fullState(t, m)) {
					t.Fatalf("entry %d: a corrupt entry changed the state", i)
				}
				continue
			}
			dec, derr := fsm.Decode(e)
			if derr != nil || len(rs) != len(dec.GetCommands()) {
				t.Fatalf("entry %d: %d results; Decode = %v, %v", i, len(rs), dec, derr)
			}
			if m.Applied() != idx {
				t.Fatalf("entry %d: Applied = %d, want %d", i, m.Applied(), idx)
			}
			for j, r := range rs {
				if r.Err != nil && (r.Enqueued != nil || r.Delivered != nil || r.Acked != 0 || r.Returned != 0 || r.Removed != 0 || r.Moved != 0) {
					t.Fatalf("entry %d command %d: rejected with effects: %+v", i, j, r)
				}
			}
			checkCounts(t, m)
			if st := m.Stats(); st.Bytes < 0 {
				t.Fatalf("entry %d: Stats = %+v", i, st)
			}
			// The entry's bytes are not kept.
			after := fullState(t, m)
			for k := range mine {
				mine[k] = 0xa5
			}
			if !bytes.Equal(after, fullState(t, m)) {
				t.Fatalf("entry %d: the state changed with the entry's bytes", i)
			}
			// A replay is skipped.
			if rs, err := m.Apply(idx, e); rs != nil || err != nil {
				t.Fatalf("entry %d: replay = %+v, %v", i, rs, err)
			}
		}
		raw := snapshotBytes(t, m)
		r := restore(t, raw)
		if !bytes.Equal(canonical(t, raw, true), fullState(t, r)) {
			t.Fatal("the restored member differs")
		}
		checkCounts(t, r)
	})
}

// FuzzRestoreMember: RestoreMember never panics on arbitrary bytes; it
// returns a Member or an error wrapping ErrCorrupt. A Member it returns
// writes a snapshot that restores to the same state: the same counts, and
// the same bytes when written again.
func FuzzRestoreMember(f *testing.F) {
	f.Add(snapshotBytes(f, fsm.NewMember()))
	f.Add(snapshotBytes(f, richMember(f).m))
	f.Add(snapshotBytes(f, everyState(f).m))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := fsm.RestoreMember(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, fsm.ErrCorrupt) || m != nil {
				t.Fatalf("RestoreMember = %v, %v", m, err)
			}
			return
		}
		// Whatever was restored can be queried and written out again.
		_ = m.Stats()
		_ = allPending(m)
		_ = m.Sessions()
		_ = m.ExpiredBy(1<<62, 10)
		_ = m.AsideMessages(10)
		_ = m.NextWake()
		once := snapshotBytes(t, m)
		again, err := fsm.RestoreMember(bytes.NewReader(once))
		if err != nil {
			t.Fatalf("a restored member's own snapshot does not restore: %v", err)
		}
		if m.Stats() != again.Stats() || m.Counters() != again.Counters() {
			t.Fatalf("snapshot and restore changed the counts: %+v %+v, then %+v %+v", m.Stats(), m.Counters(), again.Stats(), again.Counters())
		}
		if twice := snapshotBytes(t, again); !bytes.Equal(once, twice) {
			t.Fatal("snapshot, restore, snapshot changed the state")
		}
	})
}

// TestSeedRedelivery_ReachesEveryState keeps the fuzz seeds honest: the
// seedRedelivery sequence takes messages through every state.
func TestSeedRedelivery_ReachesEveryState(t *testing.T) {
	m := fsm.NewMember()
	seen := map[string]bool{}
	for i, e := range unframe(seedRedelivery(seedEntries(t))) {
		rs, err := m.Apply(uint64(i+1), e)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		for _, r := range rs {
			if errors.Is(r.Err, fsm.ErrMalformed) {
				seen["move rejected"] = true
			}
			for _, d := range r.Delivered {
				if d.DeliveryCount > 1 && d.Redelivered {
					seen["redelivered"] = true
				}
			}
		}
		st := m.Stats()
		seen["delayed"] = seen["delayed"] || st.Delayed > 0
		seen["dead-lettered"] = seen["dead-lettered"] || st.DeadLettered > 0
		for _, a := range m.AsideMessages(100) {
			seen["dead"] = seen["dead"] || (a.Dead && a.Target == "")
			seen["moving"] = seen["moving"] || (!a.Dead && a.Target != "")
			seen["dead and moving"] = seen["dead and moving"] || (a.Dead && a.Target != "")
		}
		checkCounts(t, m)
	}
	for _, s := range []string{"delayed", "redelivered", "dead", "moving", "dead and moving", "dead-lettered", "move rejected"} {
		if !seen[s] {
			t.Errorf("the seed sequence never reaches %q", s)
		}
	}
}

// FuzzRestoreMeta: whatever a meta snapshot holds, RestoreMeta returns a
// state that every placement it holds can be read from (each member with
// a replica) and that writes back to the same bytes, or ErrCorrupt.
func FuzzRestoreMeta(f *testing.F) {
	m := fsm.NewMeta()
	for i, body := range []proto.Message{
		&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1", ClientAddr: "127.0.0.1:1", Incarnation: "a"}},
		&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2"}},
		&fsmpb.CreateDestination{Destination: dest("orders", 2, 2)},
		&fsmpb.SetReplicas{Name: "orders", Replicas: 1},
		&fsmpb.RemoveNode{Id: "n2"},
	} {
		if _, err := m.Apply(uint64(i+1), entry(f, body)); err != nil {
			f.Fatal(err)
		}
	}
	var seed bytes.Buffer
	if err := m.WriteSnapshot(&seed); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes())
	f.Add([]byte{})
	// A destination whose member has no replica to host it.
	var bad bytes.Buffer
	noReplica := &fsmpb.MetaSnapshot{Destinations: []*fsmpb.Destination{{Name: "q", Replicas: 1, Members: []*fsmpb.MemberPlacement{{}}}}}
	if _, err := protodelim.MarshalTo(&bad, noReplica); err != nil {
		f.Fatal(err)
	}
	f.Add(bad.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := fsm.RestoreMeta(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, fsm.ErrCorrupt) || m != nil {
				t.Fatalf("RestoreMeta = %v, %v", m, err)
			}
			return
		}
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				_ = p.Replicas[0]
				_ = fsm.Wanted(d, p)
			}
		}
		var once, twice bytes.Buffer
		if err := m.WriteSnapshot(&once); err != nil {
			t.Fatal(err)
		}
		again, err := fsm.RestoreMeta(bytes.NewReader(once.Bytes()))
		if err != nil {
			t.Fatalf("a restored state's own snapshot does not restore: %v", err)
		}
		if err := again.WriteSnapshot(&twice); err != nil || !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatalf("snapshot, restore, snapshot changed the state (%v)", err)
		}
	})
}
