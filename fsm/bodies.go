package fsm

import (
	"fmt"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member holding a million pending messages of 1 KiB would hold a
// gigabyte of bodies in the heap, which Go's collector lets grow to twice
// that. The member package therefore puts most bodies away in files of its
// own and keeps here only where each one is (member/DESIGN.md). Where a
// body is is replica-local: replicas that applied the same log can have put
// away different bodies, so nothing Apply decides, no Result and no size
// depends on it, and a snapshot holds every body whatever its place.

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
	// fresh are the messages stored since the last PutBodiesAway, in
	// sequence order; dropped are the places of put-away bodies whose
	// messages left the state since the last DroppedBodies.
	fresh   []*message
	dropped []BodyRef
}

// TrackBodies makes the member keep count of the bodies it holds and of the
// messages stored since the last PutBodiesAway, which a caller that puts
// bodies away needs. A restored member tracks them from the start when its
// snapshot was read with places (MemberSnapshot.Restore).
func (m *Member) TrackBodies() {
	if m.bodies != nil {
		return
	}
	m.bodies = &bodyTracking{}
	for _, msg := range m.messages {
		if !msg.away.Away() {
			m.bodies.held += int64(len(msg.msg.Body))
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

// PutBodiesAway hands put the bodies of the newest messages stored since the
// last call that still wait for delivery, oldest first, as many as bring the
// bodies held down to limit bytes; put returns where it put each one. The
// others stay held, and the next call considers only messages stored after
// this one. A message put away keeps every other field in the state.
func (m *Member) PutBodiesAway(limit int64, put func(bodies [][]byte) ([]BodyRef, error)) error {
	t := m.bodies
	if t == nil {
		return nil
	}
	fresh := t.fresh
	t.fresh = t.fresh[:0]
	excess := t.held - limit
	if excess <= 0 {
		return nil
	}
	// Take from the newest back: the oldest are delivered first, so they
	// are better held.
	first := len(fresh)
	for first > 0 && excess > 0 {
		first--
		if msg := fresh[first]; m.putAwayable(msg) {
			excess -= int64(len(msg.msg.Body))
		}
	}
	var msgs []*message
	var bodies [][]byte
	for _, msg := range fresh[first:] {
		if m.putAwayable(msg) {
			msgs = append(msgs, msg)
			bodies = append(bodies, msg.msg.Body)
		}
	}
	clear(fresh) // no longer keep the messages reachable from here
	if len(bodies) == 0 {
		return nil
	}
	refs, err := put(bodies)
	if err != nil {
		return err
	}
	if len(refs) != len(msgs) {
		return fmt.Errorf("put %d bodies away and got %d places back", len(msgs), len(refs))
	}
	for i, msg := range msgs {
		// A copy, not a change: Results, images and transactions taken
		// before share the message and may still read its body.
		msg.msg = WithBody(msg.msg, nil)
		msg.away = refs[i]
		t.held -= int64(refs[i].Len)
	}
	return nil
}

// putAwayable: still in the state, waiting, and with a body held.
func (m *Member) putAwayable(msg *message) bool {
	return m.messages[msg.msg.Id] == msg && msg.waiting() && !msg.away.Away() && len(msg.msg.Body) > 0
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

// Delivered returns the message delivered with deliveryID and where its
// body is: a caller that got a Delivery whose body was away reads it from
// there, and finds the message gone (false) if it left the state since.
func (m *Member) Delivered(deliveryID uint64) (*fsmpb.Message, BodyRef, bool) {
	msg := m.byDelivery[deliveryID]
	if msg == nil {
		return nil, BodyRef{}, false
	}
	return msg.msg, msg.away, true
}

// stored records a message newly in the state.
func (t *bodyTracking) stored(msg *message) {
	if t == nil || msg.away.Away() {
		return
	}
	t.held += int64(len(msg.msg.Body))
	t.fresh = append(t.fresh, msg)
}

// removed records a message that left the state.
func (t *bodyTracking) removed(msg *message) {
	switch {
	case t == nil:
	case msg.away.Away():
		t.dropped = append(t.dropped, msg.away)
	default:
		t.held -= int64(len(msg.msg.Body))
	}
}

// WithBody returns a copy of msg with body in place of its own; the copy
// shares msg's properties, which the state never modifies.
func WithBody(msg *fsmpb.Message, body []byte) *fsmpb.Message {
	out := new(fsmpb.Message)
	setWithBody(out, msg, body)
	return out
}

// setWithBody makes dst msg with body in place of its own, field by field:
// a message is not copied whole (it holds protobuf's internal state).
func setWithBody(dst, msg *fsmpb.Message, body []byte) {
	dst.Id = msg.Id
	dst.Body = body
	dst.Properties = msg.Properties
	dst.Priority = msg.Priority
	dst.Expiration = msg.Expiration
	dst.DedupId = msg.DedupId
	dst.EnqueuedAt = msg.EnqueuedAt
	dst.DeliveryCount = msg.DeliveryCount
	dst.Redelivered = msg.Redelivered
}
