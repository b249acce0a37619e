package fsm_test

import (
	"bytes"
	"fmt"
	"slices"

	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// awayShadow is a second member fed every entry the property machine's
// member gets, which puts its bodies away after each one as the member
// package does: most of its messages are then held by their records alone
// (fsm/records.go), and it must answer every query as the first member
// does, which the model checks.
type awayShadow struct {
	m      *fsm.Member
	bodies map[uint64][]byte
	nextAt uint64
	// checks counts the calls to check, which compares all only on every
	// fourth: the results of every entry are compared, and under -race
	// the whole comparison on every step doubled the property tests' time.
	checks int
}

func newAwayShadow() *awayShadow {
	m := fsm.NewMember()
	m.TrackBodies()
	// Ids whose hashes collide, most of them: the index's second map gets
	// every command too.
	fsm.NarrowIDHash(m, 1)
	return &awayShadow{m: m, bodies: map[uint64][]byte{}}
}

func (a *awayShadow) put(bodies [][]byte) ([]fsm.BodyRef, error) {
	refs := make([]fsm.BodyRef, len(bodies))
	for i, b := range bodies {
		a.nextAt++
		a.bodies[a.nextAt] = bytes.Clone(b)
		refs[i] = fsm.BodyRef{At: a.nextAt, Len: uint32(len(b))}
	}
	return refs, nil
}

func (a *awayShadow) read(ref fsm.BodyRef, buf []byte) ([]byte, error) {
	b, ok := a.bodies[ref.At]
	if !ok {
		return nil, fmt.Errorf("no body at %d", ref.At)
	}
	return append(buf, b...), nil
}

// whole is msg with its body read back from where the shadow put it.
func (a *awayShadow) whole(t *rapid.T, msg *fsmpb.Message, ref fsm.BodyRef) *fsmpb.Message {
	if !ref.Away() {
		return msg
	}
	if len(msg.GetBody()) > 0 {
		t.Fatalf("%s has a body in the state and one put away", msg.GetId())
	}
	b, err := a.read(ref, nil)
	if err != nil {
		t.Fatalf("%s: %v", msg.GetId(), err)
	}
	return fsm.WithBody(msg, b)
}

// apply applies the entry the first member applied at index, puts bodies
// away down to limit bytes held, and checks the results agree.
func (a *awayShadow) apply(t *rapid.T, index uint64, data []byte, want fsm.Result, limit int64) {
	rs, err := a.m.Apply(index, data)
	if err != nil || len(rs) != 1 {
		t.Fatalf("shadow apply %d: %d results, %v", index, len(rs), err)
	}
	got := rs[0]
	for i := range got.Delivered {
		d := &got.Delivered[i]
		d.Message = a.whole(t, d.Message, d.Body)
	}
	want.Err = errClass(want.Err)
	if !sameResult(want, got) {
		t.Fatalf("entry %d: member putting bodies away %+v, member holding them %+v", index, got, want)
	}
	if err := a.m.PutBodiesAway(limit, a.put); err != nil {
		t.Fatalf("put away: %v", err)
	}
	if held := a.m.HeldBodyBytes(); held < 0 {
		t.Fatalf("holds %d body bytes", held)
	}
	for _, ref := range a.m.DroppedBodies() {
		if _, ok := a.bodies[ref.At]; !ok {
			t.Fatalf("body at %d dropped twice or never put away", ref.At)
		}
		delete(a.bodies, ref.At)
	}
}

// snapshot takes the shadow through a snapshot and a restore, as the
// property machine does with its member; the restored shadow holds every
// body until new ones come.
func (a *awayShadow) snapshot(t *rapid.T) {
	r := restore(t, a.snapshotBytes(t))
	r.TrackBodies()
	fsm.NarrowIDHash(r, 1)
	a.m = r
	a.bodies = map[uint64][]byte{}
}

func (a *awayShadow) snapshotBytes(t *rapid.T) []byte {
	img := a.m.Capture()
	img.SetBodyReader(a.read)
	return imageBytes(t, img)
}

// check compares the shadow with the member m, which the model checked.
func (a *awayShadow) check(t *rapid.T, m *fsm.Member, known []string, now int64) {
	if a.checks++; a.checks%4 != 0 {
		return
	}
	// Both write deterministically: equal states, equal bytes.
	if got, want := a.snapshotBytes(t), snapshotBytes(t, m); !bytes.Equal(got, want) {
		t.Fatalf("the snapshot of the member putting bodies away differs")
	}
	if a.m.Stats() != m.Stats() {
		t.Fatalf("Stats: putting bodies away %+v, holding them %+v", a.m.Stats(), m.Stats())
	}
	for _, id := range known {
		got, gok := a.m.Lookup(id)
		want, wok := m.Lookup(id)
		if gok != wok {
			t.Fatalf("Lookup(%s) found %v putting bodies away, %v holding them", id, gok, wok)
		}
		if !gok {
			continue
		}
		got.Message, got.Body = a.whole(t, got.Message, got.Body), fsm.BodyRef{}
		if !sameMessage(got.Message, want.Message) || got.Pending != want.Pending || got.AvailableAt != want.AvailableAt || got.Dead != want.Dead ||
			got.MovingTo != want.MovingTo || got.Session != want.Session || got.DeliveryID != want.DeliveryID ||
			got.Redelivered != want.Redelivered || got.DeliveryCount != want.DeliveryCount || got.Tx != want.Tx {
			t.Fatalf("Lookup(%s): putting bodies away %+v, holding them %+v", id, got, want)
		}
		if got.DeliveryID != 0 {
			msg, ref, ok := a.m.Delivered(got.DeliveryID)
			if !ok || !sameMessage(a.whole(t, msg, ref), want.Message) {
				t.Fatalf("Delivered(%d) = %v, %v, %v; want %v", got.DeliveryID, msg, ref, ok, want.Message)
			}
		}
	}
	for _, at := range []int64{now, now + 100} {
		if got, want := pendingIDs(a.m, at), pendingIDs(m, at); !slices.Equal(got, want) {
			t.Fatalf("ScanPending(%d): putting bodies away %v, holding them %v", at, got, want)
		}
		if got, want := a.m.ExpiredBy(at, 1<<20), m.ExpiredBy(at, 1<<20); !slices.Equal(got, want) {
			t.Fatalf("ExpiredBy(%d): putting bodies away %v, holding them %v", at, got, want)
		}
	}
	if a.m.NextExpiration() != m.NextExpiration() || a.m.NextWake() != m.NextWake() {
		t.Fatalf("next expiration or wake differ")
	}
	if got, want := a.m.DeadWaiting(1<<20), m.DeadWaiting(1<<20); !slices.Equal(got, want) {
		t.Fatalf("DeadWaiting: putting bodies away %v, holding them %v", got, want)
	}
	gotAside, wantAside := a.m.AsideMessages(1<<20), m.AsideMessages(1<<20)
	if len(gotAside) != len(wantAside) {
		t.Fatalf("AsideMessages: %d putting bodies away, %d holding them", len(gotAside), len(wantAside))
	}
	for i, g := range gotAside {
		w := wantAside[i]
		if !sameMessage(a.whole(t, g.Message, g.Body), w.Message) || g.Seq != w.Seq || g.Dead != w.Dead || g.Target != w.Target ||
			g.Redelivered != w.Redelivered || g.DeliveryCount != w.DeliveryCount {
			t.Fatalf("AsideMessages[%d]: putting bodies away %+v, holding them %+v", i, g, w)
		}
	}
	for _, s := range m.Sessions() {
		got, want := a.m.SessionDeliveries(s.ID), m.SessionDeliveries(s.ID)
		if len(got) != len(want) {
			t.Fatalf("SessionDeliveries(%s): %d putting bodies away, %d holding them", s.ID, len(got), len(want))
		}
		for i := range got {
			got[i].Message, got[i].Body = a.whole(t, got[i].Message, got[i].Body), fsm.BodyRef{}
		}
		if !sameResult(fsm.Result{Delivered: want}, fsm.Result{Delivered: got}) {
			t.Fatalf("SessionDeliveries(%s): putting bodies away %+v, holding them %+v", s.ID, got, want)
		}
	}
	if !slices.Equal(a.m.Sessions(), m.Sessions()) || !slices.Equal(a.m.PreparedTxs(), m.PreparedTxs()) {
		t.Fatalf("sessions or prepared transactions differ")
	}
}
