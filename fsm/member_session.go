package fsm

import "slices"

// session is a session open on the member (or released, while a prepared
// transaction holds one of its deliveries): the deliveries it holds, to
// which of its consumers each went, and the slot records name it by.
type session struct {
	id    string
	owner string
	// slot is where sessionSlots holds it; records name it by slot+1.
	slot       uint32
	deliveries map[uint64]ref
	// consumerOf is the consumer each delivery went to, when its Deliver
	// named one (one string per Deliver, shared by its messages).
	consumerOf map[uint64]string
	// lastRecover is the newest attempt the member applied for the session,
	// and lastRecoverWatermark what it answered: a front-end that got no
	// answer sends the same attempt again, which must not take back what was
	// delivered since (each delivery counts toward max_deliveries).
	lastRecover          uint64
	lastRecoverWatermark uint64
	// released: no longer open, kept for the deliveries a prepared
	// transaction holds until it is decided.
	released bool
}

// newSession opens a session in a free slot.
func (m *Member) newSession(id, owner string) *session {
	s := &session{id: id, owner: owner, deliveries: make(map[uint64]ref), consumerOf: make(map[uint64]string)}
	if n := len(m.freeSlots); n > 0 {
		s.slot = m.freeSlots[n-1]
		m.freeSlots = m.freeSlots[:n-1]
		m.sessionSlots[s.slot] = s
	} else {
		s.slot = uint32(len(m.sessionSlots))
		m.sessionSlots = append(m.sessionSlots, s)
	}
	return s
}

// releaseSession closes s; its slot stays taken while a prepared
// transaction holds one of its deliveries.
func (m *Member) releaseSession(s *session) {
	if m.sessions[s.id] == s {
		delete(m.sessions, s.id)
	}
	s.released = true
	if len(s.deliveries) == 0 {
		m.freeSession(s)
	}
}

func (m *Member) freeSession(s *session) {
	m.sessionSlots[s.slot] = nil
	m.freeSlots = append(m.freeSlots, s.slot)
}

// sessionOf is the session holding a delivered message.
func (m *Member) sessionOf(rec *record) *session { return m.sessionSlots[rec.session-1] }

// deliveryIDs lists the session's delivery ids up to upTo (0: all),
// ascending, but those a prepared transaction holds.
func (m *Member) deliveryIDs(s *session, upTo uint64) []uint64 {
	ids := make([]uint64, 0, len(s.deliveries))
	for id, r := range s.deliveries {
		if !m.rec(r).has(flagHeld) && (upTo == 0 || id <= upTo) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// consumerDeliveries lists the delivery ids of s to consumer above after,
// ascending, but those a prepared transaction holds.
func (m *Member) consumerDeliveries(s *session, consumer string, after uint64) []uint64 {
	var ids []uint64
	for id, c := range s.consumerOf {
		if c == consumer && id > after && !m.rec(s.deliveries[id]).has(flagHeld) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// requeueAll takes back every delivery of s.
func (m *Member) requeueAll(s *session, now int64) int {
	ids := m.deliveryIDs(s, 0)
	for _, id := range ids {
		m.requeue(s.deliveries[id], now)
	}
	return len(ids)
}
