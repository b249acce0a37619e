package fsm_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"sync"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// tb is what the helpers need of *testing.T, *testing.F and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

// owner is the front-end incarnation that holds the sessions of most tests.
const owner = "fe-1"

// entry encodes command bodies into one log entry.
func entry(t tb, bodies ...proto.Message) []byte {
	t.Helper()
	cmds := make([]*fsmpb.Command, len(bodies))
	for i, b := range bodies {
		cmds[i] = fsm.MustCommand(b)
	}
	data, err := fsm.Encode(cmds...)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return data
}

// rawEntry encodes an entry with any version and raw commands, for corrupt input.
func rawEntry(t tb, version uint32, cmds ...*fsmpb.Command) []byte {
	t.Helper()
	data, err := proto.Marshal(&fsmpb.Entry{Version: version, Commands: cmds})
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return data
}

// member drives a Member through Apply with rising indexes.
type member struct {
	t   tb
	m   *fsm.Member
	idx uint64
}

func newMember(t tb) *member { return &member{t: t, m: fsm.NewMember()} }

// apply applies one entry made of bodies at the next index; it must not be corrupt.
func (f *member) apply(bodies ...proto.Message) []fsm.Result {
	f.t.Helper()
	f.idx++
	rs, err := f.m.Apply(f.idx, entry(f.t, bodies...))
	if err != nil {
		f.t.Fatalf("apply %d: %v", f.idx, err)
	}
	if len(rs) != len(bodies) {
		f.t.Fatalf("apply %d: %d results for %d commands", f.idx, len(rs), len(bodies))
	}
	return rs
}

// do applies one command and returns its result.
func (f *member) do(body proto.Message) fsm.Result {
	f.t.Helper()
	return f.apply(body)[0]
}

// ok applies one command that must not be rejected.
func (f *member) ok(body proto.Message) fsm.Result {
	f.t.Helper()
	r := f.do(body)
	if r.Err != nil {
		f.t.Fatalf("%T rejected: %v", body, r.Err)
	}
	return r
}

// open opens sessions held by owner.
func (f *member) open(sessions ...string) {
	f.t.Helper()
	for _, s := range sessions {
		f.ok(&fsmpb.OpenSession{Session: s, Owner: owner})
	}
}

// enqueue stores messages at now; none may be rejected.
func (f *member) enqueue(now int64, msgs ...*fsmpb.Message) []fsm.Enqueued {
	f.t.Helper()
	return f.ok(&fsmpb.Enqueue{Now: now, Messages: msgs}).Enqueued
}

// deliver hands ids to session at now.
func (f *member) deliver(session string, now int64, ids ...string) []fsm.Delivery {
	f.t.Helper()
	return f.ok(&fsmpb.Deliver{Session: session, Now: now, MessageIds: ids}).Delivered
}

// lookup returns a message that must be stored.
func (f *member) lookup(id string) fsm.MessageState {
	f.t.Helper()
	st, ok := f.m.Lookup(id)
	if !ok {
		f.t.Fatalf("message %s is not stored", id)
	}
	return st
}

// absent fails if any of ids is stored.
func (f *member) absent(ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		if _, ok := f.m.Lookup(id); ok {
			f.t.Errorf("message %s is stored, want it gone", id)
		}
	}
}

// msg builds a message; options set its other fields.
func msg(id string, opts ...func(*fsmpb.Message)) *fsmpb.Message {
	m := &fsmpb.Message{Id: id, Body: []byte("body-" + id), Priority: 4}
	for _, o := range opts {
		o(m)
	}
	return m
}

func prio(p uint32) func(*fsmpb.Message)    { return func(m *fsmpb.Message) { m.Priority = p } }
func expires(at int64) func(*fsmpb.Message) { return func(m *fsmpb.Message) { m.Expiration = at } }
func dedup(d string) func(*fsmpb.Message)   { return func(m *fsmpb.Message) { m.DedupId = d } }
func body(b string) func(*fsmpb.Message)    { return func(m *fsmpb.Message) { m.Body = []byte(b) } }
func props(kv ...string) func(*fsmpb.Message) {
	return func(m *fsmpb.Message) {
		m.Properties = make(map[string]string)
		for i := 0; i+1 < len(kv); i += 2 {
			m.Properties[kv[i]] = kv[i+1]
		}
	}
}

// pendingIDs lists the pending ids not expired at now, in delivery order.
func pendingIDs(m *fsm.Member, now int64) []string {
	ids := []string{}
	m.ScanPending(now, func(id []byte) bool { ids = append(ids, string(id)); return true })
	return ids
}

// allPending lists every pending id, expired or not: no message expires at
// the smallest time.
func allPending(m *fsm.Member) []string { return pendingIDs(m, math.MinInt64) }

// snapshotBuffers are reused writers and readers as large as the ones
// WriteTo and RestoreMember make, which then use them as they are instead of
// allocating their own for every snapshot the tests take.
var (
	snapshotWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 256<<10) }}
	snapshotReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 256<<10) }}
)

// snapshotBytes is the raw stream of Capture().WriteTo.
func snapshotBytes(t tb, m *fsm.Member) []byte {
	t.Helper()
	return imageBytes(t, m.Capture())
}

// imageBytes writes a member image out.
func imageBytes(t tb, img *fsm.MemberImage) []byte {
	t.Helper()
	var buf bytes.Buffer
	bw := snapshotWriters.Get().(*bufio.Writer)
	defer snapshotWriters.Put(bw)
	bw.Reset(&buf)
	n, err := img.WriteTo(bw)
	if err != nil {
		t.Fatalf("write snapshot: %v", err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatalf("flush snapshot: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

// restore reads a member back from snapshot bytes.
func restore(t tb, b []byte) *fsm.Member {
	t.Helper()
	br := snapshotReaders.Get().(*bufio.Reader)
	defer snapshotReaders.Put(br)
	br.Reset(bytes.NewReader(b))
	m, err := fsm.RestoreMember(br)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	return m
}

// canonical re-encodes a member snapshot stream deterministically (message
// properties are a map, which protobuf writes in map order otherwise). With
// keepApplied false the applied index is zeroed, so that the state of a
// member can be compared before and after an entry that changed nothing
// but the applied index.
func canonical(t tb, b []byte, keepApplied bool) []byte {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(b))
	det := protodelim.MarshalOptions{MarshalOptions: proto.MarshalOptions{Deterministic: true}}
	var out bytes.Buffer
	var h fsmpb.MemberSnapshot
	if err := protodelim.UnmarshalFrom(r, &h); err != nil {
		t.Fatalf("snapshot header: %v", err)
	}
	if !keepApplied {
		h.Applied = 0
	}
	if _, err := det.MarshalTo(&out, &h); err != nil {
		t.Fatalf("marshal: %v", err)
	}
	for {
		var sm fsmpb.StoredMessage
		err := protodelim.UnmarshalFrom(r, &sm)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("snapshot message: %v", err)
		}
		if _, err := det.MarshalTo(&out, &sm); err != nil {
			t.Fatalf("marshal: %v", err)
		}
	}
	return out.Bytes()
}

// state is the member's whole replicated state except the applied index,
// in a canonical encoding: equal states give equal bytes.
func state(t tb, m *fsm.Member) []byte {
	t.Helper()
	return canonical(t, snapshotBytes(t, m), false)
}

// fullState is state including the applied index.
func fullState(t tb, m *fsm.Member) []byte {
	t.Helper()
	return canonical(t, snapshotBytes(t, m), true)
}

// sameState fails if the member's state is not before.
func sameState(t tb, m *fsm.Member, before []byte, what string) {
	t.Helper()
	if after := state(t, m); !bytes.Equal(before, after) {
		t.Errorf("%s changed the state", what)
	}
}

// checkCounts checks that the counts of Stats agree with what the query
// methods list: pending with a ScanPending walk, delivered with the
// sessions' deliveries, and every listed id with Lookup.
func checkCounts(t tb, m *fsm.Member) {
	t.Helper()
	st := m.Stats()
	pend := allPending(m)
	if st.Pending != len(pend) {
		t.Errorf("Stats().Pending = %d, ScanPending lists %d", st.Pending, len(pend))
	}
	seen := make(map[string]bool, len(pend))
	for _, id := range pend {
		if seen[id] {
			t.Errorf("ScanPending lists %s twice", id)
		}
		seen[id] = true
		ms, ok := m.Lookup(id)
		if !ok || !ms.Pending || ms.Session != "" || ms.DeliveryID != 0 {
			t.Errorf("ScanPending lists %s, Lookup says %+v (found %v)", id, ms, ok)
		}
	}
	sessions := m.Sessions()
	delivered := 0
	for i, s := range sessions {
		delivered += s.Deliveries
		if !m.HasSession(s.ID) {
			t.Errorf("Sessions lists %s, HasSession says no", s.ID)
		}
		if i > 0 && sessions[i-1].ID >= s.ID {
			t.Errorf("Sessions not sorted by id: %s before %s", sessions[i-1].ID, s.ID)
		}
	}
	if st.Delivered != delivered {
		t.Errorf("Stats().Delivered = %d, sessions hold %d deliveries", st.Delivered, delivered)
	}
	if st.Sessions != len(sessions) {
		t.Errorf("Stats().Sessions = %d, Sessions lists %d", st.Sessions, len(sessions))
	}
	// Aside (dead or moving) with AsideMessages, which lists them by sequence.
	aside := m.AsideMessages(math.MaxInt)
	if st.Moving != len(aside) {
		t.Errorf("Stats().Moving = %d, AsideMessages lists %d", st.Moving, len(aside))
	}
	for i, a := range aside {
		if i > 0 && aside[i-1].Seq >= a.Seq {
			t.Errorf("AsideMessages not by sequence: %d before %d", aside[i-1].Seq, a.Seq)
		}
		ms, ok := m.Lookup(a.Message.GetId())
		if !ok || ms.Pending || ms.Session != "" || ms.AvailableAt != 0 || !(a.Dead || a.Target != "") ||
			ms.Dead != a.Dead || ms.MovingTo != a.Target || ms.Redelivered != a.Redelivered || ms.DeliveryCount != a.DeliveryCount {
			t.Errorf("AsideMessages lists %+v, Lookup says %+v (found %v)", a, ms, ok)
		}
	}
	// Delayed: NextWake is set exactly when something is delayed.
	if next := m.NextWake(); (st.Delayed == 0) != (next == 0) {
		t.Errorf("Stats().Delayed = %d, NextWake = %d", st.Delayed, next)
	}
}

// mustErr fails unless err wraps want.
func mustErr(t tb, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want one wrapping %v", what, err, want)
	}
}
