package fsm

import (
	"fmt"
	"math"

	"github.com/google/btree"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
)

// MaxPriority is the highest message priority; 0 is the lowest and 4 the
// JMS default.
const MaxPriority = 9

// Default member settings, until a Configure command sets others. The dedup
// window follows NATS JetStream's default duplicate window of two minutes.
const (
	DefaultDedupWindowNs = int64(2 * 60 * 1e9)
	DefaultDedupMaxIDs   = 100_000
)

// DefaultSettings returns the settings of a member that was never configured.
func DefaultSettings() *fsmpb.MemberSettings {
	return &fsmpb.MemberSettings{DedupWindowNs: DefaultDedupWindowNs, DedupMaxIds: DefaultDedupMaxIDs}
}

// Member is the state machine of one member of a destination: its messages,
// their pending order (priority, then arrival), their deliveries to sessions,
// and the duplicate-detection window. It is not safe for concurrent use; the
// caller serialises Apply with every read.
type Member struct {
	applied      uint64
	nextSeq      uint64
	nextDelivery uint64
	settings     *fsmpb.MemberSettings

	// records hold the messages (records.go); ids finds them by id.
	records  slab
	ids      idIndex
	pending  [MaxPriority + 1]*btree.BTreeG[item]
	nPending int
	expiry   *btree.BTreeG[item]
	delayed  *btree.BTreeG[item]
	// aside holds the dead and the moving messages, by sequence.
	aside        *btree.BTreeG[item]
	deadLettered uint64
	counted      Counters
	// stored is about what a snapshot writes of the messages held: their
	// MessageSize, whatever the member counts against its limit.
	stored     int64
	sealed     bool
	byDelivery map[uint64]ref
	sessions   map[string]*session
	// sessionSlots are the sessions records name, open or released but
	// holding deliveries; freeSlots the slots to reuse.
	sessionSlots []*session
	freeSlots    []uint32
	// targets are the move targets records name, each once.
	targets     []string
	targetIndex map[string]uint32
	dedup       dedupWindow
	bytes       int64
	// txs are the transactions prepared here; txMsgIDs the ids of their
	// messages; decisions those recorded as a transaction's primary.
	txs       map[string]*tx
	txMsgIDs  map[string]string
	decisions decisions
	// preparedSends and preparedAcks count what the txs hold, for Stats,
	// which the router reads on every send.
	preparedSends, preparedAcks int
	// bodies is nil until TrackBodies; replica-local (bodies.go).
	bodies *bodyTracking
	// fanOut, set by the member's group while it applies a transaction's
	// command, hands a committed publish to the subscriptions' members
	// (tx.publish); nil otherwise.
	fanOut func(msgs []*fsmpb.Message, out []Enqueued, now int64)
}

// NewMember returns an empty member state machine.
func NewMember() *Member {
	m := &Member{
		nextSeq:      1,
		nextDelivery: 1,
		settings:     DefaultSettings(),
		ids:          newIDIndex(0),
		expiry:       btree.NewG(32, byTime),
		delayed:      btree.NewG(32, byTime),
		aside:        btree.NewG(32, bySeq),
		byDelivery:   make(map[uint64]ref),
		sessions:     make(map[string]*session),
		targetIndex:  make(map[string]uint32),
		dedup:        newDedupWindow(),
		txs:          make(map[string]*tx),
		txMsgIDs:     make(map[string]string),
		decisions:    decisions{byTx: make(map[string]*decision)},
	}
	for p := range m.pending {
		m.pending[p] = btree.NewG(32, bySeq)
	}
	return m
}

var memberHandlers = func() map[fsmpb.CommandType]handler[*Member] {
	t := make(map[fsmpb.CommandType]handler[*Member])
	on(t, fsmpb.CommandType_COMMAND_TYPE_ENQUEUE, func() *fsmpb.Enqueue { return new(fsmpb.Enqueue) }, (*Member).enqueue)
	on(t, fsmpb.CommandType_COMMAND_TYPE_DELIVER, func() *fsmpb.Deliver { return new(fsmpb.Deliver) }, (*Member).deliver)
	on(t, fsmpb.CommandType_COMMAND_TYPE_ACK, func() *fsmpb.Ack { return new(fsmpb.Ack) }, (*Member).ack)
	on(t, fsmpb.CommandType_COMMAND_TYPE_RECOVER, func() *fsmpb.Recover { return new(fsmpb.Recover) }, (*Member).recover)
	on(t, fsmpb.CommandType_COMMAND_TYPE_RELEASE, func() *fsmpb.Release { return new(fsmpb.Release) }, (*Member).release)
	on(t, fsmpb.CommandType_COMMAND_TYPE_RETURN, func() *fsmpb.Return { return new(fsmpb.Return) }, (*Member).returnDeliveries)
	on(t, fsmpb.CommandType_COMMAND_TYPE_EXPIRE, func() *fsmpb.Expire { return new(fsmpb.Expire) }, (*Member).expire)
	on(t, fsmpb.CommandType_COMMAND_TYPE_PURGE, func() *fsmpb.Purge { return new(fsmpb.Purge) }, (*Member).purge)
	on(t, fsmpb.CommandType_COMMAND_TYPE_OPEN_SESSION, func() *fsmpb.OpenSession { return new(fsmpb.OpenSession) }, (*Member).openSession)
	on(t, fsmpb.CommandType_COMMAND_TYPE_CONFIGURE, func() *fsmpb.Configure { return new(fsmpb.Configure) }, (*Member).configure)
	on(t, fsmpb.CommandType_COMMAND_TYPE_MOVE, func() *fsmpb.Move { return new(fsmpb.Move) }, (*Member).move)
	on(t, fsmpb.CommandType_COMMAND_TYPE_MOVED, func() *fsmpb.Moved { return new(fsmpb.Moved) }, (*Member).moved)
	on(t, fsmpb.CommandType_COMMAND_TYPE_WAKE, func() *fsmpb.Wake { return new(fsmpb.Wake) }, (*Member).wake)
	on(t, fsmpb.CommandType_COMMAND_TYPE_SEAL, func() *fsmpb.Seal { return new(fsmpb.Seal) }, (*Member).seal)
	on(t, fsmpb.CommandType_COMMAND_TYPE_TX_PREPARE, func() *fsmpb.TxPrepare { return new(fsmpb.TxPrepare) }, (*Member).txPrepare)
	on(t, fsmpb.CommandType_COMMAND_TYPE_TX_DECIDE, func() *fsmpb.TxDecide { return new(fsmpb.TxDecide) }, (*Member).txDecide)
	return t
}()

// Apply applies the log entry at index. It returns one Result per command.
// An entry at or below the last applied index is skipped (nil, nil), so a
// replayed entry is harmless. An error wraps ErrCorrupt: the entry changed
// nothing and the replica must stop. The caller must not modify data: a
// member that tracks its bodies keeps bodies as slices of it until the next
// PutBodiesAway (fsm/DESIGN.md).
func (m *Member) Apply(index uint64, data []byte) ([]Result, error) {
	if index <= m.applied {
		return nil, nil
	}
	handlers := memberHandlers
	if m.bodies != nil {
		handlers = aliasingMemberHandlers
	}
	results, err := applyEntry(m, handlers, data)
	if err != nil {
		return nil, err
	}
	m.applied = index
	return results, nil
}

// Applied is the index of the last entry applied.
func (m *Member) Applied() uint64 { return m.applied }

// ValidateMessage checks the rules every stored message keeps.
func ValidateMessage(msg *fsmpb.Message) error {
	switch {
	case msg == nil:
		return fmt.Errorf("%w: missing message", ErrInvalidMessage)
	case msg.Id == "":
		return fmt.Errorf("%w: empty message id", ErrInvalidMessage)
	case msg.Priority > MaxPriority:
		return fmt.Errorf("%w: priority %d is over %d", ErrInvalidMessage, msg.Priority, MaxPriority)
	case msg.Expiration < 0:
		return fmt.Errorf("%w: negative expiration", ErrInvalidMessage)
	}
	return nil
}

func (m *Member) enqueue(c *fsmpb.Enqueue) Result {
	out, _, err := m.admit(c.Messages, c.Now)
	if err != nil {
		return Result{Err: err}
	}
	m.dedup.evict(c.Now, m.settings.DedupWindowNs)
	m.store(c.Messages, out, c.Now, true)
	return Result{Enqueued: out}
}

// admit checks a batch of messages for storing at now, changing nothing:
// one outcome per message (a dedup id seen within the window, or earlier
// in the batch, makes a duplicate) and the bytes the others add.
func (m *Member) admit(msgs []*fsmpb.Message, now int64) ([]Enqueued, int64, error) {
	out := make([]Enqueued, len(msgs))
	// Ids new in this batch, to catch a batch that repeats an id or a dedup id.
	batchIDs := make(map[string]bool, len(msgs))
	batchDedup := make(map[string]string)
	var add int64
	for i, msg := range msgs {
		if err := ValidateMessage(msg); err != nil {
			return nil, 0, fmt.Errorf("message %d: %w", i, err)
		}
		if d := msg.DedupId; d != "" {
			if id, ok := batchDedup[d]; ok {
				out[i] = Enqueued{ID: id, Duplicate: true}
				continue
			}
			if id, ok := m.dedup.lookup(d, now, m.settings.DedupWindowNs); ok {
				out[i] = Enqueued{ID: id, Duplicate: true}
				continue
			}
			batchDedup[d] = msg.Id
		}
		if m.find(msg.Id) != 0 || batchIDs[msg.Id] || m.txMsgIDs[msg.Id] != "" {
			return nil, 0, fmt.Errorf("%w: %s", ErrDuplicateMessageID, msg.Id)
		}
		batchIDs[msg.Id] = true
		add += m.size(msg, BodyRef{})
		out[i] = Enqueued{ID: msg.Id}
	}
	if m.sealed && len(batchIDs) > 0 {
		return nil, 0, ErrSealed
	}
	if limit := m.settings.MaxBytes; limit > 0 && m.bytes+add > limit {
		return nil, 0, fmt.Errorf("%w: it holds %d bytes of messages, its share of the queue's --max-size is %d, and these add %d: consume or purge some first", ErrMemberFull, m.bytes, limit, add)
	}
	if limit, held := m.settings.MaxMessages, uint64(m.records.live+m.preparedSends); limit > 0 && held+uint64(len(batchIDs)) > limit {
		return nil, 0, fmt.Errorf("%w: it holds %d messages, its share of the queue's --max-messages is %d, and these add %d: consume or purge some first", ErrMemberFull, held, limit, len(batchIDs))
	}
	return out, add, nil
}

// store adds admitted messages but the duplicates, pending; withDedup
// records their dedup ids at now.
func (m *Member) store(msgs []*fsmpb.Message, out []Enqueued, now int64, withDedup bool) {
	for i, msg := range msgs {
		if out[i].Duplicate {
			continue
		}
		r, rec := m.newRecord(msg, m.nextSeq, BodyRef{})
		m.nextSeq++
		m.counted.Sent++
		m.stored += MessageSize(msg)
		m.bytes += rec.size
		m.bodyStored(r, rec)
		m.pushPending(r, rec)
		if rec.expiration != 0 {
			m.expiry.ReplaceOrInsert(expiryItem(r, rec))
		}
		if withDedup && msg.DedupId != "" {
			m.dedup.add(msg.DedupId, msg.Id, now, int(m.settings.DedupMaxIds))
		}
	}
}

func (m *Member) pushPending(r ref, rec *record) {
	m.pending[rec.priority].ReplaceOrInsert(seqItem(r, rec))
	m.nPending++
	m.bodyWaiting(r, rec)
}

func (m *Member) popPending(r ref, rec *record) {
	if _, ok := m.pending[rec.priority].Delete(seqItem(r, rec)); ok {
		m.nPending--
	}
}

func (m *Member) deliver(c *fsmpb.Deliver) Result {
	s := m.sessions[c.Session]
	if s == nil {
		return Result{Err: fmt.Errorf("%w: %q", ErrUnknownSession, c.Session)}
	}
	var out []Delivery
	for _, id := range c.MessageIds {
		r := m.find(id)
		if r == 0 {
			continue
		}
		rec := m.rec(r)
		if !rec.waiting() || rec.expiredAt(c.Now) {
			continue
		}
		m.popPending(r, rec)
		// A delivery may wait in a consumer's buffers long after this
		// batch: it must not keep the entry alive.
		m.ownBody(r, rec)
		m.counted.Delivered++
		if rec.has(flagRedelivered) {
			m.counted.Redelivered++
		}
		rec.count++
		rec.deliveryID = m.nextDelivery
		m.nextDelivery++
		rec.session = s.slot + 1
		s.deliveries[rec.deliveryID] = r
		if c.Consumer != "" {
			s.consumerOf[rec.deliveryID] = c.Consumer
		}
		m.byDelivery[rec.deliveryID] = r
		out = append(out, m.delivery(r, rec))
	}
	return Result{Delivered: out}
}

func (m *Member) delivery(r ref, rec *record) Delivery {
	return Delivery{DeliveryID: rec.deliveryID, Message: m.message(r), Body: rec.away, Redelivered: rec.has(flagRedelivered), DeliveryCount: rec.count,
		Consumer: m.sessionOf(rec).consumerOf[rec.deliveryID]}
}

// remove drops a message from every index.
func (m *Member) remove(r ref) {
	rec := m.rec(r)
	switch {
	case rec.session != 0:
		m.undeliver(rec)
	case rec.availableAt != 0:
		m.delayed.Delete(delayItem(r, rec))
	case rec.has(flagDead) || rec.movingTo != 0:
		m.aside.Delete(seqItem(r, rec))
	default:
		m.popPending(r, rec)
	}
	if rec.expiration != 0 {
		m.expiry.Delete(expiryItem(r, rec))
	}
	m.bytes -= rec.size
	m.stored -= m.storedSize(r, rec)
	m.bodyRemoved(r, rec)
	m.freeRecord(r)
}

// undeliver takes a delivered message from its session.
func (m *Member) undeliver(rec *record) {
	s := m.sessionSlots[rec.session-1]
	delete(s.deliveries, rec.deliveryID)
	delete(s.consumerOf, rec.deliveryID)
	delete(m.byDelivery, rec.deliveryID)
	rec.session, rec.deliveryID = 0, 0
	if s.released && len(s.deliveries) == 0 {
		m.freeSession(s)
	}
}

// requeue takes a message back from its session, marked redelivered: dead
// once delivered max_deliveries times, else delayed if the member has a
// redelivery delay, else pending.
func (m *Member) requeue(r ref, now int64) {
	rec := m.rec(r)
	m.undeliver(rec)
	rec.set(flagRedelivered, true)
	st := m.settings
	switch {
	case st.MaxDeliveries > 0 && rec.count >= st.MaxDeliveries:
		rec.set(flagDead, true)
		m.aside.ReplaceOrInsert(seqItem(r, rec))
	case st.RedeliveryDelayNs > 0:
		rec.availableAt = max(addSaturating(now, redeliveryDelay(st, rec.count)), 1)
		m.delayed.ReplaceOrInsert(delayItem(r, rec))
	default:
		m.pushPending(r, rec)
	}
}

// addSaturating is now+d for d >= 0, stopping at the largest time instead
// of wrapping to the past.
func addSaturating(now, d int64) int64 {
	if now > 0 && d > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + d
}

// redeliveryDelay is the wait before a message delivered count times is
// pending again: the delay, times the backoff for each delivery after the
// first, capped.
func redeliveryDelay(st *fsmpb.MemberSettings, count uint32) int64 {
	d, limit := st.RedeliveryDelayNs, st.RedeliveryMaxDelayNs
	if limit <= 0 {
		limit = 1 << 62
	}
	for i := uint32(1); i < count && st.RedeliveryBackoff > 1 && d < limit; i++ {
		if d > limit/int64(st.RedeliveryBackoff) {
			return limit
		}
		d *= int64(st.RedeliveryBackoff)
	}
	return min(d, limit)
}

func (m *Member) ack(c *fsmpb.Ack) Result {
	s := m.sessions[c.Session]
	if s == nil {
		return Result{Err: fmt.Errorf("%w: %q", ErrUnknownSession, c.Session)}
	}
	var r Result
	for _, id := range c.DeliveryIds {
		msg := s.deliveries[id]
		if msg == 0 || m.rec(msg).has(flagHeld) {
			r.Rejected = append(r.Rejected, id)
			continue
		}
		m.remove(msg)
		r.Acked++
	}
	if c.UpTo != 0 {
		for _, id := range m.deliveryIDs(s, c.UpTo) {
			m.remove(s.deliveries[id])
			r.Acked++
		}
	}
	m.counted.Acknowledged += uint64(r.Acked)
	return r
}

func (m *Member) recover(c *fsmpb.Recover) Result {
	s := m.sessions[c.Session]
	if s == nil {
		return Result{Err: fmt.Errorf("%w: %q", ErrUnknownSession, c.Session)}
	}
	if c.Attempt != 0 && c.Attempt <= s.lastRecover {
		return Result{Watermark: s.lastRecoverWatermark}
	}
	returned := m.requeueAll(s, c.Now)
	if c.Attempt != 0 {
		s.lastRecover, s.lastRecoverWatermark = c.Attempt, m.nextDelivery
	}
	return Result{Returned: returned, Watermark: m.nextDelivery}
}

// release of a session that is not open succeeds and does nothing: a
// session may be released both by its front-end and by a new leader's sweep.
func (m *Member) release(c *fsmpb.Release) Result {
	s := m.sessions[c.Session]
	if s == nil {
		return Result{}
	}
	n := m.requeueAll(s, c.Now)
	m.releaseSession(s)
	return Result{Returned: n}
}

func (m *Member) returnDeliveries(c *fsmpb.Return) Result {
	s := m.sessions[c.Session]
	if s == nil {
		return Result{Err: fmt.Errorf("%w: %q", ErrUnknownSession, c.Session)}
	}
	ids := c.DeliveryIds
	if c.Consumer != "" {
		ids = m.consumerDeliveries(s, c.Consumer, c.After)
	}
	var r Result
	for _, id := range ids {
		msg := s.deliveries[id]
		if msg == 0 || m.rec(msg).has(flagHeld) {
			r.Rejected = append(r.Rejected, id)
			continue
		}
		if c.Unseen {
			m.unsee(msg)
		} else {
			m.requeue(msg, c.Now)
		}
		r.Returned++
	}
	return r
}

// unsee takes a message back from its session as if the delivery had not
// been made: the consumer never saw it, so it is neither counted nor
// marked, and it waits pending in its old place.
func (m *Member) unsee(r ref) {
	rec := m.rec(r)
	m.undeliver(rec)
	if rec.count > 0 {
		rec.count--
	}
	m.pushPending(r, rec)
}

func (m *Member) expire(c *fsmpb.Expire) Result {
	var r Result
	for _, id := range c.MessageIds {
		// A message a prepared transaction holds expires once decided.
		if msg := m.find(id); msg != 0 && !m.rec(msg).has(flagHeld) && m.rec(msg).expiredAt(c.Now) {
			m.remove(msg)
			r.Removed++
		}
	}
	m.counted.Expired += uint64(r.Removed)
	return r
}

// purge removes what waits for delivery: pending and delayed messages.
// Dead and moving ones finish their move.
func (m *Member) purge(*fsmpb.Purge) Result {
	var victims []ref
	for _, t := range append(m.pending[:], m.delayed) {
		t.Ascend(func(it item) bool { victims = append(victims, it.r); return true })
	}
	for _, r := range victims {
		m.remove(r)
	}
	return Result{Removed: len(victims)}
}

func (m *Member) openSession(c *fsmpb.OpenSession) Result {
	if c.Session == "" || c.Owner == "" {
		return Result{Err: fmt.Errorf("%w: open session needs a session id and an owner", ErrMalformed)}
	}
	if s := m.sessions[c.Session]; s != nil {
		if s.owner != c.Owner {
			return Result{Err: fmt.Errorf("%w: %q is held by %q", ErrSessionOwned, c.Session, s.owner)}
		}
		return Result{}
	}
	m.sessions[c.Session] = m.newSession(c.Session, c.Owner)
	return Result{}
}

func (m *Member) configure(c *fsmpb.Configure) Result {
	st := c.Settings
	if st == nil || st.MaxBytes < 0 || st.DedupWindowNs < 0 || st.RedeliveryDelayNs < 0 || st.RedeliveryMaxDelayNs < 0 {
		return Result{Err: fmt.Errorf("%w: limits must be present and not negative", ErrInvalidSettings)}
	}
	if _, err := selector.Parse(st.Selector); err != nil {
		return Result{Err: fmt.Errorf("%w: %v", ErrInvalidSettings, err)}
	}
	if st.CountMemory != m.settings.CountMemory && (m.records.live > 0 || len(m.txs) > 0) {
		// What is held keeps counting as it was stored (count_memory).
		st = proto.CloneOf(st)
		st.CountMemory = m.settings.CountMemory
	}
	m.settings = st
	m.dedup.trim(int(st.DedupMaxIds))
	m.nextDelivery = max(m.nextDelivery, c.FirstDeliveryId)
	return Result{}
}
