package fsm

import (
	"fmt"
	"slices"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member holding a million pending messages of 1 KiB would hold a
// gigabyte of bodies in the heap, which Go's collector lets grow to twice
// that. The member package therefore puts most bodies away in files of its
// own and keeps here only where each one is (member/DESIGN.md). Where a
// body is is replica-local: replicas that applied the same log can have put
// away different bodies, so nothing replicated depends on it (what Apply
// decides, the sizes, the snapshots: a snapshot holds every body whatever
// its place); only the Deliveries Apply returns, read by this replica,
// carry the place of a body put away instead of the body.

// BodyRef is where the member put a message's body. At is the member's own
// (this package never reads it); Len is the body's length, which sizes and
// byte limits keep using. The zero BodyRef means the state holds the body.
type BodyRef struct {
	At  uint64
	Len uint32
}

// Away reports whether the body was put away.
func (r BodyRef) Away() bool { return r.At != 0 }

// bodyTracking is what a member keeps once TrackBodies was called.
type bodyTracking struct {
	// held is the bytes of the bodies the state holds.
	held int64
	// fresh are the messages that came to wait for delivery since the last
	// PutBodiesAway, in that order; dropped are the places of put-away bodies whose
	// messages left the state since the last DroppedBodies.
	fresh   []stamped
	dropped []BodyRef
	// aliasing is set while an Enqueue whose bodies alias its entry is
	// applied; aliased are the messages it stored since the last
	// PutBodiesAway (alias.go).
	aliasing bool
	aliased  []stamped
}

// TrackBodies makes the member keep count of the bodies it holds and of the
// messages that came to wait since the last PutBodiesAway, which a caller
// that puts bodies away needs, from now on: a restored member does not
// track them until told.
func (m *Member) TrackBodies() {
	if m.bodies != nil {
		return
	}
	m.bodies = &bodyTracking{}
	for _, c := range m.records.msgs {
		for _, msg := range c {
			if msg != nil {
				m.bodies.held += int64(len(msg.Body))
			}
		}
	}
}

// HeldBodyBytes is the bytes of bodies the state holds in memory; 0 unless
// TrackBodies was called.
func (m *Member) HeldBodyBytes() int64 {
	if m.bodies == nil {
		return 0
	}
	return m.bodies.held
}

// PutBodiesAway hands put the bodies of the newest messages that came to
// wait for delivery since the last call (stored, or back from a session or
// a redelivery delay) and still wait, oldest first, as many as bring the
// bodies held down to limit bytes; put returns where it put each one. The
// others stay held, and the next call considers only messages that come to
// wait after this one, unless put failed: then it tries those again. A
// message put away keeps every other field in the state.
//
// Then it copies the bodies it holds that still alias the entries they
// came in (alias.go), so the caller may drop those entries.
func (m *Member) PutBodiesAway(limit int64, put func(bodies [][]byte) ([]BodyRef, error)) error {
	t := m.bodies
	if t == nil {
		return nil
	}
	defer m.detachAliased()
	if len(t.fresh) == 0 {
		return nil
	}
	fresh := t.fresh
	t.fresh = nil
	// Take from the newest back: the oldest are delivered first, so they
	// are better held. A message can be in fresh twice (stored, delivered
	// and returned within one batch).
	var msgs []stamped
	var seen map[ref]bool
	for i, excess := len(fresh)-1, t.held-limit; i >= 0 && excess > 0; i-- {
		if msg := fresh[i]; m.putAwayable(msg) && !seen[msg.r] {
			if seen == nil {
				seen = map[ref]bool{}
			}
			seen[msg.r] = true
			msgs = append(msgs, msg)
			excess -= int64(len(m.body(msg.r)))
		}
	}
	// Keep the list's array for the next batch, unless a large batch grew
	// it; either way it no longer holds messages that may have left.
	clear(fresh)
	if cap(fresh) <= maxKeptFresh {
		t.fresh = fresh[:0]
	}
	if len(msgs) == 0 {
		return nil
	}
	slices.Reverse(msgs)
	bodies := make([][]byte, len(msgs))
	for i, msg := range msgs {
		bodies[i] = m.body(msg.r)
	}
	refs, err := put(bodies)
	if err == nil && len(refs) != len(msgs) {
		err = fmt.Errorf("put %d bodies away and got %d places back", len(msgs), len(refs))
	}
	if err != nil {
		t.fresh = append(msgs, t.fresh...)
		return err
	}
	for i, msg := range msgs {
		rec := m.rec(msg.r)
		// A copy, not a change: Results, images and transactions taken
		// before share the message and may still read its body. The
		// record alone holds most messages once their body is away.
		m.setMessage(msg.r, rec, WithBody(m.full(msg.r), nil))
		rec.set(flagAliased, false)
		rec.away = refs[i]
		t.held -= int64(refs[i].Len)
	}
	return nil
}

// maxKeptFresh bounds the array PutBodiesAway keeps between batches.
const maxKeptFresh = 4096

// putAwayable: still in the state, waiting, and with a body held.
func (m *Member) putAwayable(msg stamped) bool {
	return m.holds(msg) && m.rec(msg.r).waiting() && len(m.body(msg.r)) > 0
}

// DroppedBodies returns the places of put-away bodies whose messages left
// the state since the last call (or since TrackBodies), and forgets them.
func (m *Member) DroppedBodies() []BodyRef {
	if m.bodies == nil || len(m.bodies.dropped) == 0 {
		return nil
	}
	d := m.bodies.dropped
	m.bodies.dropped = nil
	return d
}

// bodiesAway returns the places of every body put away that the member
// still holds or dropped since the last DroppedBodies: all a caller frees
// when the member goes.
func (m *Member) bodiesAway() []BodyRef {
	if m.bodies == nil {
		return nil
	}
	out := m.DroppedBodies()
	for i, c := range m.records.chunks {
		for j := range c[:min(len(c), int(m.records.used)-i*slabChunk)] {
			if rec := &c[j]; rec.has(flagLive) && rec.away.Away() {
				out = append(out, rec.away)
			}
		}
	}
	return out
}

// Delivered returns the message delivered with deliveryID and where its
// body is: a caller that got a Delivery whose body was away reads it from
// there, and finds the message gone (false) if it left the state since.
func (m *Member) Delivered(deliveryID uint64) (*fsmpb.Message, BodyRef, bool) {
	r := m.byDelivery[deliveryID]
	if r == 0 {
		return nil, BodyRef{}, false
	}
	return m.message(r), m.rec(r).away, true
}

// bodyStored records a message newly in the state.
func (m *Member) bodyStored(r ref, rec *record) {
	t := m.bodies
	if t == nil {
		return
	}
	if n := len(m.body(r)); n > 0 {
		t.held += int64(n)
		if t.aliasing {
			rec.set(flagAliased, true)
			t.aliased = append(t.aliased, stamped{r, rec.seq})
		}
	}
}

// bodyWaiting records a message that came to wait for delivery.
func (m *Member) bodyWaiting(r ref, rec *record) {
	if t := m.bodies; t != nil && len(m.body(r)) > 0 {
		t.fresh = append(t.fresh, stamped{r, rec.seq})
	}
}

// bodyRemoved records a message that left the state.
func (m *Member) bodyRemoved(r ref, rec *record) {
	switch t := m.bodies; {
	case t == nil:
	case rec.away.Away():
		t.dropped = append(t.dropped, rec.away)
	default:
		t.held -= int64(len(m.body(r)))
	}
}

// WithBody returns a copy of msg with body in place of its own; the copy
// shares msg's properties, which the state never modifies. A field added to
// Message is copied by setWithBody too (TestWithBody_CopiesEveryOtherField).
func WithBody(msg *fsmpb.Message, body []byte) *fsmpb.Message {
	out := new(fsmpb.Message)
	setWithBody(out, msg, body)
	return out
}

// setWithBody makes dst msg with body in place of its own, field by field:
// a message is not copied whole (it holds protobuf's internal state).
func setWithBody(dst, msg *fsmpb.Message, body []byte) {
	if u := msg.ProtoReflect().GetUnknown(); len(u) > 0 || len(dst.ProtoReflect().GetUnknown()) > 0 {
		// Fields of a newer version, kept as the snapshot would keep them.
		dst.ProtoReflect().SetUnknown(u)
	}
	dst.Id = msg.Id
	dst.Body = body
	dst.Properties = msg.Properties
	dst.Priority = msg.Priority
	dst.Expiration = msg.Expiration
	dst.DedupId = msg.DedupId
	dst.EnqueuedAt = msg.EnqueuedAt
	dst.DeliveryCount = msg.DeliveryCount
	dst.Redelivered = msg.Redelivered
	dst.TypedProperties = msg.TypedProperties
	dst.CorrelationId = msg.CorrelationId
	dst.Type = msg.Type
	dst.ReplyTo = msg.ReplyTo
}
