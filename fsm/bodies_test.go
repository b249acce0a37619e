package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// WithBody copies every field of a message but its body: a field added to
// Message and forgotten there would be lost by every body put away.
func TestWithBody_CopiesEveryOtherField(t *testing.T) {
	src := &fsmpb.Message{}
	r := src.ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v := &fsmpb.PropertyValue{Value: &fsmpb.PropertyValue_Int{Int: 5}}
			r.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfMessage(v.ProtoReflect()))
		case fd.IsMap():
			r.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case fd.Kind() == protoreflect.StringKind:
			r.Set(fd, protoreflect.ValueOfString("s-"+string(fd.Name())))
		case fd.Kind() == protoreflect.BytesKind:
			r.Set(fd, protoreflect.ValueOfBytes([]byte("old")))
		case fd.Kind() == protoreflect.BoolKind:
			r.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.Uint32Kind:
			r.Set(fd, protoreflect.ValueOfUint32(uint32(7+i)))
		case fd.Kind() == protoreflect.Int64Kind:
			r.Set(fd, protoreflect.ValueOfInt64(int64(11+i)))
		default:
			t.Fatalf("field %s of kind %v: teach this test to set it", fd.Name(), fd.Kind())
		}
	}
	got := fsm.WithBody(src, []byte("new"))
	want := proto.Clone(src).(*fsmpb.Message)
	want.Body = []byte("new")
	if !proto.Equal(got, want) {
		t.Fatalf("WithBody = %v, want %v", got, want)
	}
	if string(src.Body) != "old" {
		t.Fatal("WithBody changed the message it copied")
	}
}

// bodyShelf stands in for the member's body store.
type bodyShelf struct {
	t      *testing.T
	next   uint64
	bodies map[uint64][]byte
}

func newBodyShelf(t *testing.T) *bodyShelf {
	return &bodyShelf{t: t, next: 1, bodies: map[uint64][]byte{}}
}

func (s *bodyShelf) put(bodies [][]byte) ([]fsm.BodyRef, error) {
	refs := make([]fsm.BodyRef, len(bodies))
	for i, b := range bodies {
		refs[i] = fsm.BodyRef{At: s.next, Len: uint32(len(b))}
		s.bodies[s.next] = bytes.Clone(b)
		s.next++
	}
	return refs, nil
}

func (s *bodyShelf) read(ref fsm.BodyRef, buf []byte) ([]byte, error) {
	b, ok := s.bodies[ref.At]
	if !ok {
		return buf, fmt.Errorf("no body at %d", ref.At)
	}
	if len(b) != int(ref.Len) {
		s.t.Fatalf("body at %d has %d bytes, its place says %d", ref.At, len(b), ref.Len)
	}
	return append(buf, b...), nil
}

func (s *bodyShelf) drop(refs []fsm.BodyRef) {
	for _, ref := range refs {
		if _, ok := s.bodies[ref.At]; !ok {
			s.t.Fatalf("body at %d dropped twice, or never put", ref.At)
		}
		delete(s.bodies, ref.At)
	}
}

// whole gives a delivery its body back from the shelf.
func (s *bodyShelf) whole(d fsm.Delivery) *fsmpb.Message {
	if !d.Body.Away() {
		return d.Message
	}
	if len(d.Message.Body) != 0 {
		s.t.Fatalf("delivery of %s has a body and a place", d.Message.Id)
	}
	b, err := s.read(d.Body, nil)
	if err != nil {
		s.t.Fatalf("delivery of %s: %v", d.Message.Id, err)
	}
	return fsm.WithBody(d.Message, b)
}

func TestMember_PutBodiesAwayTakesTheNewestWaiting(t *testing.T) {
	f := newMember(t)
	f.m.TrackBodies()
	f.open("s")
	var batch []*fsmpb.Message
	for i := range 10 {
		batch = append(batch, msg(fmt.Sprintf("m%d", i), body(string(bytes.Repeat([]byte{'a' + byte(i)}, 100)))))
	}
	// m0 is delivered in the same entry: not waiting, so it stays.
	f.apply(&fsmpb.Enqueue{Now: 1, Messages: batch}, &fsmpb.Deliver{Session: "s", Now: 1, MessageIds: []string{"m0", "m9"}})
	if got := f.m.HeldBodyBytes(); got != 1000 {
		t.Fatalf("held %d bytes of bodies, want 1000", got)
	}
	bytesBefore := f.m.Stats().Bytes
	shelf := newBodyShelf(t)
	var put []string
	err := f.m.PutBodiesAway(350, func(bodies [][]byte) ([]fsm.BodyRef, error) {
		for _, b := range bodies {
			put = append(put, fmt.Sprintf("m%d", b[0]-'a'))
		}
		return shelf.put(bodies)
	})
	if err != nil {
		t.Fatal(err)
	}
	// m9 is delivered; from m8 back, 7 of 100 bytes bring 1000 to 300.
	if want := []string{"m2", "m3", "m4", "m5", "m6", "m7", "m8"}; fmt.Sprint(put) != fmt.Sprint(want) {
		t.Fatalf("put away %v, want %v, oldest first", put, want)
	}
	if got := f.m.HeldBodyBytes(); got != 300 {
		t.Fatalf("held %d bytes after putting away, want 300", got)
	}
	if got := f.m.Stats().Bytes; got != bytesBefore {
		t.Fatalf("the member counts %d bytes after putting bodies away, %d before", got, bytesBefore)
	}
	// Nothing stored since: nothing more is put away, whatever the limit.
	if err := f.m.PutBodiesAway(0, func([][]byte) ([]fsm.BodyRef, error) {
		t.Fatal("put called with nothing new stored")
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, d := range f.deliver("s", 2, "m1", "m5") {
		if got, want := string(shelf.whole(d).Body), string(bytes.Repeat([]byte{d.Message.Id[1] - '0' + 'a'}, 100)); got != want {
			t.Errorf("delivery of %s has body %q, want %q", d.Message.Id, got, want)
		}
	}
	if st := f.lookup("m5"); !st.Body.Away() || len(st.Message.Body) != 0 {
		t.Fatalf("m5 after putting away: %+v", st)
	}
	// Acknowledging a message whose body is away hands its place back; one
	// whose body is held lowers what is held.
	acked := f.ok(&fsmpb.Ack{Session: "s", UpTo: 1 << 60})
	if acked.Acked != 4 {
		t.Fatalf("acked %d, want 4", acked.Acked)
	}
	shelf.drop(f.m.DroppedBodies())
	if len(shelf.bodies) != 6 {
		t.Fatalf("%d bodies left on the shelf, want 6", len(shelf.bodies))
	}
	if got := f.m.HeldBodyBytes(); got != 0 {
		t.Fatalf("held %d bytes after acks, want 0 (m0, m1 and m9 acked, the rest away)", got)
	}
	if d := f.m.DroppedBodies(); d != nil {
		t.Fatalf("dropped bodies returned twice: %v", d)
	}
}

// A member that puts bodies away behaves as one that keeps them: the same
// results, counts and snapshots, through every command, restores
// included; and it hands back the place of every body whose message left.
func TestMember_BodiesAwayChangeNothingReplicated(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { twinRun(t, seed) })
	}
}

func twinRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	keep, away := newMember(t), newMember(t)
	away.m.TrackBodies()
	shelf := newBodyShelf(t)
	now := int64(1000)
	var ids []string
	var deliveries []uint64
	sessions := []string{"s1", "s2"}
	keep.open(sessions...)
	away.open(sessions...)
	// Half the runs redeliver after a delay and take messages out after
	// three deliveries (dead, aside), as a member with those settings does;
	// half count memory.
	if seed%4 != 0 {
		st := &fsmpb.MemberSettings{CountMemory: seed%4 >= 2}
		if seed%2 == 1 {
			st.RedeliveryDelayNs, st.MaxDeliveries = 30, 3
		}
		keep.ok(&fsmpb.Configure{Settings: st})
		away.ok(&fsmpb.Configure{Settings: st})
	}
	pick := func() string { return ids[rng.IntN(len(ids))] }
	var txs int
	for step := range 400 {
		now += int64(rng.IntN(50))
		var c proto.Message
		switch k := rng.IntN(18); {
		case k < 4 || len(ids) == 0:
			var batch []*fsmpb.Message
			for range 1 + rng.IntN(5) {
				id := fmt.Sprintf("m%d", len(ids))
				ids = append(ids, id)
				m := msg(id, body(string(bytes.Repeat([]byte{byte(len(ids))}, rng.IntN(200)))), prio(uint32(rng.IntN(3))))
				if rng.IntN(5) == 0 {
					m.Expiration = now + int64(rng.IntN(400))
				}
				batch = append(batch, m)
			}
			c = &fsmpb.Enqueue{Now: now, Messages: batch}
		case k < 7:
			c = &fsmpb.Deliver{Session: sessions[rng.IntN(2)], Now: now, MessageIds: []string{pick(), pick(), pick()}}
		case k < 9 && len(deliveries) > 0:
			c = &fsmpb.Ack{Session: sessions[rng.IntN(2)], DeliveryIds: []uint64{deliveries[rng.IntN(len(deliveries))]}}
		case k == 9:
			c = &fsmpb.Recover{Session: sessions[rng.IntN(2)], Now: now}
		case k == 10:
			c = &fsmpb.Expire{Now: now, MessageIds: []string{pick(), pick()}}
		case k == 11:
			c = &fsmpb.Move{Target: "other#1", MessageIds: []string{pick()}}
			if rng.IntN(2) == 0 {
				c = &fsmpb.Moved{MessageIds: []string{pick()}}
			}
		case k == 12 && len(deliveries) > 0:
			c = &fsmpb.Return{Session: sessions[rng.IntN(2)], Now: now, DeliveryIds: []uint64{deliveries[rng.IntN(len(deliveries))]}}
		case k == 13:
			c = &fsmpb.Release{Session: sessions[rng.IntN(2)], Now: now}
		case k == 14:
			c = &fsmpb.Wake{Now: now}
		case k == 15 && rng.IntN(4) == 0:
			c = &fsmpb.Purge{}
		default:
			// A transaction that sends and commits or aborts at once.
			txs++
			id := fmt.Sprintf("t%d", len(ids))
			ids = append(ids, id)
			c = &fsmpb.TxPrepare{Tx: fmt.Sprint("tx", txs), Primary: "q#0", Session: sessions[0], Now: now, OnePhase: rng.IntN(2) == 0,
				Messages: []*fsmpb.Message{msg(id, body(string(bytes.Repeat([]byte{'t'}, 1+rng.IntN(100)))))}}
		}
		want, got := keep.do(c), away.do(c)
		switch c := c.(type) {
		case *fsmpb.Release:
			keep.open(c.Session)
			away.open(c.Session)
		case *fsmpb.TxPrepare:
			if want.Err != nil {
				t.Fatalf("step %d: prepare refused: %v", step, want.Err)
			}
			if !c.OnePhase {
				d := &fsmpb.TxDecide{Tx: c.Tx, Commit: rng.IntN(2) == 0, Now: now}
				if keep.do(d).Err != nil || away.do(d).Err != nil {
					t.Fatalf("step %d: decide refused", step)
				}
			}
		}
		for _, d := range want.Delivered {
			deliveries = append(deliveries, d.DeliveryID)
		}
		if errString(want.Err) != errString(got.Err) || want.Acked != got.Acked || want.Removed != got.Removed ||
			want.Returned != got.Returned || len(want.Delivered) != len(got.Delivered) {
			t.Fatalf("step %d %T: results differ: %+v and %+v", step, c, want, got)
		}
		for i, d := range want.Delivered {
			if !proto.Equal(d.Message, shelf.whole(got.Delivered[i])) {
				t.Fatalf("step %d: delivered %v, and with its body put away %v", step, d.Message, got.Delivered[i].Message)
			}
		}
		if err := away.m.PutBodiesAway(int64(rng.IntN(300)), shelf.put); err != nil {
			t.Fatal(err)
		}
		shelf.drop(away.m.DroppedBodies())
		if keep.m.Stats() != away.m.Stats() || keep.m.Counters() != away.m.Counters() || keep.m.StoredBytes() != away.m.StoredBytes() {
			t.Fatalf("step %d: stats %+v and %+v", step, keep.m.Stats(), away.m.Stats())
		}
		if step%50 == 49 {
			snap := snapshotWithShelf(t, away.m, shelf)
			if !bytes.Equal(snapshotBytes(t, keep.m), snap) {
				t.Fatalf("step %d: the snapshots differ", step)
			}
			// Restored with every body put away again.
			restored, err := restoreOntoShelf(snap, shelf)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := restored.StoredBytes(), away.m.StoredBytes(); got != want {
				t.Fatalf("step %d: restored, the messages take %d bytes; counted as they came and went, %d", step, got, want)
			}
			shelf.drop(allAway(t, away.m, ids))
			away.m = restored
			away.m.TrackBodies()
			if !bytes.Equal(snapshotWithShelf(t, away.m, shelf), snap) {
				t.Fatalf("step %d: restored with bodies away, the state writes another snapshot", step)
			}
		}
	}
	if n := len(allAway(t, away.m, ids)); n != len(shelf.bodies) {
		t.Fatalf("%d bodies on the shelf, %d messages with a body away: a place was not handed back", len(shelf.bodies), n)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func snapshotWithShelf(t *testing.T, m *fsm.Member, shelf *bodyShelf) []byte {
	t.Helper()
	img := m.Capture()
	img.SetBodyReader(shelf.read)
	var buf bytes.Buffer
	if _, err := img.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func restoreOntoShelf(snap []byte, shelf *bodyShelf) (*fsm.Member, error) {
	s, err := fsm.OpenMemberSnapshot(bytes.NewReader(snap))
	if err != nil {
		return nil, err
	}
	var rec []byte
	return s.Restore(func() (*fsmpb.StoredMessage, fsm.BodyRef, error) {
		if rec, err = s.NextRecord(rec[:0]); err != nil {
			return nil, fsm.BodyRef{}, err
		}
		sm, err := fsm.DecodeStoredMessage(rec)
		if err != nil || len(sm.Message.Body) == 0 {
			return sm, fsm.BodyRef{}, err
		}
		refs, _ := shelf.put([][]byte{sm.Message.Body})
		sm.Message.Body = nil
		return sm, refs[0], nil
	})
}

// allAway lists the places of the bodies a member put away.
func allAway(t *testing.T, m *fsm.Member, ids []string) []fsm.BodyRef {
	t.Helper()
	var out []fsm.BodyRef
	for _, id := range ids {
		if st, ok := m.Lookup(id); ok && st.Body.Away() {
			out = append(out, st.Body)
		}
	}
	return out
}

// A snapshot of a state with bodies put away and no way to read them is an
// error, never a snapshot without the bodies.
func TestMemberImage_BodiesAwayNeedAReader(t *testing.T) {
	f := newMember(t)
	f.m.TrackBodies()
	f.enqueue(1, msg("a"), msg("b"))
	shelf := newBodyShelf(t)
	if err := f.m.PutBodiesAway(0, shelf.put); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Capture().WriteTo(io.Discard); err == nil {
		t.Fatal("a snapshot was written without the bodies put away")
	}
}

// A message that comes to wait again with its body held (delivered in the
// entry that stored it, then recovered) is put away like a new one, once,
// though it came to wait twice since the last call.
func TestMember_PutBodiesAwayTakesMessagesBackFromSessions(t *testing.T) {
	f := newMember(t)
	f.m.TrackBodies()
	f.open("s")
	shelf := newBodyShelf(t)
	f.apply(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("a")}}, &fsmpb.Deliver{Session: "s", Now: 1, MessageIds: []string{"a"}})
	if err := f.m.PutBodiesAway(0, shelf.put); err != nil {
		t.Fatal(err)
	}
	if len(shelf.bodies) != 0 {
		t.Fatal("a delivered message's body was put away")
	}
	f.ok(&fsmpb.Recover{Session: "s", Now: 2})
	f.deliver("s", 3, "a")
	f.ok(&fsmpb.Recover{Session: "s", Now: 4})
	if err := f.m.PutBodiesAway(0, shelf.put); err != nil {
		t.Fatal(err)
	}
	if len(shelf.bodies) != 1 || f.m.HeldBodyBytes() != 0 || !f.lookup("a").Body.Away() {
		t.Fatalf("after a recover: %d bodies put away, %d bytes held; want the one body away", len(shelf.bodies), f.m.HeldBodyBytes())
	}
}

// When put fails, the bodies stay held and the next call tries them again.
func TestMember_PutBodiesAwayTriesAgainAfterAFailure(t *testing.T) {
	f := newMember(t)
	f.m.TrackBodies()
	f.enqueue(1, msg("a"), msg("b"))
	failing := errors.New("disk full")
	if err := f.m.PutBodiesAway(0, func([][]byte) ([]fsm.BodyRef, error) { return nil, failing }); !errors.Is(err, failing) {
		t.Fatalf("PutBodiesAway = %v, want the put's error", err)
	}
	if f.lookup("a").Body.Away() || f.m.HeldBodyBytes() == 0 {
		t.Fatal("a body was taken from the state though put failed")
	}
	shelf := newBodyShelf(t)
	if err := f.m.PutBodiesAway(0, shelf.put); err != nil {
		t.Fatal(err)
	}
	if len(shelf.bodies) != 2 || f.m.HeldBodyBytes() != 0 {
		t.Fatalf("after the failure: %d bodies put away, %d bytes held; want both away", len(shelf.bodies), f.m.HeldBodyBytes())
	}
}

// A message that came to wait twice since the last call (stored, delivered
// and recovered within one batch) is put away once, whatever is left to put
// away after it.
func TestMember_PutBodiesAwayTakesAMessageOnce(t *testing.T) {
	f := newMember(t)
	f.m.TrackBodies()
	f.open("s")
	shelf := newBodyShelf(t)
	f.apply(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{msg("a", body("aaaa")), msg("b", body("bbbbbbbb"))}},
		&fsmpb.Deliver{Session: "s", Now: 1, MessageIds: []string{"a"}},
		&fsmpb.Recover{Session: "s", Now: 1},
		&fsmpb.Deliver{Session: "s", Now: 1, MessageIds: []string{"b"}})
	if err := f.m.PutBodiesAway(0, shelf.put); err != nil {
		t.Fatal(err)
	}
	if len(shelf.bodies) != 1 || f.m.HeldBodyBytes() != 8 || !f.lookup("a").Body.Away() {
		t.Fatalf("%d bodies put away, %d bytes held; want a's alone away and b's 8 bytes held", len(shelf.bodies), f.m.HeldBodyBytes())
	}
}

// WithBody keeps the fields a newer version wrote that this one does not
// know.
func TestWithBody_KeepsUnknownFields(t *testing.T) {
	src := msg("a")
	src.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x07, 0x01}) // field 127, varint 1
	got := fsm.WithBody(src, nil)
	if !bytes.Equal(got.ProtoReflect().GetUnknown(), src.ProtoReflect().GetUnknown()) {
		t.Fatalf("unknown fields %x, want %x", got.ProtoReflect().GetUnknown(), src.ProtoReflect().GetUnknown())
	}
}
