package fsm

import "github.com/cairnmq/cairn/fsm/fsmpb"

// What a member spends in memory on a message, as measured on amd64 by
// BenchmarkMember_HeapPerMessage (docs/performance.md): a message its
// record holds alone (an id and nothing else) costs about 223 bytes with
// its indexes; any other keeps a decoded message beside its record, about
// 480 bytes in all before its strings; a properties map about 200 bytes
// more, each string property about 40 beyond its bytes and each typed one
// about 100. The figures round up, so that a limit is reached early
// rather than late.
const (
	recordCost        = 224
	messageCost       = 512
	mapCost           = 208
	propertyCost      = 48
	typedPropertyCost = 104
)

// MessageSize is what a message counts against the byte limit of a member
// that does not count memory (MemberSettings.count_memory; MessageCost
// when it does): its body, its properties (a typed value as 8 bytes) and
// the headers its sender set.
func MessageSize(msg *fsmpb.Message) int64 {
	n := int64(len(msg.Body) + len(msg.CorrelationId) + len(msg.Type) + len(msg.ReplyTo))
	for k, v := range msg.Properties {
		n += int64(len(k) + len(v))
	}
	for k := range msg.TypedProperties {
		n += int64(len(k) + 8)
	}
	return n
}

// MessageCost is what a message counts against the byte limit of a member
// that counts memory (MemberSettings.count_memory): what the member spends
// on it, ids and headers included. A body the member put away (bodyAway)
// counts as if it were held, so that a message counts the same wherever
// its body is.
func MessageCost(msg *fsmpb.Message, bodyAway int64) int64 {
	if bodyAway == 0 && holdsWhole(msg) {
		return recordCost
	}
	n := messageCost + bodyAway + MessageSize(msg) + int64(len(msg.Id)+len(msg.DedupId))
	if len(msg.Properties) > 0 {
		n += mapCost + int64(len(msg.Properties))*propertyCost
	}
	if len(msg.TypedProperties) > 0 {
		n += mapCost + int64(len(msg.TypedProperties))*typedPropertyCost
	}
	return n
}

// storedSize is record r's share of Member.stored: its message's
// MessageSize, the body where it is (a message its record holds alone has
// none but a body put away).
func (m *Member) storedSize(r ref, rec *record) int64 {
	n := int64(rec.away.Len)
	if rec.has(flagFull) {
		n += MessageSize(m.full(r))
	}
	return n
}

// StoredBytes is about what a snapshot writes of the messages held (their
// MessageSize), whatever the member counts against its limit: what
// snapshots are paced by.
func (m *Member) StoredBytes() int64 { return m.stored }

// size is what msg, its body at away, counts against the member's limit.
func (m *Member) size(msg *fsmpb.Message, away BodyRef) int64 {
	if m.settings.CountMemory {
		return MessageCost(msg, int64(away.Len))
	}
	return MessageSize(msg) + int64(away.Len)
}
