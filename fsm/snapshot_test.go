package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// richMember builds a member with something of everything: settings,
// sessions of several owners, pending messages of several priorities,
// deliveries, redeliveries, acks, expirations, properties and dedup ids
// (some already forgotten).
func richMember(t tb) *member {
	t.Helper()
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{MaxBytes: 1 << 20, DedupWindowNs: 1000, DedupMaxIds: 5}})
	f.ok(&fsmpb.OpenSession{Session: "s1", Owner: "fe-1"})
	f.ok(&fsmpb.OpenSession{Session: "s2", Owner: "fe-2"})
	f.ok(&fsmpb.OpenSession{Session: "idle", Owner: "fe-2"})
	for i := range 12 {
		f.enqueue(int64(100*i), msg(fmt.Sprintf("m%02d", i),
			prio(uint32(i*7%10)),
			dedup(fmt.Sprintf("d%02d", i)),
			props("k", fmt.Sprint(i)),
		))
	}
	f.enqueue(1200, msg("exp1", expires(5000)), msg("exp2", expires(3000), prio(9)), msg("plain", body("")))
	d1 := f.held("s1", "m00", "m01", "m02", "exp1")
	f.held("s2", "m03", "exp2")
	f.ok(&fsmpb.Ack{Session: "s1", DeliveryIds: []uint64{d1[1]}})
	f.ok(&fsmpb.Return{Session: "s1", DeliveryIds: []uint64{d1[2]}})
	f.held("s2", "m02") // redelivered, count 2
	f.ok(&fsmpb.Recover{Session: "s1"})
	f.held("s1", "m00") // redelivered, count 2
	return f
}

// observe lists what the query methods say of a member, for comparison.
func observe(m *fsm.Member, ids []string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "applied %d\nstats %+v\nsettings %v\n", m.Applied(), m.Stats(), m.Settings())
	fmt.Fprintf(&b, "sessions %+v\n", m.Sessions())
	fmt.Fprintf(&b, "pending %v\npending at 4000 %v\n", allPending(m), pendingIDs(m, 4000))
	fmt.Fprintf(&b, "expired %v next %d\n", m.ExpiredBy(1<<62, 100), m.NextExpiration())
	fmt.Fprintf(&b, "next wake %d\n", m.NextWake())
	for _, a := range m.AsideMessages(100) {
		fmt.Fprintf(&b, "aside %s seq=%d dead=%v target=%q redelivered=%v count=%d\n",
			a.Message.GetId(), a.Seq, a.Dead, a.Target, a.Redelivered, a.DeliveryCount)
	}
	for _, id := range ids {
		st, ok := m.Lookup(id)
		fmt.Fprintf(&b, "%s %v pending=%v session=%q delivery=%d redelivered=%v count=%d available=%d dead=%v moving=%q msg=%v\n",
			id, ok, st.Pending, st.Session, st.DeliveryID, st.Redelivered, st.DeliveryCount, st.AvailableAt, st.Dead, st.MovingTo, st.Message)
	}
	return b.String()
}

func knownIDs() []string {
	ids := []string{"exp1", "exp2", "plain", "new1", "new2"}
	for i := range 14 {
		ids = append(ids, fmt.Sprintf("m%02d", i))
	}
	return ids
}

func TestSnapshot_RestoreGivesIdenticalState(t *testing.T) {
	f := richMember(t)
	first := snapshotBytes(t, f.m)
	r := restore(t, first)
	if second := snapshotBytes(t, r); !bytes.Equal(first, second) {
		t.Fatalf("snapshot of the restored member differs:\n%x\n%x", first, second)
	}
	if a, b := observe(f.m, knownIDs()), observe(r, knownIDs()); a != b {
		t.Fatalf("restored member looks different:\n%s\n---\n%s", a, b)
	}
	checkCounts(t, r)

	// Both behave the same from here: same results, same delivery ids, same
	// dedup decisions, same watermark, same state.
	g := &member{t: t, m: r, idx: f.idx}
	script := []proto.Message{
		&fsmpb.Enqueue{Now: 1250, Messages: []*fsmpb.Message{
			msg("new1", dedup("d11")), // remembered: a duplicate of m11
			msg("new2", dedup("d01")), // forgotten by count
			msg("m12", dedup("d12")),
		}},
		&fsmpb.Deliver{Session: "s2", Now: 4000, MessageIds: allPending(f.m)},
		&fsmpb.Ack{Session: "s2", UpTo: 9},
		&fsmpb.Ack{Session: "s1", DeliveryIds: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		&fsmpb.Recover{Session: "s2"},
		&fsmpb.Release{Session: "s1"},
		&fsmpb.Deliver{Session: "idle", Now: 4000, MessageIds: []string{"m00", "m02", "m03", "exp1", "exp2"}},
		&fsmpb.Return{Session: "idle", DeliveryIds: []uint64{20, 21, 22, 23, 24, 25}},
		&fsmpb.Expire{Now: 4000, MessageIds: []string{"exp1", "exp2"}},
		&fsmpb.Enqueue{Now: 2200, Messages: []*fsmpb.Message{msg("m13", dedup("d11"))}}, // d11 (at 1100) forgotten by time
		&fsmpb.Purge{},
	}
	for i, c := range script {
		ra, rb := f.do(c), g.do(c)
		if fmt.Sprintf("%+v", ra) != fmt.Sprintf("%+v", rb) {
			t.Fatalf("step %d (%T): original %+v, restored %+v", i, c, ra, rb)
		}
		if !bytes.Equal(fullState(t, f.m), fullState(t, g.m)) {
			t.Fatalf("step %d (%T): states differ", i, c)
		}
	}
	if a, b := observe(f.m, knownIDs()), observe(r, knownIDs()); a != b {
		t.Fatalf("after the script:\n%s\n---\n%s", a, b)
	}
}

func TestSnapshot_RoundTripKeepsEveryMessageState(t *testing.T) {
	// A message in every state (pending, redelivered, delivered, delayed,
	// dead, moving, dead and moving), and one dead-lettered already.
	f := everyState(t)
	dl := msg("dl")
	dl.DeliveryCount, dl.Redelivered = 1, true
	f.enqueue(210, dl)
	f.ok(&fsmpb.Return{Session: "s", Now: 210, DeliveryIds: f.held("s", "dl")})
	f.ok(&fsmpb.Move{Target: dlqTarget, MessageIds: []string{"dl"}})
	f.ok(&fsmpb.Moved{MessageIds: []string{"dl"}})
	ids := append(slices.Clone(everyID), "dl")
	if st := f.m.Stats(); st.DeadLettered != 1 || st.Delayed != 1 || st.Moving != 3 {
		t.Fatalf("Stats = %+v", st)
	}

	first := snapshotBytes(t, f.m)
	r := restore(t, first)
	if second := snapshotBytes(t, r); !bytes.Equal(first, second) {
		t.Fatalf("snapshot of the restored member differs:\n%x\n%x", first, second)
	}
	if !bytes.Equal(canonical(t, first, true), fullState(t, r)) {
		t.Fatal("restored state differs")
	}
	if a, b := observe(f.m, ids), observe(r, ids); a != b {
		t.Fatalf("restored member looks different:\n%s\n---\n%s", a, b)
	}
	g := &member{t: t, m: r, idx: f.idx}
	for _, id := range everyID {
		if got, want := g.stateOf(id), wantState(id); got != want {
			t.Errorf("restored %s = %+v, want %+v", id, got, want)
		}
	}
	checkCounts(t, r)

	// Both behave the same from here, through every state change.
	script := []proto.Message{
		&fsmpb.Deliver{Session: "s", Now: 250, MessageIds: ids},
		&fsmpb.Wake{Now: delayedUntil - 1},
		&fsmpb.Wake{Now: delayedUntil},
		&fsmpb.Move{Target: "orders#2", MessageIds: ids},
		&fsmpb.Moved{MessageIds: []string{idDeadMoving, idPending}},
		&fsmpb.Deliver{Session: "s", Now: 310, MessageIds: ids},
		&fsmpb.Recover{Session: "s", Now: 320},
		&fsmpb.Wake{Now: 2000},
		&fsmpb.Enqueue{Now: 330, Messages: []*fsmpb.Message{msg("late")}},
		&fsmpb.Deliver{Session: "s", Now: 340, MessageIds: append(ids, "late")},
		&fsmpb.Release{Session: "s", Now: 350},
		&fsmpb.Purge{},
		&fsmpb.Moved{MessageIds: ids},
		&fsmpb.Expire{Now: everyExpiry, MessageIds: ids},
	}
	for i, c := range script {
		ra, rb := f.do(c), g.do(c)
		if fmt.Sprintf("%+v", ra) != fmt.Sprintf("%+v", rb) {
			t.Fatalf("step %d (%T): original %+v, restored %+v", i, c, ra, rb)
		}
		if !bytes.Equal(fullState(t, f.m), fullState(t, g.m)) {
			t.Fatalf("step %d (%T): states differ", i, c)
		}
		if a, b := observe(f.m, ids), observe(g.m, ids); a != b {
			t.Fatalf("step %d (%T):\n%s\n---\n%s", i, c, a, b)
		}
	}
	// dl, deadmoving, and dead (moved to orders#2); the two that died
	// after the restore were never moved, and expired.
	if st := g.m.Stats(); st != (fsm.Stats{DeadLettered: 3}) {
		t.Fatalf("at the end Stats = %+v", st)
	}
}

func TestSnapshot_RestoreOfAStreamWithEveryStateByHand(t *testing.T) {
	// The stream fields, written by hand: what a snapshot of another build
	// holds is read as documented.
	data := writeStream(t,
		&fsmpb.MemberSnapshot{NextSeq: 6, NextDeliveryId: 9, MessageCount: 5, DeadLettered: 4, Settings: redeliverySettings(),
			Sessions: []*fsmpb.StoredSession{{Id: "s", Owner: owner}}},
		&fsmpb.StoredMessage{Message: msg("p"), Seq: 1},
		&fsmpb.StoredMessage{Message: msg("d"), Seq: 2, DeliveryId: 8, Session: "s", DeliveryCount: 2, Redelivered: true},
		&fsmpb.StoredMessage{Message: msg("w"), Seq: 3, AvailableAt: 70, DeliveryCount: 1, Redelivered: true},
		&fsmpb.StoredMessage{Message: msg("x"), Seq: 4, Dead: true, DeliveryCount: 3, Redelivered: true},
		&fsmpb.StoredMessage{Message: msg("y"), Seq: 5, Dead: true, MovingTo: "q.DLQ#0", DeliveryCount: 3, Redelivered: true},
	)
	f := &member{t: t, m: restore(t, data)}
	want := map[string]fsm.MessageState{
		"p": {Pending: true},
		"d": {Session: "s", DeliveryID: 8, DeliveryCount: 2, Redelivered: true},
		"w": {AvailableAt: 70, DeliveryCount: 1, Redelivered: true},
		"x": {Dead: true, DeliveryCount: 3, Redelivered: true},
		"y": {Dead: true, MovingTo: "q.DLQ#0", DeliveryCount: 3, Redelivered: true},
	}
	for id, w := range want {
		if got := f.stateOf(id); got != w {
			t.Errorf("%s = %+v, want %+v", id, got, w)
		}
	}
	if st := f.m.Stats(); st != (fsm.Stats{Pending: 1, Delivered: 1, Delayed: 1, Moving: 2, DeadLettered: 4, Bytes: 5 * 6, Sessions: 1}) {
		t.Fatalf("Stats = %+v", st)
	}
	if f.m.NextWake() != 70 {
		t.Fatalf("NextWake = %d", f.m.NextWake())
	}
	checkCounts(t, f.m)
	if !bytes.Equal(snapshotBytes(t, f.m), data) {
		t.Fatal("the snapshot of the restored member is not the stream it was restored from")
	}
}

func TestSnapshot_EmptyMemberRoundTrips(t *testing.T) {
	m := fsm.NewMember()
	b := snapshotBytes(t, m)
	r := restore(t, b)
	if !bytes.Equal(b, snapshotBytes(t, r)) || r.Applied() != 0 || r.Stats() != (fsm.Stats{}) {
		t.Fatalf("restored empty member: applied %d stats %+v", r.Applied(), r.Stats())
	}
	if !proto.Equal(r.Settings(), fsm.DefaultSettings()) {
		t.Fatalf("Settings = %v", r.Settings())
	}
	// Delivery ids and sequence numbers start where a new member's do.
	f := &member{t: t, m: r}
	f.open("s")
	f.enqueue(0, msg("a"))
	if ds := f.deliver("s", 0, "a"); ds[0].DeliveryID != 1 {
		t.Fatalf("first delivery id = %d", ds[0].DeliveryID)
	}
}

func TestSnapshot_DedupHoldsAcrossRestore(t *testing.T) {
	f := newMember(t)
	f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{DedupWindowNs: 100, DedupMaxIds: 3}})
	f.enqueue(1000, msg("a", dedup("A")))
	f.enqueue(1010, msg("b", dedup("B")))
	f.enqueue(1020, msg("c", dedup("C")))
	f.open("s")
	f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: f.held("s", "a")})
	g := &member{t: t, m: restore(t, snapshotBytes(t, f.m)), idx: f.idx}
	if st := g.m.Stats(); st.DedupIDs != 3 {
		t.Fatalf("restored DedupIDs = %d", st.DedupIDs)
	}
	// Within the window: duplicates, even of the acked message.
	for _, x := range []*member{f, g} {
		got := x.enqueue(1050, msg("a2", dedup("A")), msg("c2", dedup("C")))
		if want := []fsm.Enqueued{{ID: "a", Duplicate: true}, {ID: "c", Duplicate: true}}; !slices.Equal(got, want) {
			t.Fatalf("after restore = %+v, want %+v", got, want)
		}
	}
	// A new id pushes out the oldest (A) by count; B is then forgotten by time.
	for _, x := range []*member{f, g} {
		x.enqueue(1060, msg("d", dedup("D")))
		got := x.enqueue(1110, msg("a3", dedup("A")), msg("b3", dedup("B")), msg("c3", dedup("C")))
		want := []fsm.Enqueued{{ID: "a3"}, {ID: "b3"}, {ID: "c", Duplicate: true}}
		if !slices.Equal(got, want) {
			t.Fatalf("forgetting = %+v, want %+v", got, want)
		}
	}
	if !bytes.Equal(fullState(t, f.m), fullState(t, g.m)) {
		t.Fatal("states differ")
	}
}

func TestSnapshot_CaptureIsAPointInTimeWhileAppliesGoOn(t *testing.T) {
	f := richMember(t)
	want := fullState(t, f.m)
	img := f.m.Capture()
	var (
		wg  sync.WaitGroup
		buf bytes.Buffer
		err error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err = img.WriteTo(&buf)
	}()
	// Applies go on while the image is written.
	for i := range 50 {
		f.ok(&fsmpb.Enqueue{Now: int64(2000 + i), Messages: []*fsmpb.Message{msg(fmt.Sprintf("late%d", i), dedup(fmt.Sprint("late", i)))}})
		f.ok(&fsmpb.Deliver{Session: "s2", Now: 2000, MessageIds: allPending(f.m)[:1]})
		f.ok(&fsmpb.Recover{Session: "s2"})
		f.ok(&fsmpb.Configure{Settings: &fsmpb.MemberSettings{DedupWindowNs: int64(i + 1), DedupMaxIds: uint32(i + 1)}})
	}
	f.ok(&fsmpb.Ack{Session: "s1", UpTo: 1 << 40})
	f.ok(&fsmpb.Expire{Now: 1 << 62, MessageIds: []string{"exp1", "exp2"}})
	f.ok(&fsmpb.Release{Session: "s1"})
	f.ok(&fsmpb.Purge{})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got := canonical(t, buf.Bytes(), true); !bytes.Equal(got, want) {
		t.Fatal("the image written while applies went on is not the state at Capture")
	}
	checkCounts(t, restore(t, buf.Bytes()))
}

func TestSnapshot_BytesAreDeterministic(t *testing.T) {
	f := newMember(t)
	f.enqueue(0, msg("a", props("k1", "v1", "k2", "v2", "k3", "v3", "k4", "v4", "k5", "v5", "k6", "v6")))
	first := snapshotBytes(t, f.m)
	for range 50 {
		if again := snapshotBytes(t, f.m); !bytes.Equal(first, again) {
			t.Fatal("two snapshots of one state differ")
		}
		if again := snapshotBytes(t, restore(t, first)); !bytes.Equal(first, again) {
			t.Fatal("the snapshot of a restored state differs")
		}
	}
}

func TestSnapshot_TruncatedStreamIsCorrupt(t *testing.T) {
	full := snapshotBytes(t, richMember(t).m)
	for n := range len(full) {
		m, err := fsm.RestoreMember(bytes.NewReader(full[:n]))
		if !errors.Is(err, fsm.ErrCorrupt) || m != nil {
			t.Fatalf("restore of the first %d of %d bytes = %v, %v; want ErrCorrupt", n, len(full), m, err)
		}
	}
}

// writeStream writes a member snapshot stream by hand.
func writeStream(t *testing.T, h *fsmpb.MemberSnapshot, msgs ...*fsmpb.StoredMessage) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := protodelim.MarshalTo(&buf, h); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := protodelim.MarshalTo(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestSnapshot_RestoreRejectsInconsistentStream(t *testing.T) {
	sessions := []*fsmpb.StoredSession{{Id: "s", Owner: owner}}
	cases := map[string][]byte{
		"delivered to a session not in the snapshot": writeStream(t,
			&fsmpb.MemberSnapshot{NextSeq: 2, NextDeliveryId: 2, MessageCount: 1, Sessions: sessions},
			&fsmpb.StoredMessage{Message: msg("a"), Seq: 1, DeliveryId: 1, Session: "ghost", DeliveryCount: 1}),
		"invalid priority": writeStream(t,
			&fsmpb.MemberSnapshot{NextSeq: 2, MessageCount: 1},
			&fsmpb.StoredMessage{Message: msg("a", prio(10)), Seq: 1}),
		"missing message": writeStream(t,
			&fsmpb.MemberSnapshot{NextSeq: 2, MessageCount: 1},
			&fsmpb.StoredMessage{Seq: 1}),
		"one id twice": writeStream(t,
			&fsmpb.MemberSnapshot{NextSeq: 3, MessageCount: 2},
			&fsmpb.StoredMessage{Message: msg("a"), Seq: 1}, &fsmpb.StoredMessage{Message: msg("a"), Seq: 2}),
		"fewer messages than counted": writeStream(t,
			&fsmpb.MemberSnapshot{NextSeq: 2, MessageCount: 2},
			&fsmpb.StoredMessage{Message: msg("a"), Seq: 1}),
		"garbage":      []byte("\x05\xff\xff\xff\xff\xff"),
		"huge record":  {0xff, 0xff, 0xff, 0xff, 0x0f},
		"empty stream": {},
	}
	for name, data := range cases {
		if m, err := fsm.RestoreMember(bytes.NewReader(data)); !errors.Is(err, fsm.ErrCorrupt) || m != nil {
			t.Errorf("%s: RestoreMember = %v, %v; want ErrCorrupt", name, m, err)
		}
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, io.ErrClosedPipe
	}
	n := min(len(p), w.after)
	w.after -= n
	if n < len(p) {
		return n, io.ErrClosedPipe
	}
	return n, nil
}

func TestSnapshot_WriteToReportsWriterErrors(t *testing.T) {
	f := richMember(t)
	for _, after := range []int{0, 10} {
		if _, err := f.m.Capture().WriteTo(&failingWriter{after: after}); err == nil {
			t.Errorf("WriteTo a writer failing after %d bytes returned no error", after)
		}
	}
	if err := newMetaWithState(t).WriteSnapshot(&failingWriter{}); err == nil {
		t.Error("WriteSnapshot to a failing writer returned no error")
	}
}

// ---- Meta ----

func newMetaWithState(t *testing.T) *fsm.Meta {
	t.Helper()
	f := newMeta(t)
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2", ClientAddr: "127.0.0.1:2"}})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1", ClientAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:3"}})
	f.ok(&fsmpb.CreateDestination{Destination: dest("orders", 3, 3)})
	topic := dest("events", 2, 1)
	topic.Kind, topic.TtlNs = fsmpb.DestinationKind_DESTINATION_KIND_TOPIC, 5e9
	for _, p := range topic.Members {
		p.Group = fmt.Sprint("events-", p.Index)
	}
	f.ok(&fsmpb.CreateDestination{Destination: topic})
	f.ok(&fsmpb.CreateDestination{Destination: dest("gone", 1, 1)})
	f.ok(&fsmpb.DeleteDestination{Name: "gone"})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2", Incarnation: "a"}})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n2", Incarnation: "b"}}) // came back empty
	f.ok(&fsmpb.ClaimClientId{Claim: &fsmpb.ClientIdClaim{ClientId: "billing", Owner: "n1/b1/c1", Instance: "i1"}})
	f.ok(&fsmpb.ClaimClientId{Claim: &fsmpb.ClientIdClaim{ClientId: "audit", Owner: "n2/b2/c7"}})
	return f.m
}

func TestMetaSnapshot_RestoreGivesIdenticalState(t *testing.T) {
	m := newMetaWithState(t)
	first := metaState(t, m)
	r, err := fsm.RestoreMeta(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	if second := metaState(t, r); !bytes.Equal(first, second) {
		t.Fatal("snapshot of the restored meta differs")
	}
	if r.Applied() != m.Applied() || !proto.Equal(r.Snapshot(), m.Snapshot()) {
		t.Fatalf("restored meta = %v, want %v", r.Snapshot(), m.Snapshot())
	}
	for _, name := range []string{"orders", "events", "gone"} {
		a, aok := m.Destination(name)
		b, bok := r.Destination(name)
		if aok != bok || !proto.Equal(a, b) {
			t.Errorf("Destination(%s): %v %v vs %v %v", name, a, aok, b, bok)
		}
	}
	// The same entries give the same results on both.
	next := m.Applied() + 1
	for _, data := range [][]byte{
		entry(t, &fsmpb.CreateDestination{Destination: dest("orders", 1, 1)}),
		entry(t, &fsmpb.CreateDestination{Destination: dest("gone", 1, 1)}),
		entry(t, &fsmpb.DeleteDestination{Name: "events"}),
	} {
		ra, ea := m.Apply(next, data)
		rb, eb := r.Apply(next, data)
		if fmt.Sprint(ra, ea) != fmt.Sprint(rb, eb) {
			t.Fatalf("index %d: %v %v vs %v %v", next, ra, ea, rb, eb)
		}
		next++
	}
	if !bytes.Equal(metaState(t, m), metaState(t, r)) {
		t.Fatal("states differ after the same entries")
	}
	// An old index is skipped on the restored one too.
	if rs, err := r.Apply(1, entry(t, &fsmpb.DeleteDestination{Name: "orders"})); rs != nil || err != nil {
		t.Fatalf("old index: %v %v", rs, err)
	}
}

func TestMetaSnapshot_GarbageIsCorrupt(t *testing.T) {
	for _, data := range [][]byte{{0xff}, []byte("\x12\x05ab"), {0x0a, 0x80}} {
		if m, err := fsm.RestoreMeta(bytes.NewReader(data)); !errors.Is(err, fsm.ErrCorrupt) || m != nil {
			t.Errorf("RestoreMeta(%x) = %v, %v; want ErrCorrupt", data, m, err)
		}
	}
}

func TestMetaSnapshot_TruncatedStreamIsCorrupt(t *testing.T) {
	full := metaState(t, newMetaWithState(t))
	for n := range len(full) {
		m, err := fsm.RestoreMeta(bytes.NewReader(full[:n]))
		if !errors.Is(err, fsm.ErrCorrupt) {
			t.Errorf("restore of the first %d of %d bytes = %v, %v; want ErrCorrupt", n, len(full), m.Snapshot(), err)
		}
	}
}
