package fsm

import (
	"cmp"
	"slices"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Stats counts what a member holds.
type Stats struct {
	Pending   int
	Delivered int
	Bytes     int64
	Sessions  int
	DedupIDs  int
}

// Stats returns the member's counts.
func (m *Member) Stats() Stats {
	return Stats{
		Pending:   m.nPending,
		Delivered: len(m.byDelivery),
		Bytes:     m.bytes,
		Sessions:  len(m.sessions),
		DedupIDs:  m.dedup.len(),
	}
}

// Settings returns the member's replicated settings; callers must not modify them.
func (m *Member) Settings() *fsmpb.MemberSettings { return m.settings }

// ScanPending calls fn with the ids of pending messages in delivery order
// (highest priority first, then arrival), skipping those expired at now,
// until fn returns false.
func (m *Member) ScanPending(now int64, fn func(id string) bool) {
	for p := MaxPriority; p >= 0; p-- {
		more := true
		m.pending[p].Ascend(func(msg *message) bool {
			if msg.expiredAt(now) {
				return true
			}
			more = fn(msg.msg.Id)
			return more
		})
		if !more {
			return
		}
	}
}

// ExpiredBy lists up to limit ids of messages whose expiration is at or
// before now, earliest first.
func (m *Member) ExpiredBy(now int64, limit int) []string {
	var ids []string
	m.expiry.Ascend(func(msg *message) bool {
		if !msg.expiredAt(now) || len(ids) >= limit {
			return false
		}
		ids = append(ids, msg.msg.Id)
		return true
	})
	return ids
}

// NextExpiration is the earliest expiration of a stored message, 0 if none.
func (m *Member) NextExpiration() int64 {
	if msg, ok := m.expiry.Min(); ok {
		return msg.msg.Expiration
	}
	return 0
}

// SessionInfo describes an open session.
type SessionInfo struct {
	ID         string
	Owner      string
	Deliveries int
}

// Sessions lists the open sessions, by id.
func (m *Member) Sessions() []SessionInfo {
	out := make([]SessionInfo, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, SessionInfo{ID: s.id, Owner: s.owner, Deliveries: len(s.deliveries)})
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// HasSession reports whether the session is open.
func (m *Member) HasSession(id string) bool { return m.sessions[id] != nil }

// MessageState is the state of one stored message, for inspection.
type MessageState struct {
	Message       *fsmpb.Message
	Pending       bool
	Session       string
	DeliveryID    uint64
	Redelivered   bool
	DeliveryCount uint32
}

// Lookup returns the state of a stored message.
func (m *Member) Lookup(id string) (MessageState, bool) {
	msg := m.messages[id]
	if msg == nil {
		return MessageState{}, false
	}
	st := MessageState{Message: msg.msg, Pending: msg.session == nil, DeliveryID: msg.deliveryID, Redelivered: msg.redelivered, DeliveryCount: msg.count}
	if msg.session != nil {
		st.Session = msg.session.id
	}
	return st, true
}

// DeliveriesAfter lists the deliveries a session holds with an id above
// after, in delivery order: those a host committed but may not have pushed.
func (m *Member) DeliveriesAfter(session string, after uint64) []Delivery {
	s := m.sessions[session]
	if s == nil {
		return nil
	}
	var out []Delivery
	for _, id := range s.deliveryIDs(0) {
		if id <= after {
			continue
		}
		msg := s.deliveries[id]
		out = append(out, Delivery{DeliveryID: id, Message: msg.msg, Redelivered: msg.redelivered, DeliveryCount: msg.count})
	}
	return out
}
