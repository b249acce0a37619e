package fsm

import (
	"bufio"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// MemberImage is a point-in-time copy of a member's state, taken cheaply
// while applies are held off and written out while they continue: the
// message bodies are shared, as the state machine never modifies them.
type MemberImage struct {
	header   *fsmpb.MemberSnapshot
	messages []*fsmpb.StoredMessage
}

// Capture copies the state for a snapshot.
func (m *Member) Capture() *MemberImage {
	msgs := make([]*message, 0, len(m.messages))
	for _, msg := range m.messages {
		msgs = append(msgs, msg)
	}
	slices.SortFunc(msgs, func(a, b *message) int { return cmpUint64(a.seq, b.seq) })
	img := &MemberImage{
		header: &fsmpb.MemberSnapshot{
			Applied:        m.applied,
			NextSeq:        m.nextSeq,
			NextDeliveryId: m.nextDelivery,
			Settings:       m.settings,
			MessageCount:   uint64(len(msgs)),
			DeadLettered:   m.deadLettered,
			Sealed:         m.sealed,
		},
		messages: make([]*fsmpb.StoredMessage, len(msgs)),
	}
	for i, msg := range msgs {
		sm := &fsmpb.StoredMessage{Message: msg.msg, Seq: msg.seq, Redelivered: msg.redelivered, DeliveryCount: msg.count,
			AvailableAt: msg.availableAt, Dead: msg.dead, MovingTo: msg.movingTo}
		if msg.session != nil {
			sm.DeliveryId, sm.Session = msg.deliveryID, msg.session.id
		}
		img.messages[i] = sm
	}
	for _, s := range m.Sessions() {
		img.header.Sessions = append(img.header.Sessions, &fsmpb.StoredSession{Id: s.ID, Owner: s.Owner})
	}
	for _, r := range m.dedup.records() {
		img.header.Dedup = append(img.header.Dedup, &fsmpb.DedupRecord{DedupId: r.dedupID, MessageId: r.messageID, At: r.at})
	}
	return img
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteTo writes the image as a length-delimited header followed by one
// length-delimited record per message, in sequence order.
func (img *MemberImage) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	var n int64
	k, err := deterministic.MarshalTo(bw, img.header)
	n += int64(k)
	if err != nil {
		return n, err
	}
	for _, sm := range img.messages {
		k, err := deterministic.MarshalTo(bw, sm)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// deterministic makes equal states write equal bytes (map fields sorted).
var deterministic = protodelim.MarshalOptions{MarshalOptions: proto.MarshalOptions{Deterministic: true}}

// maxSnapshotRecord bounds one record of a snapshot stream: a message of the
// largest size a node accepts, with room for its headers.
const maxSnapshotRecord = 64 << 20

// RestoreMember reads a state written by MemberImage.WriteTo.
func RestoreMember(r io.Reader) (*Member, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	opts := protodelim.UnmarshalOptions{MaxSize: maxSnapshotRecord}
	var h fsmpb.MemberSnapshot
	if err := opts.UnmarshalFrom(br, &h); err != nil {
		return nil, fmt.Errorf("%w: snapshot header: %v", ErrCorrupt, err)
	}
	m := NewMember()
	m.applied, m.nextSeq, m.nextDelivery, m.deadLettered, m.sealed = h.Applied, h.NextSeq, h.NextDeliveryId, h.DeadLettered, h.Sealed
	if h.Settings != nil {
		m.settings = h.Settings
	}
	for _, s := range h.Sessions {
		m.sessions[s.Id] = &session{id: s.Id, owner: s.Owner, deliveries: make(map[uint64]*message)}
	}
	for _, d := range h.Dedup {
		r := &dedupRecord{dedupID: d.DedupId, messageID: d.MessageId, at: d.At}
		m.dedup.byID[d.DedupId] = r
		m.dedup.order = append(m.dedup.order, r)
	}
	for i := uint64(0); i < h.MessageCount; i++ {
		var sm fsmpb.StoredMessage
		if err := opts.UnmarshalFrom(br, &sm); err != nil {
			return nil, fmt.Errorf("%w: snapshot message %d of %d: %v", ErrCorrupt, i, h.MessageCount, err)
		}
		if err := ValidateMessage(sm.Message); err != nil {
			return nil, fmt.Errorf("%w: snapshot message %d: %v", ErrCorrupt, i, err)
		}
		msg := &message{msg: sm.Message, seq: sm.Seq, size: MessageSize(sm.Message), redelivered: sm.Redelivered, count: sm.DeliveryCount,
			availableAt: sm.AvailableAt, dead: sm.Dead, movingTo: sm.MovingTo}
		m.messages[sm.Message.Id] = msg
		m.bytes += msg.size
		if sm.Message.Expiration != 0 {
			m.expiry.ReplaceOrInsert(msg)
		}
		switch {
		case sm.Session != "":
		case msg.availableAt != 0:
			m.delayed.ReplaceOrInsert(msg)
			continue
		case msg.dead || msg.movingTo != "":
			m.aside.ReplaceOrInsert(msg)
			continue
		default:
			m.pushPending(msg)
			continue
		}
		s := m.sessions[sm.Session]
		if s == nil {
			return nil, fmt.Errorf("%w: snapshot message %s is delivered to session %q, which is not in the snapshot", ErrCorrupt, sm.Message.Id, sm.Session)
		}
		msg.session, msg.deliveryID = s, sm.DeliveryId
		s.deliveries[msg.deliveryID] = msg
		m.byDelivery[msg.deliveryID] = msg
	}
	return m, nil
}
