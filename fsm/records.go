package fsm

import (
	"hash/maphash"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member's messages live in records that hold no pointers, in chunks the
// collector does not scan, found through maps and trees of plain numbers:
// a million waiting messages are then some 72,000 objects to the collector,
// mostly tree nodes, instead of 3 million and the pointers between them,
// which it followed on every cycle (fsm/DESIGN.md, "The state holds no
// pointer per message"). A message the record cannot hold whole (a body
// in memory, properties, a dedup id other than its id, an id over
// maxInlineID bytes, fields of a newer version, counts it came with) keeps
// its *fsmpb.Message beside the record, in the slab's msgs.

// ref names a record in a member's slab; 0 names none.
type ref uint32

// maxInlineID is the longest id a record holds; it makes a record 128
// bytes, and the ids Cairn's clients make are 35 ("ID:" and 32 hex digits).
const maxInlineID = 49

// slabChunk is the number of records per chunk: 512 KiB, so that a million
// records are 245 chunks. The first chunk starts at firstChunk records and
// doubles up to it, so that a short queue costs little.
const (
	slabChunk  = 4096
	firstChunk = 16
)

type recordFlags uint8

const (
	// flagLive: the slot holds a message.
	flagLive recordFlags = 1 << iota
	flagRedelivered
	// flagAliased: the body (of the message in msgs) is a slice of the
	// entry it came in (alias.go).
	flagAliased
	// flagDead: delivered max_deliveries times, waiting to move to the
	// dead-letter queue.
	flagDead
	// flagHeld: a prepared transaction acknowledges this delivery; it is
	// neither acknowledged nor returned until decided.
	flagHeld
	// flagFull: the slab's msgs hold the message.
	flagFull
	// flagDedupIsID: the message's dedup id is its id, as idempotent
	// producers send it.
	flagDedupIsID
)

// record is a stored message and its delivery state.
type record struct {
	seq uint64
	// deliveryID and session are set while the message is delivered;
	// session is the session's slot (sessionSlots) plus one.
	deliveryID uint64
	size       int64
	expiration int64
	// availableAt is set while the message waits out a redelivery delay.
	availableAt int64
	enqueuedAt  int64
	// away is where the member put the body (bodies.go); replica-local.
	away    BodyRef
	count   uint32
	session uint32
	// movingTo is the member the message moves to, as an index into
	// targets plus one.
	movingTo uint32
	priority uint8
	flags    recordFlags
	idLen    uint8
	id       [maxInlineID]byte
}

func (r *record) has(f recordFlags) bool { return r.flags&f != 0 }

func (r *record) set(f recordFlags, on bool) {
	if on {
		r.flags |= f
	} else {
		r.flags &^= f
	}
}

// waiting is true for a message in none of the other states: pending (or
// expired and not yet removed).
func (r *record) waiting() bool {
	return r.session == 0 && r.availableAt == 0 && !r.has(flagDead) && r.movingTo == 0
}

func (r *record) expiredAt(now int64) bool {
	return r.expiration != 0 && r.expiration <= now
}

// slab holds the records. A freed slot is reused; the chunks but the first
// are let go when the member holds no message. A *record is valid until
// the next alloc, which may move the first chunk.
type slab struct {
	chunks [][]record
	// msgs are parallel to chunks: the messages of the records that do not
	// hold theirs alone. Arrays rather than a map, so that Capture copies
	// them as it copies the records; the collector scans their slots,
	// nil for every message put away (BenchmarkMember_CollectBesideAMillion).
	msgs [][]*fsmpb.Message
	free []ref
	used uint32
	live int
}

func (s *slab) at(r ref) *record {
	i := uint32(r - 1)
	return &s.chunks[i/slabChunk][i%slabChunk]
}

func (s *slab) msgAt(r ref) **fsmpb.Message {
	i := uint32(r - 1)
	return &s.msgs[i/slabChunk][i%slabChunk]
}

func (s *slab) alloc() ref {
	s.live++
	if n := len(s.free); n > 0 {
		r := s.free[n-1]
		s.free = s.free[:n-1]
		return r
	}
	switch {
	case len(s.chunks) == 0:
		s.startChunks()
	case len(s.chunks) == 1 && int(s.used) == len(s.chunks[0]) && s.used < slabChunk:
		s.chunks[0] = append(s.chunks[0], make([]record, len(s.chunks[0]))...)
		s.msgs[0] = append(s.msgs[0], make([]*fsmpb.Message, len(s.msgs[0]))...)
	case int(s.used) == len(s.chunks)*slabChunk:
		s.chunks = append(s.chunks, make([]record, slabChunk))
		s.msgs = append(s.msgs, make([]*fsmpb.Message, slabChunk))
	}
	s.used++
	return ref(s.used)
}

// release frees r; it reports whether the slab let chunks go.
func (s *slab) release(r ref) bool {
	*s.at(r) = record{}
	*s.msgAt(r) = nil
	s.live--
	if s.live > 0 {
		s.free = append(s.free, r)
		return false
	}
	// Every freed record is zero, so the first chunk is as new.
	s.used = 0
	s.free = s.free[:0]
	if len(s.chunks) <= 1 {
		return false
	}
	s.startChunks()
	s.free = nil
	return true
}

func (s *slab) startChunks() {
	s.chunks = [][]record{make([]record, firstChunk)}
	s.msgs = [][]*fsmpb.Message{make([]*fsmpb.Message, firstChunk)}
}

// item is an entry of the member's trees: the key it is ordered by (a
// time, or 0), the sequence that breaks ties, and the record.
type item struct {
	at  int64
	seq uint64
	r   ref
}

func bySeq(a, b item) bool { return a.seq < b.seq }

func byTime(a, b item) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func seqItem(r ref, rec *record) item    { return item{seq: rec.seq, r: r} }
func expiryItem(r ref, rec *record) item { return item{at: rec.expiration, seq: rec.seq, r: r} }
func delayItem(r ref, rec *record) item  { return item{at: rec.availableAt, seq: rec.seq, r: r} }

// idIndex finds records by message id through a 64-bit hash of the id,
// which keeps the map free of pointers; an id whose hash another id holds
// goes to collided, which is almost always empty.
type idIndex struct {
	seed maphash.Seed
	// mask is all ones but in tests, which narrow the hash to make ids
	// collide.
	mask     uint64
	byHash   map[uint64]ref
	collided map[string]ref
}

func newIDIndex(size int) idIndex {
	return idIndex{seed: maphash.MakeSeed(), mask: ^uint64(0), byHash: make(map[uint64]ref, size), collided: make(map[string]ref)}
}

func (x *idIndex) hash(id string) uint64 { return maphash.String(x.seed, id) & x.mask }

// hashBytes is hash of the id b holds, without building the string.
func (x *idIndex) hashBytes(b []byte) uint64 { return maphash.Bytes(x.seed, b) & x.mask }

// remake empties the index into new maps: Go's maps do not shrink.
func (x *idIndex) remake() {
	x.byHash, x.collided = make(map[uint64]ref), make(map[string]ref)
}

// rec is the record r names.
func (m *Member) rec(r ref) *record { return m.records.at(r) }

// idOf is the id of the message r names.
func (m *Member) idOf(r ref) string {
	rec := m.rec(r)
	if rec.has(flagFull) {
		return m.full(r).Id
	}
	return string(rec.id[:rec.idLen])
}

// full is the message of a record that does not hold it alone, else nil.
func (m *Member) full(r ref) *fsmpb.Message { return *m.records.msgAt(r) }

// idIs compares without building the id.
func (m *Member) idIs(r ref, id string) bool {
	rec := m.rec(r)
	if rec.has(flagFull) {
		return m.full(r).Id == id
	}
	return string(rec.id[:rec.idLen]) == id
}

// find returns the record of the message with id, or 0.
func (m *Member) find(id string) ref {
	if r, ok := m.ids.byHash[m.ids.hash(id)]; ok && m.idIs(r, id) {
		return r
	}
	return m.ids.collided[id]
}

func (m *Member) index(id string, r ref) {
	h := m.ids.hash(id)
	if _, taken := m.ids.byHash[h]; taken {
		m.ids.collided[id] = r
		return
	}
	m.ids.byHash[h] = r
}

// indexRestored indexes records a restore made without indexing them, in
// one pass once they are all made; false if two have the same id.
func (m *Member) indexRestored(rs []ref) (dup ref, ok bool) {
	for _, r := range rs {
		h := m.idHash(r)
		if _, taken := m.ids.byHash[h]; !taken {
			m.ids.byHash[h] = r
			continue
		}
		id := m.idOf(r)
		if m.find(id) != 0 {
			return r, false
		}
		m.ids.collided[id] = r
	}
	return 0, true
}

// idHash is the index's hash of r's id, without building the id.
func (m *Member) idHash(r ref) uint64 {
	rec := m.rec(r)
	if rec.has(flagFull) {
		return m.ids.hash(m.full(r).Id)
	}
	return m.ids.hashBytes(rec.id[:rec.idLen])
}

func (m *Member) unindex(r ref) {
	h := m.idHash(r)
	if m.ids.byHash[h] == r {
		delete(m.ids.byHash, h)
		return
	}
	delete(m.ids.collided, m.idOf(r))
}

// holdsWhole reports whether a record can stand for msg without the
// message: everything but its id, priority, expiration and enqueue time is
// empty, or the dedup id its id, and the id fits.
func holdsWhole(msg *fsmpb.Message) bool {
	return len(msg.Id) <= maxInlineID && len(msg.Body) == 0 && len(msg.Properties) == 0 && (msg.DedupId == "" || msg.DedupId == msg.Id) &&
		msg.DeliveryCount == 0 && !msg.Redelivered && len(msg.TypedProperties) == 0 &&
		msg.CorrelationId == "" && msg.Type == "" && msg.ReplyTo == "" && len(msg.ProtoReflect().GetUnknown()) == 0
}

// newRecord stores msg in a new record with sequence seq, indexed by id,
// its body at away when the caller took it out of msg.
func (m *Member) newRecord(msg *fsmpb.Message, seq uint64, away BodyRef) (ref, *record) {
	r, rec := m.newUnindexedRecord(msg, seq, away)
	m.index(msg.Id, r)
	return r, rec
}

// newUnindexedRecord is newRecord for a restore, which indexes its records
// once they are all made (indexRestored).
func (m *Member) newUnindexedRecord(msg *fsmpb.Message, seq uint64, away BodyRef) (ref, *record) {
	r := m.records.alloc()
	rec := m.rec(r)
	*rec = record{seq: seq, size: m.size(msg, away), expiration: msg.Expiration, enqueuedAt: msg.EnqueuedAt,
		away: away, count: msg.DeliveryCount, priority: uint8(msg.Priority), flags: flagLive}
	rec.set(flagRedelivered, msg.Redelivered)
	m.setMessage(r, rec, msg)
	return r, rec
}

// setMessage makes msg the record's message: in the record alone when it
// can hold it, else beside it in the slab's msgs.
func (m *Member) setMessage(r ref, rec *record, msg *fsmpb.Message) {
	if holdsWhole(msg) {
		rec.idLen = uint8(copy(rec.id[:], msg.Id))
		rec.set(flagDedupIsID, msg.DedupId != "")
		rec.set(flagFull, false)
		*m.records.msgAt(r) = nil
		return
	}
	rec.idLen = 0
	rec.set(flagFull, true)
	*m.records.msgAt(r) = msg
}

// freeRecord drops a record and its message.
func (m *Member) freeRecord(r ref) {
	m.unindex(r)
	if m.records.release(r) {
		m.ids.remake()
	}
}

// message returns the message r names. One the record holds alone is built
// anew: callers may keep it, and must not modify it.
func (m *Member) message(r ref) *fsmpb.Message {
	rec := m.rec(r)
	if rec.has(flagFull) {
		return m.full(r)
	}
	msg := new(fsmpb.Message)
	setFromRecord(msg, rec)
	return msg
}

// setFromRecord makes dst the message a record holds alone.
func setFromRecord(dst *fsmpb.Message, rec *record) {
	*dst = fsmpb.Message{Id: string(rec.id[:rec.idLen]), Priority: uint32(rec.priority), Expiration: rec.expiration, EnqueuedAt: rec.enqueuedAt}
	if rec.has(flagDedupIsID) {
		dst.DedupId = dst.Id
	}
}

// body is the body the state holds for r, nil if none or put away.
func (m *Member) body(r ref) []byte {
	if msg := m.full(r); msg != nil {
		return msg.Body
	}
	return nil
}

// stamped names a record and the message it held when named: a slot can
// hold another message later.
type stamped struct {
	r   ref
	seq uint64
}

// holds reports whether the slot still holds the message it was stamped
// with.
func (m *Member) holds(s stamped) bool {
	if uint32(s.r) > m.records.used {
		return false
	}
	rec := m.rec(s.r)
	return rec.has(flagLive) && rec.seq == s.seq
}
