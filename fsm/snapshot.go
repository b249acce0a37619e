package fsm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// MemberImage is a point-in-time copy of a member's state, taken cheaply
// while applies are held off and written out while they continue: the
// message bodies are shared, as the state machine never modifies them.
type MemberImage struct {
	header *fsmpb.MemberSnapshot
	// messages are in the order Capture walked them until WriteTo sorts
	// them by sequence: sorting a million while applies wait would stall
	// the member for half a second.
	messages []imageMessage
	// readBody reads a body the member put away (SetBodyReader).
	readBody func(ref BodyRef, buf []byte) ([]byte, error)
}

// SetBodyReader gives WriteTo the way to read the bodies the member put
// away: a snapshot holds every body, wherever it is.
func (img *MemberImage) SetBodyReader(read func(ref BodyRef, buf []byte) ([]byte, error)) {
	img.readBody = read
}

// imageMessage is a message as captured: what changes copied, the message
// itself shared.
type imageMessage struct {
	msg         *fsmpb.Message
	seq         uint64
	deliveryID  uint64
	session     string
	availableAt int64
	movingTo    string
	count       uint32
	redelivered bool
	dead        bool
	away        BodyRef
}

// Capture copies the state for a snapshot. It runs while applies wait, so
// it only copies: WriteTo orders and encodes (BenchmarkMember_Capture).
func (m *Member) Capture() *MemberImage {
	msgs := make([]imageMessage, 0, len(m.messages))
	add := func(msg *message) bool {
		im := imageMessage{msg: msg.msg, seq: msg.seq, availableAt: msg.availableAt, movingTo: msg.movingTo,
			count: msg.count, redelivered: msg.redelivered, dead: msg.dead, away: msg.away}
		if msg.session != nil {
			im.deliveryID, im.session = msg.deliveryID, msg.session.id
		}
		msgs = append(msgs, im)
		return true
	}
	// Every message is in exactly one of these. The trees hold messages in
	// sequence order, which is about the order they were allocated in, so
	// walking them reads memory far more in order than walking the map.
	for _, t := range m.pending {
		t.Ascend(add)
	}
	m.delayed.Ascend(add)
	m.aside.Ascend(add)
	for _, msg := range m.byDelivery {
		add(msg)
	}
	if len(msgs) != len(m.messages) {
		// The states disagree with the map, which holds every message: a
		// snapshot must not lose one for it.
		msgs = msgs[:0]
		for _, msg := range m.messages {
			add(msg)
		}
	}
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
		messages: msgs,
	}
	for _, s := range m.Sessions() {
		own := m.sessions[s.ID]
		img.header.Sessions = append(img.header.Sessions, &fsmpb.StoredSession{Id: s.ID, Owner: s.Owner,
			LastRecover: own.lastRecover, LastRecoverWatermark: own.lastRecoverWatermark})
	}
	for _, r := range m.dedup.records() {
		img.header.Dedup = append(img.header.Dedup, &fsmpb.DedupRecord{DedupId: r.dedupID, MessageId: r.messageID, At: r.at})
	}
	for _, p := range m.PreparedTxs() {
		t := m.txs[p.Tx]
		st := &fsmpb.StoredTx{Tx: t.id, Primary: t.primary, Session: t.session, PreparedAt: t.preparedAt, Messages: t.msgs}
		for _, o := range t.out {
			st.Duplicate = append(st.Duplicate, o.Duplicate)
		}
		for _, msg := range t.acked {
			st.DeliveryIds = append(st.DeliveryIds, msg.deliveryID)
		}
		img.header.Txs = append(img.header.Txs, st)
	}
	for _, d := range m.decisions.order {
		if m.decisions.byTx[d.tx] == d {
			img.header.Decisions = append(img.header.Decisions, &fsmpb.TxDecision{Tx: d.tx, Commit: d.commit, At: d.at})
		}
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
// length-delimited record per message, in sequence order. One goroutine at
// a time may call it.
func (img *MemberImage) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	// Each record is encoded into one reused buffer: protodelim allocates
	// two slices per record, a gigabyte of garbage for a million messages.
	var buf []byte
	var size [binary.MaxVarintLen64]byte
	var n int64
	write := func(m proto.Message) error {
		var err error
		if buf, err = deterministic.MarshalOptions.MarshalAppend(buf[:0], m); err != nil {
			return err
		}
		k, err := bw.Write(protowire.AppendVarint(size[:0], uint64(len(buf))))
		n += int64(k)
		if err != nil {
			return err
		}
		k, err = bw.Write(buf)
		n += int64(k)
		return err
	}
	if err := write(img.header); err != nil {
		return n, err
	}
	slices.SortFunc(img.messages, func(a, b imageMessage) int { return cmpUint64(a.seq, b.seq) })
	var sm fsmpb.StoredMessage
	// withBody is reused for every message whose body was put away: a
	// million of them would otherwise be a million allocations.
	var withBody fsmpb.Message
	var body []byte
	for i := range img.messages {
		im := &img.messages[i]
		msg := im.msg
		if im.away.Away() {
			if img.readBody == nil {
				return n, fmt.Errorf("message %s: its body was put away and the image has no body reader", msg.Id)
			}
			var err error
			if body, err = img.readBody(im.away, body[:0]); err != nil {
				return n, fmt.Errorf("message %s: reading its body: %w", msg.Id, err)
			}
			setWithBody(&withBody, msg, body)
			msg = &withBody
		}
		sm = fsmpb.StoredMessage{Message: msg, Seq: im.seq, Redelivered: im.redelivered, DeliveryCount: im.count,
			AvailableAt: im.availableAt, Dead: im.dead, MovingTo: im.movingTo, DeliveryId: im.deliveryID, Session: im.session}
		if err := write(&sm); err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// deterministic makes equal states write equal bytes (map fields sorted).
var deterministic = protodelim.MarshalOptions{MarshalOptions: proto.MarshalOptions{Deterministic: true}}

// maxPresizedMessages bounds the room a restore makes for messages before
// reading them.
const maxPresizedMessages = 1 << 22

// maxSnapshotRecord bounds one record of a snapshot stream: a message of the
// largest size a node accepts, with room for its headers.
const maxSnapshotRecord = 64 << 20

// RestoreMember reads a state written by MemberImage.WriteTo, decoding its
// records one after the other.
func RestoreMember(r io.Reader) (*Member, error) {
	snap, err := OpenMemberSnapshot(r)
	if err != nil {
		return nil, err
	}
	var rec []byte
	return snap.Restore(func() (*fsmpb.StoredMessage, BodyRef, error) {
		if rec, err = snap.NextRecord(rec[:0]); err != nil {
			return nil, BodyRef{}, err
		}
		sm, err := DecodeStoredMessage(rec)
		return sm, BodyRef{}, err
	})
}

// MemberSnapshot is a snapshot written by MemberImage.WriteTo being read:
// its header, then its message records, which a caller may decode on
// several goroutines (DecodeStoredMessage) as long as Restore gets them back
// in order.
type MemberSnapshot struct {
	br     *bufio.Reader
	header *fsmpb.MemberSnapshot
	read   uint64
	// err is the first record that failed to read: every later call
	// returns it, as the stream's place is lost.
	err error
}

// OpenMemberSnapshot reads a snapshot's header.
func OpenMemberSnapshot(r io.Reader) (*MemberSnapshot, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	var h fsmpb.MemberSnapshot
	if err := (protodelim.UnmarshalOptions{MaxSize: maxSnapshotRecord}).UnmarshalFrom(br, &h); err != nil {
		return nil, fmt.Errorf("%w: snapshot header: %v", ErrCorrupt, err)
	}
	return &MemberSnapshot{br: br, header: &h}, nil
}

// NextRecord appends the next message record's bytes to buf; io.EOF once
// every record the header counts was read. After an error it returns that
// error again.
func (s *MemberSnapshot) NextRecord(buf []byte) ([]byte, error) {
	if s.err != nil {
		return buf, s.err
	}
	if s.read == s.header.MessageCount {
		return buf, io.EOF
	}
	buf, err := s.readRecord(buf)
	if err != nil {
		s.err = err
		return buf, err
	}
	s.read++
	return buf, nil
}

func (s *MemberSnapshot) readRecord(buf []byte) ([]byte, error) {
	size, err := binary.ReadUvarint(s.br)
	if err != nil {
		return buf, fmt.Errorf("%w: %v", ErrCorrupt, noEOF(err))
	}
	if size > maxSnapshotRecord {
		return buf, fmt.Errorf("%w: a record of %d bytes, over the %d a message can take", ErrCorrupt, size, maxSnapshotRecord)
	}
	start := len(buf)
	buf = slices.Grow(buf, int(size))[:start+int(size)]
	if _, err := io.ReadFull(s.br, buf[start:]); err != nil {
		return buf[:start], fmt.Errorf("%w: %v", ErrCorrupt, noEOF(err))
	}
	return buf, nil
}

// noEOF: a snapshot that ends early is cut short, not at its end.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// DecodeStoredMessage decodes and checks one message record; the message
// keeps no reference to rec. It is safe to call on several goroutines.
func DecodeStoredMessage(rec []byte) (*fsmpb.StoredMessage, error) {
	sm := new(fsmpb.StoredMessage)
	if err := proto.Unmarshal(rec, sm); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err := ValidateMessage(sm.Message); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return sm, nil
}

// Restore builds the state from the header and the snapshot's messages,
// which next returns decoded, in the order they were written, each with
// where its body was put away when the caller took it out of the message
// (sm.Message.Body then empty).
func (s *MemberSnapshot) Restore(next func() (*fsmpb.StoredMessage, BodyRef, error)) (*Member, error) {
	h := s.header
	m := NewMember()
	// Sized once rather than grown through every power of two; bounded, as
	// the count comes from the file.
	m.messages = make(map[string]*message, min(h.MessageCount, maxPresizedMessages))
	m.applied, m.nextSeq, m.nextDelivery, m.deadLettered, m.sealed = h.Applied, h.NextSeq, h.NextDeliveryId, h.DeadLettered, h.Sealed
	if h.Settings != nil {
		m.settings = h.Settings
	}
	for _, s := range h.Sessions {
		m.sessions[s.Id] = &session{id: s.Id, owner: s.Owner, deliveries: make(map[uint64]*message),
			lastRecover: s.LastRecover, lastRecoverWatermark: s.LastRecoverWatermark}
	}
	for _, d := range h.Dedup {
		r := &dedupRecord{dedupID: d.DedupId, messageID: d.MessageId, at: d.At}
		if r.messageID != "" { // "" is a forgotten id, keeping its place in order
			m.dedup.byID[d.DedupId] = r
		}
		m.dedup.order = append(m.dedup.order, r)
	}
	// A delivery a prepared transaction holds outlives its session when
	// the session was released: its session is kept apart, unregistered.
	held := map[uint64]bool{}
	for _, t := range h.Txs {
		for _, id := range t.DeliveryIds {
			held[id] = true
		}
	}
	orphans := map[string]*session{}
	for i := uint64(0); i < h.MessageCount; i++ {
		sm, away, err := next()
		if err != nil {
			return nil, fmt.Errorf("snapshot message %d of %d: %w", i, h.MessageCount, err)
		}
		msg := &message{msg: sm.Message, seq: sm.Seq, size: MessageSize(sm.Message) + int64(away.Len), redelivered: sm.Redelivered, count: sm.DeliveryCount,
			availableAt: sm.AvailableAt, dead: sm.Dead, movingTo: sm.MovingTo, away: away}
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
		if s == nil && held[sm.DeliveryId] {
			if s = orphans[sm.Session]; s == nil {
				s = &session{id: sm.Session, deliveries: make(map[uint64]*message)}
				orphans[sm.Session] = s
			}
		}
		if s == nil {
			return nil, fmt.Errorf("%w: snapshot message %s is delivered to session %q, which is not in the snapshot", ErrCorrupt, sm.Message.Id, sm.Session)
		}
		msg.session, msg.deliveryID = s, sm.DeliveryId
		s.deliveries[msg.deliveryID] = msg
		m.byDelivery[msg.deliveryID] = msg
	}
	for _, st := range h.Txs {
		t := &tx{id: st.Tx, primary: st.Primary, session: st.Session, preparedAt: st.PreparedAt, msgs: st.Messages}
		if len(st.Duplicate) != len(st.Messages) {
			return nil, fmt.Errorf("%w: snapshot transaction %s: %d messages, %d duplicate marks", ErrCorrupt, st.Tx, len(st.Messages), len(st.Duplicate))
		}
		for i, msg := range st.Messages {
			if err := ValidateMessage(msg); err != nil {
				return nil, fmt.Errorf("%w: snapshot transaction %s: %v", ErrCorrupt, st.Tx, err)
			}
			t.out = append(t.out, Enqueued{ID: msg.Id, Duplicate: st.Duplicate[i]})
			if !st.Duplicate[i] {
				t.bytes += MessageSize(msg)
			}
		}
		for _, id := range st.DeliveryIds {
			msg := m.byDelivery[id]
			if msg == nil {
				return nil, fmt.Errorf("%w: snapshot transaction %s holds delivery %d, which is not in the snapshot", ErrCorrupt, st.Tx, id)
			}
			t.acked = append(t.acked, msg)
		}
		m.hold(t, false)
	}
	for _, d := range h.Decisions {
		m.decisions.record(d.Tx, d.Commit, d.At)
	}
	return m, nil
}
