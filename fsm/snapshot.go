package fsm

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
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
	// records and msgs are copies of the member's slab, in slot order:
	// WriteTo orders them by sequence, as sorting a million while applies
	// wait would stall the member for half a second. sessions (by slot)
	// and targets are what the records name.
	records  [][]record
	msgs     [][]*fsmpb.Message
	sessions []string
	targets  []string
	// consumers are the consumers of the delivered messages, by delivery id.
	consumers map[uint64]string
	// readBody reads a body the member put away (SetBodyReader).
	readBody func(ref BodyRef, buf []byte) ([]byte, error)
}

// SetBodyReader gives WriteTo the way to read the bodies the member put
// away: a snapshot holds every body, wherever it is.
func (img *MemberImage) SetBodyReader(read func(ref BodyRef, buf []byte) ([]byte, error)) {
	img.readBody = read
}

// Capture copies the state for a snapshot. It runs while applies wait, so
// it only copies, chunk by chunk: WriteTo orders and encodes
// (BenchmarkMember_Capture).
func (m *Member) Capture() *MemberImage {
	records := make([][]record, len(m.records.chunks))
	msgs := make([][]*fsmpb.Message, len(m.records.chunks))
	for i, c := range m.records.chunks {
		n := min(len(c), int(m.records.used)-i*slabChunk)
		records[i] = slices.Clone(c[:n])
		msgs[i] = slices.Clone(m.records.msgs[i][:n])
	}
	sessions := make([]string, len(m.sessionSlots))
	consumers := make(map[uint64]string)
	for i, s := range m.sessionSlots {
		if s != nil {
			sessions[i] = s.id
			maps.Copy(consumers, s.consumerOf)
		}
	}
	img := &MemberImage{
		header: &fsmpb.MemberSnapshot{
			Applied:        m.applied,
			NextSeq:        m.nextSeq,
			NextDeliveryId: m.nextDelivery,
			Settings:       m.settings,
			MessageCount:   uint64(m.records.live),
			DeadLettered:   m.deadLettered,
			Sealed:         m.sealed,
		},
		records:   records,
		msgs:      msgs,
		sessions:  sessions,
		consumers: consumers,
		// Targets are only appended to: the records copied name none past
		// this length.
		targets: m.targets[:len(m.targets):len(m.targets)],
	}
	if m.counted != (Counters{}) {
		img.header.Counters = m.counted.Proto()
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
		st := &fsmpb.StoredTx{Tx: t.id, Primary: t.primary, Session: t.session, PreparedAt: t.preparedAt, Messages: t.msgs, Publish: t.publish}
		for _, o := range t.out {
			st.Duplicate = append(st.Duplicate, o.Duplicate)
		}
		for _, r := range t.acked {
			st.DeliveryIds = append(st.DeliveryIds, m.rec(r).deliveryID)
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
	type slot struct {
		seq uint64
		r   ref
	}
	order := make([]slot, 0, img.header.MessageCount)
	for i, c := range img.records {
		for j := range c {
			if c[j].has(flagLive) {
				order = append(order, slot{c[j].seq, ref(i*slabChunk + j + 1)})
			}
		}
	}
	slices.SortFunc(order, func(a, b slot) int { return cmp.Compare(a.seq, b.seq) })
	var sm fsmpb.StoredMessage
	// withBody and alone are reused for every message whose body was put
	// away or that its record holds alone: a million of them would
	// otherwise be a million allocations.
	var withBody, alone fsmpb.Message
	var body []byte
	for _, o := range order {
		i := uint32(o.r - 1)
		rec := &img.records[i/slabChunk][i%slabChunk]
		msg := img.msgs[i/slabChunk][i%slabChunk]
		if msg == nil {
			setFromRecord(&alone, rec)
			msg = &alone
		}
		if rec.away.Away() {
			if img.readBody == nil {
				return n, fmt.Errorf("message %s: its body was put away and the image has no body reader", msg.Id)
			}
			var err error
			if body, err = img.readBody(rec.away, body[:0]); err != nil {
				return n, fmt.Errorf("message %s: reading its body: %w", msg.Id, err)
			}
			setWithBody(&withBody, msg, body)
			msg = &withBody
		}
		sm = fsmpb.StoredMessage{Message: msg, Seq: rec.seq, Redelivered: rec.has(flagRedelivered), DeliveryCount: rec.count,
			AvailableAt: rec.availableAt, Dead: rec.has(flagDead), DeliveryId: rec.deliveryID}
		if rec.movingTo != 0 {
			sm.MovingTo = img.targets[rec.movingTo-1]
		}
		if rec.session != 0 {
			sm.Session = img.sessions[rec.session-1]
			sm.Consumer = img.consumers[rec.deliveryID]
		}
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
	sm, err := decodeStoredAliasing(rec)
	if err == nil && sm.Message != nil && sm.Message.Body != nil {
		sm.Message.Body = bytes.Clone(sm.Message.Body)
	}
	return checkStored(sm, err)
}

// DecodeStoredMessageAliasing is DecodeStoredMessage with the message's
// body a slice of rec: for a caller that writes most bodies elsewhere and
// copies those it keeps before rec changes.
func DecodeStoredMessageAliasing(rec []byte) (*fsmpb.StoredMessage, error) {
	return checkStored(decodeStoredAliasing(rec))
}

func checkStored(sm *fsmpb.StoredMessage, err error) (*fsmpb.StoredMessage, error) {
	if err != nil {
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
	m.ids = newIDIndex(int(min(h.MessageCount, maxPresizedMessages)))
	m.applied, m.nextSeq, m.nextDelivery, m.deadLettered, m.sealed = h.Applied, h.NextSeq, h.NextDeliveryId, h.DeadLettered, h.Sealed
	m.counted = CountersOf(h.Counters)
	if h.Settings != nil {
		m.settings = h.Settings
	}
	m.restoreSessionsAndDedup(h)
	// A delivery a prepared transaction holds outlives its session when
	// the session was released: its session is kept apart, unregistered.
	held := map[uint64]bool{}
	for _, t := range h.Txs {
		for _, id := range t.DeliveryIds {
			held[id] = true
		}
	}
	orphans := map[string]*session{}
	consumers := interned{}
	made := make([]ref, 0, min(h.MessageCount, maxPresizedMessages))
	for i := uint64(0); i < h.MessageCount; i++ {
		sm, away, err := next()
		if err != nil {
			return nil, fmt.Errorf("snapshot message %d of %d: %w", i, h.MessageCount, err)
		}
		r, rec := m.newUnindexedRecord(sm.Message, sm.Seq, away)
		made = append(made, r)
		rec.count, rec.availableAt = sm.DeliveryCount, sm.AvailableAt
		rec.set(flagRedelivered, sm.Redelivered)
		rec.set(flagDead, sm.Dead)
		if sm.MovingTo != "" {
			rec.movingTo = m.target(sm.MovingTo)
		}
		m.bytes += rec.size
		m.stored += MessageSize(sm.Message) + int64(away.Len)
		if rec.expiration != 0 {
			m.expiry.ReplaceOrInsert(expiryItem(r, rec))
		}
		switch {
		case sm.Session != "":
		case rec.availableAt != 0:
			m.delayed.ReplaceOrInsert(delayItem(r, rec))
			continue
		case rec.has(flagDead) || rec.movingTo != 0:
			m.aside.ReplaceOrInsert(seqItem(r, rec))
			continue
		default:
			m.pushPending(r, rec)
			continue
		}
		s := m.sessions[sm.Session]
		if s == nil && held[sm.DeliveryId] {
			if s = orphans[sm.Session]; s == nil {
				s = m.newSession(sm.Session, "")
				s.released = true
				orphans[sm.Session] = s
			}
		}
		if s == nil {
			return nil, fmt.Errorf("%w: snapshot message %s is delivered to session %q, which is not in the snapshot", ErrCorrupt, sm.Message.Id, sm.Session)
		}
		rec.session, rec.deliveryID = s.slot+1, sm.DeliveryId
		s.deliveries[rec.deliveryID] = r
		if sm.Consumer != "" {
			s.consumerOf[rec.deliveryID] = consumers.intern(sm.Consumer)
		}
		m.byDelivery[rec.deliveryID] = r
	}
	// Indexed in a pass of their own: while the records are read, the
	// decoders stream the snapshot through the caches, and a lookup into
	// an index of a million ids cost four times as much.
	if dup, ok := m.indexRestored(made); !ok {
		return nil, fmt.Errorf("%w: snapshot holds message %s twice", ErrCorrupt, m.idOf(dup))
	}
	if err := m.restoreTxs(h.Txs); err != nil {
		return nil, err
	}
	for _, d := range h.Decisions {
		m.decisions.record(d.Tx, d.Commit, d.At)
	}
	return m, nil
}

// restoreSessionsAndDedup restores a snapshot header's sessions and dedup
// window.
func (m *Member) restoreSessionsAndDedup(h *fsmpb.MemberSnapshot) {
	for _, s := range h.Sessions {
		ns := m.newSession(s.Id, s.Owner)
		ns.lastRecover, ns.lastRecoverWatermark = s.LastRecover, s.LastRecoverWatermark
		m.sessions[s.Id] = ns
	}
	for _, d := range h.Dedup {
		r := &dedupRecord{dedupID: d.DedupId, messageID: d.MessageId, at: d.At}
		if r.messageID != "" { // "" is a forgotten id, keeping its place in order
			m.dedup.byID[d.DedupId] = r
		}
		m.dedup.order = append(m.dedup.order, r)
	}
}

// restoreTxs restores the prepared transactions of a snapshot, once its
// messages are: each holds sends and deliveries of them.
func (m *Member) restoreTxs(txs []*fsmpb.StoredTx) error {
	for _, st := range txs {
		t := &tx{id: st.Tx, primary: st.Primary, session: st.Session, preparedAt: st.PreparedAt, msgs: st.Messages, publish: st.Publish}
		if len(st.Duplicate) != len(st.Messages) {
			return fmt.Errorf("%w: snapshot transaction %s: %d messages, %d duplicate marks", ErrCorrupt, st.Tx, len(st.Messages), len(st.Duplicate))
		}
		for i, msg := range st.Messages {
			if err := ValidateMessage(msg); err != nil {
				return fmt.Errorf("%w: snapshot transaction %s: %v", ErrCorrupt, st.Tx, err)
			}
			t.out = append(t.out, Enqueued{ID: msg.Id, Duplicate: st.Duplicate[i]})
			if !st.Duplicate[i] {
				t.bytes += m.size(msg, BodyRef{})
			}
		}
		for _, id := range st.DeliveryIds {
			msg := m.byDelivery[id]
			if msg == 0 {
				return fmt.Errorf("%w: snapshot transaction %s holds delivery %d, which is not in the snapshot", ErrCorrupt, st.Tx, id)
			}
			t.acked = append(t.acked, msg)
		}
		m.hold(t, false)
	}
	return nil
}

// interned keeps one copy of each string a restore reads many times (the
// consumer of each delivery of a batch).
type interned map[string]string

func (in interned) intern(s string) string {
	if v, ok := in[s]; ok {
		return v
	}
	in[s] = s
	return s
}
