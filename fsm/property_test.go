package fsm_test

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// The property test runs random command sequences against a Member and a
// reference model written from the commands' documentation, and after every
// step checks that the two agree and that promises 2 and 3 hold, judged
// from what the Member itself reported, and that no message is lost: every
// message ever stored is exactly one of pending, delivered, delayed, dead,
// moving, acked, expired, purged or moved. Promise 4 (transactions) has its
// own property test, TestProperty_Transactions.
//
// Reproduce a failure with the seed rapid prints, e.g.
//
//	go test ./fsm/ -run TestProperty_MemberAgainstModel -rapid.seed=123

// ---- the reference model ----

type modelMsg struct {
	msg         *fsmpb.Message
	seq         uint64
	size        int64
	redelivered bool
	count       uint32
	session     string // "" while not delivered
	consumer    string // the session's consumer it was delivered to
	deliveryID  uint64
	availableAt int64  // set while delayed
	dead        bool   // delivered max_deliveries times
	movingTo    string // set while moving
}

// waiting: pending, in no other state.
func (m *modelMsg) waiting() bool {
	return m.session == "" && m.availableAt == 0 && !m.dead && m.movingTo == ""
}

func (m *modelMsg) expiredAt(now int64) bool {
	return m.msg.Expiration != 0 && m.msg.Expiration <= now
}

type modelSession struct {
	owner      string
	deliveries map[uint64]string // delivery id -> message id
}

type modelDedup struct {
	dedupID, msgID string
	at             int64
}

type model struct {
	msgs         map[string]*modelMsg
	sessions     map[string]*modelSession
	nextSeq      uint64
	nextDelivery uint64
	maxBytes     int64
	window       int64 // 0: ids are forgotten by count only
	maxIDs       int   // 0: no id is remembered
	dedup        []modelDedup
	bytes        int64
	// Redelivery settings, and the dead messages moved, ever.
	maxDeliveries uint32
	delay         int64
	backoff       uint32
	maxDelay      int64 // 0: no cap
	deadLettered  uint64
}

func newModel() *model {
	return &model{
		msgs:         make(map[string]*modelMsg),
		sessions:     make(map[string]*modelSession),
		nextSeq:      1,
		nextDelivery: 1,
		window:       fsm.DefaultDedupWindowNs,
		maxIDs:       fsm.DefaultDedupMaxIDs,
	}
}

func sizeOf(m *fsmpb.Message) int64 {
	n := int64(len(m.Body))
	for k, v := range m.Properties {
		n += int64(len(k) + len(v))
	}
	return n
}

// remembered finds the message stored under a dedup id still in the window.
func (md *model) remembered(dedupID string, now int64) (string, bool) {
	for i := len(md.dedup) - 1; i >= 0; i-- {
		r := md.dedup[i]
		if r.dedupID != dedupID {
			continue
		}
		if md.window > 0 && r.at <= now-md.window {
			return "", false
		}
		return r.msgID, true
	}
	return "", false
}

func (md *model) trimDedup(n int) {
	if len(md.dedup) > n {
		md.dedup = slices.Clone(md.dedup[len(md.dedup)-max(n, 0):])
	}
}

func (md *model) enqueue(c *fsmpb.Enqueue) fsm.Result {
	out := make([]fsm.Enqueued, len(c.Messages))
	ids := map[string]bool{}
	dedups := map[string]string{}
	var add int64
	for i, m := range c.Messages {
		if m.Id == "" || m.Priority > fsm.MaxPriority || m.Expiration < 0 {
			return fsm.Result{Err: fsm.ErrInvalidMessage}
		}
		if m.DedupId != "" {
			if id, ok := dedups[m.DedupId]; ok {
				out[i] = fsm.Enqueued{ID: id, Duplicate: true}
				continue
			}
			if id, ok := md.remembered(m.DedupId, c.Now); ok {
				out[i] = fsm.Enqueued{ID: id, Duplicate: true}
				continue
			}
			dedups[m.DedupId] = m.Id
		}
		if md.msgs[m.Id] != nil || ids[m.Id] {
			return fsm.Result{Err: fsm.ErrDuplicateMessageID}
		}
		ids[m.Id] = true
		add += sizeOf(m)
		out[i] = fsm.Enqueued{ID: m.Id}
	}
	if md.maxBytes > 0 && md.bytes+add > md.maxBytes {
		return fsm.Result{Err: fsm.ErrMemberFull}
	}
	// Forget the ids older than the window (time only moves forward here,
	// so they are the oldest).
	for len(md.dedup) > 0 && md.window > 0 && md.dedup[0].at <= c.Now-md.window {
		md.dedup = md.dedup[1:]
	}
	for i, m := range c.Messages {
		if out[i].Duplicate {
			continue
		}
		// A moved message keeps the count and mark it carries.
		md.msgs[m.Id] = &modelMsg{msg: proto.Clone(m).(*fsmpb.Message), seq: md.nextSeq, size: sizeOf(m),
			count: m.DeliveryCount, redelivered: m.Redelivered}
		md.nextSeq++
		md.bytes += sizeOf(m)
		if m.DedupId != "" && md.maxIDs > 0 {
			md.trimDedup(md.maxIDs - 1)
			md.dedup = append(md.dedup, modelDedup{m.DedupId, m.Id, c.Now})
		}
	}
	return fsm.Result{Enqueued: out}
}

func (md *model) deliver(c *fsmpb.Deliver) fsm.Result {
	s := md.sessions[c.Session]
	if s == nil {
		return fsm.Result{Err: fsm.ErrUnknownSession}
	}
	var r fsm.Result
	for _, id := range c.MessageIds {
		m := md.msgs[id]
		if m == nil || !m.waiting() || m.expiredAt(c.Now) {
			continue
		}
		m.count++
		m.session, m.consumer, m.deliveryID = c.Session, c.Consumer, md.nextDelivery
		md.nextDelivery++
		s.deliveries[m.deliveryID] = id
		r.Delivered = append(r.Delivered, fsm.Delivery{DeliveryID: m.deliveryID, Message: m.msg, Redelivered: m.redelivered, DeliveryCount: m.count, Consumer: c.Consumer})
	}
	return r
}

func (md *model) remove(id string) {
	m := md.msgs[id]
	if m.session != "" {
		delete(md.sessions[m.session].deliveries, m.deliveryID)
	}
	md.bytes -= m.size
	delete(md.msgs, id)
}

// requeue takes a delivery back at now: dead once delivered max_deliveries
// times (when there is a maximum), else delayed when there is a delay, else
// pending; marked redelivered in every case.
func (md *model) requeue(id string, now int64) {
	m := md.msgs[id]
	delete(md.sessions[m.session].deliveries, m.deliveryID)
	m.session, m.consumer, m.deliveryID, m.redelivered = "", "", 0, true
	switch {
	case md.maxDeliveries > 0 && m.count >= md.maxDeliveries:
		m.dead = true
	case md.delay > 0:
		m.availableAt = now + md.delayFor(m.count)
	}
}

// delayFor is the redelivery delay of a message delivered count times: the
// delay times the backoff for every delivery after the first, at most the
// cap (0: none).
func (md *model) delayFor(count uint32) int64 {
	d := md.delay
	for i := uint32(1); i < count; i++ {
		if md.maxDelay > 0 && d >= md.maxDelay {
			break
		}
		if md.backoff > 1 {
			if d > math.MaxInt64/int64(md.backoff)/4 {
				// The test's delays, backoffs and counts are kept small.
				panic(fmt.Sprintf("model: delay %d x %d overflows", d, md.backoff))
			}
			d *= int64(md.backoff)
		}
	}
	if md.maxDelay > 0 {
		d = min(d, md.maxDelay)
	}
	return d
}

func sortedKeys[V any](m map[uint64]V) []uint64 { return slices.Sorted(maps.Keys(m)) }

func (md *model) ack(c *fsmpb.Ack) fsm.Result {
	s := md.sessions[c.Session]
	if s == nil {
		return fsm.Result{Err: fsm.ErrUnknownSession}
	}
	var r fsm.Result
	for _, d := range c.DeliveryIds {
		id, ok := s.deliveries[d]
		if !ok {
			r.Rejected = append(r.Rejected, d)
			continue
		}
		md.remove(id)
		r.Acked++
	}
	if c.UpTo != 0 {
		for _, d := range sortedKeys(s.deliveries) {
			if d <= c.UpTo {
				md.remove(s.deliveries[d])
				r.Acked++
			}
		}
	}
	return r
}

func (md *model) requeueAll(s *modelSession, now int64) int {
	ds := sortedKeys(s.deliveries)
	for _, d := range ds {
		md.requeue(s.deliveries[d], now)
	}
	return len(ds)
}

func (md *model) recover(c *fsmpb.Recover) fsm.Result {
	s := md.sessions[c.Session]
	if s == nil {
		return fsm.Result{Err: fsm.ErrUnknownSession}
	}
	return fsm.Result{Returned: md.requeueAll(s, c.Now), Watermark: md.nextDelivery}
}

func (md *model) release(c *fsmpb.Release) fsm.Result {
	s := md.sessions[c.Session]
	if s == nil {
		return fsm.Result{}
	}
	n := md.requeueAll(s, c.Now)
	delete(md.sessions, c.Session)
	return fsm.Result{Returned: n}
}

// consumerDeliveries are the delivery ids of session s to consumer above
// after, ascending.
func (md *model) consumerDeliveries(s *modelSession, consumer string, after uint64) []uint64 {
	var out []uint64
	for _, d := range sortedKeys(s.deliveries) {
		if d > after && md.msgs[s.deliveries[d]].consumer == consumer {
			out = append(out, d)
		}
	}
	return out
}

func (md *model) giveBack(c *fsmpb.Return) fsm.Result {
	s := md.sessions[c.Session]
	if s == nil {
		return fsm.Result{Err: fsm.ErrUnknownSession}
	}
	var r fsm.Result
	ids := c.DeliveryIds
	if c.Consumer != "" {
		ids = md.consumerDeliveries(s, c.Consumer, c.After)
	}
	for _, d := range ids {
		id, ok := s.deliveries[d]
		if !ok {
			r.Rejected = append(r.Rejected, d)
			continue
		}
		if c.Unseen {
			// As if never delivered: no count, no mark, pending again.
			m := md.msgs[id]
			delete(s.deliveries, d)
			m.session, m.consumer, m.deliveryID = "", "", 0
			m.count--
		} else {
			md.requeue(id, c.Now)
		}
		r.Returned++
	}
	return r
}

func (md *model) expire(c *fsmpb.Expire) fsm.Result {
	var r fsm.Result
	for _, id := range c.MessageIds {
		if m := md.msgs[id]; m != nil && m.expiredAt(c.Now) {
			md.remove(id)
			r.Removed++
		}
	}
	return r
}

// purge removes what waits for delivery: pending and delayed messages.
func (md *model) purge() fsm.Result {
	var r fsm.Result
	for id, m := range md.msgs {
		if m.session == "" && !m.dead && m.movingTo == "" {
			md.remove(id)
			r.Removed++
		}
	}
	return r
}

func (md *model) openSession(c *fsmpb.OpenSession) fsm.Result {
	if c.Session == "" || c.Owner == "" {
		return fsm.Result{Err: fsm.ErrMalformed}
	}
	if s := md.sessions[c.Session]; s != nil {
		if s.owner != c.Owner {
			return fsm.Result{Err: fsm.ErrSessionOwned}
		}
		return fsm.Result{}
	}
	md.sessions[c.Session] = &modelSession{owner: c.Owner, deliveries: map[uint64]string{}}
	return fsm.Result{}
}

func (md *model) configure(c *fsmpb.Configure) fsm.Result {
	s := c.Settings
	if s == nil || s.MaxBytes < 0 || s.DedupWindowNs < 0 || s.RedeliveryDelayNs < 0 || s.RedeliveryMaxDelayNs < 0 {
		return fsm.Result{Err: fsm.ErrInvalidSettings}
	}
	md.maxBytes, md.window, md.maxIDs = s.MaxBytes, s.DedupWindowNs, int(s.DedupMaxIds)
	md.maxDeliveries, md.delay, md.backoff, md.maxDelay = s.MaxDeliveries, s.RedeliveryDelayNs, s.RedeliveryBackoff, s.RedeliveryMaxDelayNs
	md.trimDedup(md.maxIDs)
	return fsm.Result{}
}

// move takes waiting and dead messages out of delivery, to a member NAME#I.
func (md *model) move(c *fsmpb.Move) fsm.Result {
	if _, member, err := fsm.ParseAddress(c.Target); err != nil || member < 0 {
		return fsm.Result{Err: fsm.ErrMalformed}
	}
	var r fsm.Result
	for _, id := range c.MessageIds {
		m := md.msgs[id]
		if m == nil || m.session != "" || m.availableAt != 0 || m.movingTo != "" {
			continue
		}
		m.movingTo = c.Target
		r.Moved++
	}
	return r
}

// moved removes moving messages, counting the dead ones as dead-lettered.
func (md *model) moved(c *fsmpb.Moved) fsm.Result {
	var r fsm.Result
	for _, id := range c.MessageIds {
		if m := md.msgs[id]; m != nil && m.movingTo != "" {
			if m.dead {
				md.deadLettered++
			}
			md.remove(id)
			r.Removed++
		}
	}
	return r
}

// wake makes the delayed messages due at now pending.
func (md *model) wake(c *fsmpb.Wake) fsm.Result {
	var r fsm.Result
	for _, m := range md.msgs {
		if m.availableAt != 0 && m.availableAt <= c.Now {
			m.availableAt = 0
			r.Returned++
		}
	}
	return r
}

func (md *model) apply(body proto.Message) fsm.Result {
	switch c := body.(type) {
	case *fsmpb.Enqueue:
		return md.enqueue(c)
	case *fsmpb.Deliver:
		return md.deliver(c)
	case *fsmpb.Ack:
		return md.ack(c)
	case *fsmpb.Recover:
		return md.recover(c)
	case *fsmpb.Release:
		return md.release(c)
	case *fsmpb.Return:
		return md.giveBack(c)
	case *fsmpb.Expire:
		return md.expire(c)
	case *fsmpb.Purge:
		return md.purge()
	case *fsmpb.OpenSession:
		return md.openSession(c)
	case *fsmpb.Configure:
		return md.configure(c)
	case *fsmpb.Move:
		return md.move(c)
	case *fsmpb.Moved:
		return md.moved(c)
	case *fsmpb.Wake:
		return md.wake(c)
	}
	panic(fmt.Sprintf("no model for %T", body))
}

// pendingOrder is the model's delivery order at now.
func (md *model) pendingOrder(now int64) []string {
	var ms []*modelMsg
	for _, m := range md.msgs {
		if m.waiting() && !m.expiredAt(now) {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b *modelMsg) int {
		if c := cmp.Compare(b.msg.Priority, a.msg.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	ids := []string{}
	for _, m := range ms {
		ids = append(ids, m.msg.Id)
	}
	return ids
}

func (md *model) expiredBy(now int64) []string {
	var ms []*modelMsg
	for _, m := range md.msgs {
		if m.expiredAt(now) {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b *modelMsg) int {
		if c := cmp.Compare(a.msg.Expiration, b.msg.Expiration); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.msg.Id)
	}
	return ids
}

// aside lists the dead and the moving messages, by sequence.
func (md *model) aside() []*modelMsg {
	var ms []*modelMsg
	for _, m := range md.msgs {
		if m.dead || m.movingTo != "" {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b *modelMsg) int { return cmp.Compare(a.seq, b.seq) })
	return ms
}

// nextWake is the earliest end of a redelivery delay, 0 if none.
func (md *model) nextWake() int64 {
	var next int64
	for _, m := range md.msgs {
		if m.availableAt != 0 && (next == 0 || m.availableAt < next) {
			next = m.availableAt
		}
	}
	return next
}

// ---- the machine under test ----

var (
	propSessions = []string{"s1", "s2", "s3"}
	propOwners   = map[string]string{"s1": "fe-1", "s2": "fe-1", "s3": "fe-2"}
)

type propMachine struct {
	f   *member
	md  *model
	now int64
	// away gets every entry f gets, and puts its bodies away.
	away *awayShadow

	nextID  int
	sent    []*fsmpb.Message // every message ever sent, for resends
	known   []string         // every message id ever used
	isKnown map[string]bool
	history []replay // recent applied entries, for replays

	// What the Member reported, for the promises.
	acked     map[string]bool   // acknowledged, and not stored again since
	lastCount map[string]uint32 // delivery count last reported per message
	stored    map[string]bool   // stored, from the Enqueue results and removals seen
	// Where the messages no longer stored went: acked, expired, purged or
	// moved, by id (the last time the id was stored); and how many went
	// each way and how many were ever stored, to account for every one.
	fate     map[string]string
	fates    map[string]int
	enqueued int
}

type replay struct {
	index uint64
	data  []byte
}

func newPropMachine(t *rapid.T) *propMachine {
	return &propMachine{
		f:         newMember(t),
		md:        newModel(),
		away:      newAwayShadow(),
		now:       1000,
		isKnown:   map[string]bool{},
		acked:     map[string]bool{},
		lastCount: map[string]uint32{},
		stored:    map[string]bool{},
		fate:      map[string]string{},
		fates:     map[string]int{},
	}
}

func (p *propMachine) know(id string) {
	if !p.isKnown[id] {
		p.isKnown[id] = true
		p.known = append(p.known, id)
	}
}

// lookupAll is the Member's view of every message id ever used.
func (p *propMachine) lookupAll() map[string]fsm.MessageState {
	out := make(map[string]fsm.MessageState)
	for _, id := range p.known {
		if st, ok := p.f.m.Lookup(id); ok {
			out[id] = st
		}
	}
	return out
}

func errClass(err error) error {
	for _, e := range []error{fsm.ErrUnknownSession, fsm.ErrSessionOwned, fsm.ErrDuplicateMessageID, fsm.ErrMemberFull,
		fsm.ErrInvalidMessage, fsm.ErrMalformed, fsm.ErrInvalidSettings} {
		if errors.Is(err, e) {
			return e
		}
	}
	return err
}

// sameMessage is proto.Equal for messages, only cheaper.
func sameMessage(a, b *fsmpb.Message) bool {
	return a.GetId() == b.GetId() && a.GetPriority() == b.GetPriority() && a.GetExpiration() == b.GetExpiration() &&
		a.GetDedupId() == b.GetDedupId() && a.GetEnqueuedAt() == b.GetEnqueuedAt() &&
		a.GetDeliveryCount() == b.GetDeliveryCount() && a.GetRedelivered() == b.GetRedelivered() &&
		bytes.Equal(a.GetBody(), b.GetBody()) && maps.Equal(a.GetProperties(), b.GetProperties())
}

func sameResult(want, got fsm.Result) bool {
	if errClass(got.Err) != want.Err || !slices.Equal(want.Enqueued, got.Enqueued) || want.Acked != got.Acked ||
		!slices.Equal(want.Rejected, got.Rejected) || want.Returned != got.Returned || want.Watermark != got.Watermark ||
		want.Removed != got.Removed || want.Moved != got.Moved || len(want.Delivered) != len(got.Delivered) {
		return false
	}
	for i, d := range want.Delivered {
		g := got.Delivered[i]
		if d.DeliveryID != g.DeliveryID || d.Redelivered != g.Redelivered || d.DeliveryCount != g.DeliveryCount ||
			d.Consumer != g.Consumer || !sameMessage(d.Message, g.Message) {
			return false
		}
	}
	return true
}

// liveState names the one state a stored message is in, or fails.
func liveState(t *rapid.T, id string, ms fsm.MessageState) string {
	state, n := "", 0
	if ms.Pending {
		state, n = "pending", n+1
	}
	if ms.Session != "" || ms.DeliveryID != 0 {
		state, n = "delivered", n+1
	}
	if ms.AvailableAt != 0 {
		state, n = "delayed", n+1
	}
	if ms.MovingTo != "" {
		state, n = "moving", n+1 // dead or not
	} else if ms.Dead {
		state, n = "dead", n+1
	}
	if n != 1 || (ms.Dead && (ms.Session != "" || ms.AvailableAt != 0)) {
		t.Fatalf("%s is in %d states: %+v", id, n, ms)
	}
	return state
}

// step applies one command to the Member and the model and checks them.
func (p *propMachine) step(t *rapid.T, body proto.Message) fsm.Result {
	t.Helper()
	before := p.lookupAll()
	st0 := p.f.m.Stats()
	hadSession := map[string]bool{}
	for _, s := range propSessions {
		hadSession[s] = p.f.m.HasSession(s)
	}

	// Dedup ids remembered before the step (promise 5).
	remembered := map[string]bool{}
	if c, ok := body.(*fsmpb.Enqueue); ok {
		for _, m := range c.Messages {
			if _, ok := p.md.remembered(m.DedupId, c.Now); ok && m.DedupId != "" {
				remembered[m.DedupId] = true
			}
		}
	}
	want := p.md.apply(body)
	// Rejected commands, and commands that do nothing, change nothing: by the
	// model's word, checked against the Member's result below.
	noop := want.Err != nil
	switch c := body.(type) {
	case *fsmpb.Deliver:
		noop = noop || len(want.Delivered) == 0
	case *fsmpb.Ack:
		noop = noop || want.Acked == 0
	case *fsmpb.Recover, *fsmpb.Return:
		noop = noop || want.Returned == 0
	case *fsmpb.Release:
		noop = noop || !hadSession[c.Session]
	case *fsmpb.Expire, *fsmpb.Purge, *fsmpb.Moved:
		noop = noop || want.Removed == 0
	case *fsmpb.OpenSession:
		noop = noop || hadSession[c.Session]
	case *fsmpb.Move:
		noop = noop || want.Moved == 0
	case *fsmpb.Wake:
		noop = noop || want.Returned == 0
	}
	var stateBefore []byte
	if noop {
		stateBefore = quickState(t, p.f.m)
	}
	got := p.f.do(body)
	p.history = append(p.history, replay{p.f.idx, entry(t, body)})
	limit := rapid.SampledFrom([]int64{0, 0, 0, 30}).Draw(t, "body bytes held")
	p.away.apply(t, p.f.idx, p.history[len(p.history)-1].data, got, limit)
	if len(p.history) > 8 {
		p.history = p.history[1:]
	}
	if !sameResult(want, got) {
		t.Fatalf("%T %v:\n member %+v\n model  %+v", body, body, got, want)
	}
	if noop && !bytes.Equal(stateBefore, quickState(t, p.f.m)) {
		t.Fatalf("%T %v reported %+v but changed the state", body, body, got)
	}
	after := p.lookupAll()

	// Messages appear only through Enqueue, as reported.
	appeared := map[string]*fsmpb.Message{}
	for i, e := range got.Enqueued {
		if !e.Duplicate {
			appeared[e.ID] = body.(*fsmpb.Enqueue).Messages[i]
		}
	}
	for id := range after {
		if _, was := before[id]; !was && appeared[id] == nil {
			t.Fatalf("%T: message %s appeared", body, id)
		}
	}
	for id, carried := range appeared {
		ms, is := after[id]
		if !is {
			t.Fatalf("%T: message %s reported enqueued but is not stored", body, id)
		}
		if _, was := before[id]; was {
			t.Fatalf("%T: message %s stored twice", body, id)
		}
		// An acknowledged message stored again is a resend that no remembered
		// dedup id guarded (checked below): a new incarnation. A message
		// moved here carries its delivery count and mark, and is pending.
		if !ms.Pending || ms.DeliveryCount != carried.DeliveryCount || ms.Redelivered != carried.Redelivered {
			t.Fatalf("%s enqueued as %+v, stored as %+v", id, carried, ms)
		}
		delete(p.acked, id)
		delete(p.fate, id)
		p.lastCount[id] = carried.DeliveryCount
		p.stored[id] = true
		p.enqueued++
	}
	// Promise 5: with a dedup id, no message is enqueued twice.
	if c, ok := body.(*fsmpb.Enqueue); ok && got.Err == nil {
		stored := map[string]bool{}
		for i, m := range c.Messages {
			if got.Enqueued[i].Duplicate || m.DedupId == "" {
				continue
			}
			if remembered[m.DedupId] || stored[m.DedupId] {
				t.Fatalf("promise 5: %s stored with dedup id %s, which was remembered", m.Id, m.DedupId)
			}
			stored[m.DedupId] = true
		}
	}

	// Messages disappear only through ack, expiry and purge, each for its reason.
	var gone []string
	for id := range before {
		if _, is := after[id]; !is {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	fate := ""
	switch c := body.(type) {
	case *fsmpb.Ack:
		if len(gone) != got.Acked {
			t.Fatalf("ack reported %d acked, %d messages went: %v", got.Acked, len(gone), gone)
		}
		for _, id := range gone {
			if before[id].Session != c.Session {
				t.Fatalf("ack by %s removed %s, held by %q", c.Session, id, before[id].Session)
			}
			p.acked[id] = true
		}
		fate = "acked"
	case *fsmpb.Expire:
		if len(gone) != got.Removed {
			t.Fatalf("expire reported %d removed, %d went", got.Removed, len(gone))
		}
		for _, id := range gone {
			if e := before[id].Message.GetExpiration(); e == 0 || e > c.Now {
				t.Fatalf("expire at %d removed %s expiring at %d", c.Now, id, e)
			}
		}
		fate = "expired"
	case *fsmpb.Purge:
		if len(gone) != got.Removed {
			t.Fatalf("purge reported %d removed, %d went", got.Removed, len(gone))
		}
		for _, id := range gone {
			if b := before[id]; !b.Pending && b.AvailableAt == 0 {
				t.Fatalf("purge removed %s, which was neither pending nor delayed: %+v", id, b)
			}
		}
		fate = "purged"
	case *fsmpb.Moved:
		if len(gone) != got.Removed {
			t.Fatalf("moved reported %d removed, %d went", got.Removed, len(gone))
		}
		var dead uint64
		for _, id := range gone {
			if before[id].MovingTo == "" {
				t.Fatalf("moved removed %s, which was not moving: %+v", id, before[id])
			}
			if before[id].Dead {
				dead++
			}
		}
		if dl := p.f.m.Stats().DeadLettered; dl != st0.DeadLettered+dead {
			t.Fatalf("moved removed %d dead messages, DeadLettered went from %d to %d", dead, st0.DeadLettered, dl)
		}
		fate = "moved"
	default:
		if len(gone) != 0 {
			t.Fatalf("%T lost messages %v", body, gone)
		}
	}
	for _, id := range gone {
		delete(p.stored, id)
		p.fate[id] = fate
		p.fates[fate]++
	}
	if _, ok := body.(*fsmpb.Moved); !ok && p.f.m.Stats().DeadLettered != st0.DeadLettered {
		t.Fatalf("%T changed DeadLettered from %d to %d", body, st0.DeadLettered, p.f.m.Stats().DeadLettered)
	}

	// What changed state, and how, for the commands that move messages
	// between the states.
	switch c := body.(type) {
	case *fsmpb.Recover, *fsmpb.Release, *fsmpb.Return:
		// A delivery taken back is marked, and dead exactly when it was
		// delivered max_deliveries times; one its consumer never saw is
		// pending as before it was delivered: uncounted, its mark as it was.
		maxd := p.f.m.Settings().GetMaxDeliveries()
		unseen := false
		if r, ok := c.(*fsmpb.Return); ok {
			unseen = r.Unseen
		}
		for id, b := range before {
			a, ok := after[id]
			if b.Session == "" || !ok || a.Session != "" {
				continue
			}
			if unseen {
				if a.Redelivered != b.Redelivered || a.DeliveryCount != b.DeliveryCount-1 || !a.Pending || a.Dead || a.AvailableAt != 0 {
					t.Fatalf("unseen return took back %s: %+v, was %+v", id, a, b)
				}
				p.lastCount[id] = a.DeliveryCount
				continue
			}
			if !a.Redelivered || a.DeliveryCount != b.DeliveryCount || a.Dead != (maxd > 0 && b.DeliveryCount >= maxd) {
				t.Fatalf("%T took back %s: %+v, was %+v (max deliveries %d)", body, id, a, b, maxd)
			}
		}
	case *fsmpb.Move:
		moved := 0
		for id, b := range before {
			a := after[id]
			if a.MovingTo == b.MovingTo {
				continue
			}
			moved++
			if b.MovingTo != "" || a.MovingTo != c.Target || (!b.Pending && !b.Dead) || a.Dead != b.Dead {
				t.Fatalf("move to %s: %s was %+v, is %+v", c.Target, id, b, a)
			}
		}
		if moved != got.Moved {
			t.Fatalf("move reported %d, %d messages started moving", got.Moved, moved)
		}
	case *fsmpb.Wake:
		woken := 0
		for id, b := range before {
			a := after[id]
			due := b.AvailableAt != 0 && b.AvailableAt <= c.Now
			if due != (a.AvailableAt == 0 && b.AvailableAt != 0) || (due && !a.Pending) {
				t.Fatalf("wake at %d: %s was %+v, is %+v", c.Now, id, b, a)
			}
			if due {
				woken++
			}
		}
		if woken != got.Returned {
			t.Fatalf("wake reported %d, %d messages woke", got.Returned, woken)
		}
	}

	// Promise 3: a delivery takes a pending message, to one session, and every
	// delivery after the first is marked and counted.
	for _, d := range got.Delivered {
		id := d.Message.GetId()
		if p.acked[id] {
			t.Fatalf("promise 2: acknowledged message %s delivered again", id)
		}
		if !before[id].Pending {
			t.Fatalf("promise 3: %s delivered while held by %q", id, before[id].Session)
		}
		prev := p.lastCount[id]
		if d.DeliveryCount != prev+1 || d.Redelivered != (prev > 0) {
			t.Fatalf("promise 3: delivery %d of %s: redelivered=%v count=%d after count %d",
				d.DeliveryID, id, d.Redelivered, d.DeliveryCount, prev)
		}
		p.lastCount[id] = d.DeliveryCount
	}

	// p.check runs next: it is the "" action of t.Repeat, which runs after
	// every action.
	return got
}

// check compares the Member with the model and checks the invariants.
func (p *propMachine) check(t *rapid.T) {
	t.Helper()
	m, md := p.f.m, p.md
	if m.Applied() != p.f.idx {
		t.Fatalf("Applied = %d, want %d", m.Applied(), p.f.idx)
	}
	checkCounts(t, m)

	// Promise 2: an acknowledged message is never stored again.
	for id := range p.acked {
		if _, ok := m.Lookup(id); ok {
			t.Fatalf("promise 2: acknowledged message %s is stored", id)
		}
	}
	// Nothing is lost: what is stored is what was enqueued and not removed,
	// each in exactly one state; what is not went one way, once.
	view := p.lookupAll()
	if len(view) != len(p.stored) {
		t.Fatalf("%d messages stored, %d enqueued and not removed", len(view), len(p.stored))
	}
	states := map[string]int{}
	for id, ms := range view {
		states[liveState(t, id, ms)]++
		if !p.stored[id] || p.fate[id] != "" {
			t.Fatalf("%s is stored, but went: %q", id, p.fate[id])
		}
	}
	for id, fate := range p.fate {
		if _, ok := view[id]; ok || fate == "" {
			t.Fatalf("%s went (%q) and is stored", id, fate)
		}
	}
	if gone := p.fates["acked"] + p.fates["expired"] + p.fates["purged"] + p.fates["moved"]; p.enqueued != len(view)+gone {
		t.Fatalf("%d messages stored ever; %d are stored, %v went", p.enqueued, len(view), p.fates)
	}
	st := m.Stats()
	if st.Pending != states["pending"] || st.Delivered != states["delivered"] || st.Delayed != states["delayed"] ||
		st.Moving != states["dead"]+states["moving"] {
		t.Fatalf("Stats %+v, messages by state %v", st, states)
	}
	// Promise 3: a delivered message is with exactly one session, under
	// one delivery id.
	dids := map[uint64]string{}
	for _, s := range m.Sessions() {
		// Each consumer of the session holds what was delivered to it,
		// and what a new host would push it again is its own alone.
		if ms := md.sessions[s.ID]; ms != nil {
			for _, k := range []string{"k1", "k2", "k3"} {
				want := md.consumerDeliveries(ms, k, 0)
				var got []uint64
				for _, d := range m.DeliveriesAfter(s.ID, k, 0) {
					got = append(got, d.DeliveryID)
					if d.Consumer != k {
						t.Fatalf("DeliveriesAfter(%s, %s) lists delivery %d of consumer %q", s.ID, k, d.DeliveryID, d.Consumer)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("DeliveriesAfter(%s, %s): %v; model %v", s.ID, k, got, want)
				}
			}
		}
		for _, d := range m.SessionDeliveries(s.ID) {
			id := d.Message.GetId()
			if other, dup := dids[d.DeliveryID]; dup {
				t.Fatalf("promise 3: delivery id %d held by %s and %s", d.DeliveryID, id, other)
			}
			dids[d.DeliveryID] = id
			if ms := view[id]; ms.Session != s.ID || ms.DeliveryID != d.DeliveryID || ms.DeliveryCount != d.DeliveryCount {
				t.Fatalf("promise 3: session %s holds delivery %d of %s, which is %+v", s.ID, d.DeliveryID, id, ms)
			}
		}
	}
	for id, ms := range view {
		if ms.Session != "" && dids[ms.DeliveryID] != id {
			t.Fatalf("promise 3: %s delivered to %s, which does not hold it", id, ms.Session)
		}
	}

	// The Member agrees with the model.
	pending, delivered, delayed := 0, 0, 0
	for id, mm := range md.msgs {
		ms, ok := view[id]
		if !ok {
			t.Fatalf("model holds %s, member does not", id)
		}
		if ms.Pending != mm.waiting() || ms.Session != mm.session || ms.DeliveryID != mm.deliveryID ||
			ms.AvailableAt != mm.availableAt || ms.Dead != mm.dead || ms.MovingTo != mm.movingTo ||
			ms.Redelivered != mm.redelivered || ms.DeliveryCount != mm.count || !sameMessage(ms.Message, mm.msg) {
			t.Fatalf("%s: member %+v, model %+v", id, ms, *mm)
		}
		switch {
		case mm.waiting():
			pending++
		case mm.session != "":
			delivered++
		case mm.availableAt != 0:
			delayed++
		}
	}
	if len(view) != len(md.msgs) {
		t.Fatalf("member holds %d messages, model %d", len(view), len(md.msgs))
	}
	aside := md.aside()
	want := fsm.Stats{Pending: pending, Delivered: delivered, Delayed: delayed, Moving: len(aside), DeadLettered: md.deadLettered,
		Bytes: md.bytes, Sessions: len(md.sessions), DedupIDs: len(md.dedup)}
	if st != want {
		t.Fatalf("Stats = %+v, model %+v", st, want)
	}
	if got, want := m.NextWake(), md.nextWake(); got != want {
		t.Fatalf("NextWake = %d, model %d", got, want)
	}
	limit := len(aside)
	if limit > 0 {
		limit = 1 + (p.nextID % limit) // not always all of them
	}
	got := m.AsideMessages(limit)
	if len(got) != limit {
		t.Fatalf("AsideMessages(%d) lists %d", limit, len(got))
	}
	for i, a := range got {
		mm := aside[i]
		if a.Message.GetId() != mm.msg.Id || a.Seq != mm.seq || a.Dead != mm.dead || a.Target != mm.movingTo ||
			a.Redelivered != mm.redelivered || a.DeliveryCount != mm.count {
			t.Fatalf("AsideMessages[%d] = %+v, model %+v", i, a, *mm)
		}
	}
	for _, now := range []int64{p.now, p.now + 100} {
		if got, want := pendingIDs(m, now), md.pendingOrder(now); !slices.Equal(got, want) {
			t.Fatalf("ScanPending(%d) = %v, model %v", now, got, want)
		}
		if got, want := m.ExpiredBy(now, 1<<20), md.expiredBy(now); !slices.Equal(got, want) {
			t.Fatalf("ExpiredBy(%d) = %v, model %v", now, got, want)
		}
	}
	if all := md.expiredBy(1 << 62); len(all) > 0 {
		if next := m.NextExpiration(); next != md.msgs[all[0]].msg.Expiration {
			t.Fatalf("NextExpiration = %d, model %d", next, md.msgs[all[0]].msg.Expiration)
		}
	} else if next := m.NextExpiration(); next != 0 {
		t.Fatalf("NextExpiration = %d, model none", next)
	}
	var sessions []fsm.SessionInfo
	for id, s := range md.sessions {
		sessions = append(sessions, fsm.SessionInfo{ID: id, Owner: s.owner, Deliveries: len(s.deliveries)})
	}
	slices.SortFunc(sessions, func(a, b fsm.SessionInfo) int { return cmp.Compare(a.ID, b.ID) })
	if got := m.Sessions(); !slices.Equal(got, sessions) {
		t.Fatalf("Sessions = %+v, model %+v", got, sessions)
	}
	s := m.Settings()
	if s.GetMaxBytes() != md.maxBytes || s.GetDedupWindowNs() != md.window || int(s.GetDedupMaxIds()) != md.maxIDs ||
		s.GetMaxDeliveries() != md.maxDeliveries || s.GetRedeliveryDelayNs() != md.delay ||
		s.GetRedeliveryBackoff() != md.backoff || s.GetRedeliveryMaxDelayNs() != md.maxDelay {
		t.Fatalf("Settings = %v, model %+v", s, *md)
	}
	p.away.check(t, m, p.known, p.now)
}

// quickState is state for members whose messages have one property at
// most, whose snapshot bytes are then deterministic: only the header is
// re-encoded, without the applied index, and the message records are kept
// as they are.
func quickState(t *rapid.T, m *fsm.Member) []byte {
	raw := snapshotBytes(t, m)
	size, n := protowire.ConsumeVarint(raw)
	if n < 0 {
		t.Fatalf("snapshot header length: %v", protowire.ParseError(n))
	}
	var h fsmpb.MemberSnapshot
	if err := proto.Unmarshal(raw[n:n+int(size)], &h); err != nil {
		t.Fatalf("snapshot header: %v", err)
	}
	h.Applied = 0
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(&h)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return append(out, raw[n+int(size):]...)
}

// ---- generators ----

// session picks a session: mostly one that holds deliveries, or at least is
// open, sometimes any, now and then one never opened.
func (p *propMachine) session(t *rapid.T) string {
	var holding, open []string
	for _, s := range propSessions {
		if ms := p.md.sessions[s]; ms != nil {
			open = append(open, s)
			if len(ms.deliveries) > 0 {
				holding = append(holding, s)
			}
		}
	}
	switch k := rapid.IntRange(0, 19).Draw(t, "which session"); {
	case k < 12 && len(holding) > 0:
		return rapid.SampledFrom(holding).Draw(t, "holding")
	case k < 17 && len(open) > 0:
		return rapid.SampledFrom(open).Draw(t, "open")
	case k < 19:
		return rapid.SampledFrom(propSessions).Draw(t, "any")
	}
	return "ghost"
}

func (p *propMachine) newMessage(t *rapid.T) *fsmpb.Message {
	p.nextID++
	m := &fsmpb.Message{Id: fmt.Sprintf("m%d", p.nextID), EnqueuedAt: p.now}
	m.Priority = uint32(rapid.IntRange(0, 9).Draw(t, "priority"))
	if rapid.IntRange(0, 29).Draw(t, "invalid") == 17 { // rapid favours the ends of a range
		m.Priority = uint32(rapid.IntRange(10, 1000).Draw(t, "bad priority"))
	}
	if rapid.Bool().Draw(t, "expires") {
		m.Expiration = p.now + int64(rapid.IntRange(0, 300).Draw(t, "ttl"))
	}
	if rapid.Bool().Draw(t, "has dedup") {
		m.DedupId = fmt.Sprintf("d%d", rapid.IntRange(0, 11).Draw(t, "dedup"))
		if rapid.IntRange(0, 3).Draw(t, "dedup id is the id") == 0 {
			m.DedupId = m.Id // as idempotent producers send
		}
	}
	m.Body = bytes.Repeat([]byte{'x'}, rapid.IntRange(0, 24).Draw(t, "size"))
	if rapid.IntRange(0, 3).Draw(t, "has property") == 0 {
		// One property at most: the snapshot encodes a map in map order.
		m.Properties = map[string]string{"k": rapid.StringMatching(`[a-z]{0,4}`).Draw(t, "value")}
	}
	if rapid.IntRange(0, 7).Draw(t, "moved here") == 0 {
		// Moved from another member, after deliveries there.
		m.DeliveryCount = uint32(rapid.IntRange(0, 3).Draw(t, "carried count"))
		m.Redelivered = m.DeliveryCount > 0
	}
	return m
}

// redelivery draws small redelivery settings into s.
func redelivery(t *rapid.T, s *fsmpb.MemberSettings) {
	s.MaxDeliveries = rapid.SampledFrom([]uint32{0, 0, 1, 2, 3}).Draw(t, "max deliveries")
	s.RedeliveryDelayNs = rapid.SampledFrom([]int64{0, 0, 10, 50, 200}).Draw(t, "delay")
	s.RedeliveryBackoff = rapid.SampledFrom([]uint32{0, 1, 2, 3}).Draw(t, "backoff")
	s.RedeliveryMaxDelayNs = rapid.SampledFrom([]int64{0, 0, 100, 300}).Draw(t, "max delay")
}

// idsIn lists the known ids the model holds in a state (in a
// deterministic order, as rapid needs), each n times.
func (p *propMachine) idsIn(n int, in func(*modelMsg) bool) []string {
	var ids []string
	for _, id := range p.known {
		if m := p.md.msgs[id]; m != nil && in(m) {
			for range n {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func (p *propMachine) enqueue(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "batch")
	c := &fsmpb.Enqueue{Now: p.now}
	for range n {
		var m *fsmpb.Message
		switch kind := rapid.IntRange(0, 9).Draw(t, "kind"); {
		case kind < 7 || len(p.sent) == 0:
			m = p.newMessage(t)
			if m.Priority <= fsm.MaxPriority {
				p.sent = append(p.sent, m)
			}
		case kind < 9:
			// A resend: the same message, with its dedup id if it has one.
			m = rapid.SampledFrom(p.sent).Draw(t, "resend")
		default:
			// A new message that reuses an id.
			m = p.newMessage(t)
			m.Id = rapid.SampledFrom(p.sent).Draw(t, "reused").Id
			m.DedupId = ""
		}
		p.know(m.Id)
		c.Messages = append(c.Messages, m)
	}
	p.step(t, c)
}

func (p *propMachine) anyIDs(t *rapid.T, label string) []string {
	var pool []string
	for _, id := range p.md.pendingOrder(p.now - 1000) {
		pool = append(pool, id, id) // pending ones more often
	}
	pool = append(pool, p.known...)
	pool = append(pool, "never-sent")
	return rapid.SliceOfN(rapid.SampledFrom(pool), 0, 5).Draw(t, label)
}

func (p *propMachine) deliveryIDs(t *rapid.T, session string) []uint64 {
	pool := []uint64{0, p.md.nextDelivery, p.md.nextDelivery + 7}
	for _, s := range p.md.sessions {
		pool = append(pool, sortedKeys(s.deliveries)...)
	}
	if s := p.md.sessions[session]; s != nil {
		for _, d := range sortedKeys(s.deliveries) {
			pool = append(pool, d, d, d, d, d, d)
		}
	}
	return rapid.SliceOfN(rapid.SampledFrom(pool), 0, 4).Draw(t, "delivery ids")
}

func (p *propMachine) actions() map[string]func(*rapid.T) {
	open := func(t *rapid.T) {
		s := rapid.SampledFrom(propSessions).Draw(t, "session")
		o := propOwners[s]
		switch rapid.IntRange(0, 19).Draw(t, "malformed") {
		case 0:
			s = ""
		case 1:
			o = ""
		case 2, 3:
			o = rapid.SampledFrom([]string{"fe-1", "fe-2"}).Draw(t, "owner")
		}
		p.step(t, &fsmpb.OpenSession{Session: s, Owner: o})
	}
	deliver := func(t *rapid.T) {
		ids := p.anyIDs(t, "ids")
		if rapid.Bool().Draw(t, "take the head") {
			ids = append(p.md.pendingOrder(p.now), ids...)
			ids = ids[:min(len(ids), 4)]
		}
		// Several consumers per session, and none (entries written
		// before consumers were named).
		consumer := rapid.SampledFrom([]string{"k1", "k1", "k2", "k3", ""}).Draw(t, "consumer")
		p.step(t, &fsmpb.Deliver{Session: p.session(t), Consumer: consumer, Now: p.now, MessageIds: ids})
	}
	ack := func(t *rapid.T) {
		s := p.session(t)
		c := &fsmpb.Ack{Session: s, DeliveryIds: p.deliveryIDs(t, s)}
		if rapid.IntRange(0, 3).Draw(t, "cumulative") == 0 {
			c.UpTo = uint64(rapid.IntRange(0, int(p.md.nextDelivery)).Draw(t, "up to"))
		}
		p.step(t, c)
	}
	advance := func(t *rapid.T) {
		// Round steps, so that an id is often exactly one window old.
		p.now += rapid.SampledFrom([]int64{0, 1, 10, 25, 50, 50, 100, 150}).Draw(t, "advance")
	}
	return map[string]func(*rapid.T){
		"":         p.check,
		"open":     open,
		"open2":    open,
		"enqueue":  p.enqueue,
		"enqueue2": p.enqueue,
		"enqueue3": p.enqueue,
		"enqueue4": p.enqueue,
		"deliver":  deliver,
		"deliver2": deliver,
		"deliver3": deliver,
		"deliver4": deliver,
		"ack":      ack,
		"ack2":     ack,
		"ack3":     ack,
		"recover": func(t *rapid.T) {
			p.step(t, &fsmpb.Recover{Session: p.session(t), Now: p.now})
		},
		"release": func(t *rapid.T) {
			if rapid.IntRange(0, 2).Draw(t, "really") == 0 {
				p.step(t, &fsmpb.Release{Session: p.session(t), Now: p.now})
			}
		},
		"return": func(t *rapid.T) {
			s := p.session(t)
			unseen := rapid.Bool().Draw(t, "unseen")
			p.step(t, &fsmpb.Return{Session: s, DeliveryIds: p.deliveryIDs(t, s), Now: p.now, Unseen: unseen})
		},
		// A closed consumer's deliveries above what was pushed to it.
		"return a consumer's": func(t *rapid.T) {
			s := p.session(t)
			consumer := rapid.SampledFrom([]string{"k1", "k2", "k3"}).Draw(t, "consumer")
			after := rapid.SampledFrom(append(p.deliveryIDs(t, s), 0)).Draw(t, "after")
			p.step(t, &fsmpb.Return{Session: s, Consumer: consumer, After: after, Now: p.now, Unseen: rapid.Bool().Draw(t, "unseen")})
		},
		"move": func(t *rapid.T) {
			target := rapid.SampledFrom([]string{"q#0", "q#1", "q.DLQ#0"}).Draw(t, "target")
			if rapid.IntRange(0, 9).Draw(t, "bad target") == 0 {
				target = rapid.SampledFrom([]string{"", "q", "q#", "q#x", "q#01", "#1"}).Draw(t, "bad")
			}
			pool := p.idsIn(3, func(m *modelMsg) bool { return m.dead && m.movingTo == "" })
			pool = append(pool, p.anyIDs(t, "ids")...)
			ids := rapid.SliceOfN(rapid.SampledFrom(append(pool, "never-sent")), 0, 4).Draw(t, "move ids")
			if rapid.Bool().Draw(t, "take the head") {
				// Stranded: the first pending ones are forwarded.
				head := p.md.pendingOrder(p.now)
				ids = append(head[:min(len(head), 2)], ids...)
			}
			p.step(t, &fsmpb.Move{Target: target, MessageIds: ids})
		},
		"moved": func(t *rapid.T) {
			pool := p.idsIn(4, func(m *modelMsg) bool { return m.movingTo != "" })
			pool = append(pool, p.anyIDs(t, "ids")...)
			ids := rapid.SliceOfN(rapid.SampledFrom(append(pool, "never-sent")), 0, 4).Draw(t, "moved ids")
			p.step(t, &fsmpb.Moved{MessageIds: ids})
		},
		"wake": func(t *rapid.T) {
			if next := p.md.nextWake(); next > p.now && rapid.Bool().Draw(t, "wait for the next wake") {
				p.now = next // the leader wakes the messages when their delay ends
			}
			ahead := rapid.SampledFrom([]int64{0, 0, 0, -10, 60}).Draw(t, "clock ahead")
			p.step(t, &fsmpb.Wake{Now: p.now + ahead})
		},
		"time":  advance,
		"time2": advance,
		"expire": func(t *rapid.T) {
			now := p.now + int64(rapid.IntRange(0, 60).Draw(t, "clock ahead"))
			ids := append(p.f.m.ExpiredBy(now, rapid.IntRange(0, 4).Draw(t, "limit")), p.anyIDs(t, "more ids")...)
			p.step(t, &fsmpb.Expire{Now: now, MessageIds: ids})
		},
		"purge": func(t *rapid.T) {
			if rapid.IntRange(0, 3).Draw(t, "really") == 0 {
				p.step(t, &fsmpb.Purge{})
			}
		},
		"configure": func(t *rapid.T) {
			s := &fsmpb.MemberSettings{
				MaxBytes:      rapid.SampledFrom([]int64{0, 0, 80, 300}).Draw(t, "max bytes"),
				DedupWindowNs: rapid.SampledFrom([]int64{0, 50, 200, 1000, fsm.DefaultDedupWindowNs}).Draw(t, "window"),
				DedupMaxIds:   rapid.SampledFrom([]uint32{0, 1, 3, 8, fsm.DefaultDedupMaxIDs}).Draw(t, "max ids"),
			}
			redelivery(t, s)
			switch rapid.IntRange(0, 14).Draw(t, "invalid") {
			case 0:
				s = nil
			case 1:
				s.MaxBytes = -1
			case 2:
				s.DedupWindowNs = -int64(rapid.IntRange(1, 100).Draw(t, "negative window"))
			case 3:
				s.RedeliveryDelayNs = -int64(rapid.IntRange(1, 100).Draw(t, "negative delay"))
			case 4:
				s.RedeliveryMaxDelayNs = -int64(rapid.IntRange(1, 100).Draw(t, "negative max delay"))
			}
			p.step(t, &fsmpb.Configure{Settings: s})
		},
		"snapshot": func(t *rapid.T) {
			raw := snapshotBytes(t, p.f.m)
			before := canonical(t, raw, true)
			r := restore(t, raw)
			if again := snapshotBytes(t, r); !bytes.Equal(raw, again) {
				t.Fatalf("snapshot of the restored member differs")
			}
			if !bytes.Equal(before, fullState(t, r)) {
				t.Fatalf("restored state differs")
			}
			p.f.m = r
			p.away.snapshot(t)
		},
		"replay": func(t *rapid.T) {
			if len(p.history) == 0 {
				t.Skip("nothing to replay")
			}
			h := rapid.SampledFrom(p.history).Draw(t, "entry")
			idx := rapid.SampledFrom([]uint64{h.index, p.f.idx, 0}).Draw(t, "at")
			before := fullState(t, p.f.m)
			if rs, err := p.f.m.Apply(idx, h.data); rs != nil || err != nil {
				t.Fatalf("replay at %d (applied %d) = %+v, %v", idx, p.f.idx, rs, err)
			}
			if !bytes.Equal(before, fullState(t, p.f.m)) {
				t.Fatalf("replay at %d changed the state", idx)
			}
		},
		"corrupt": func(t *rapid.T) {
			data := rapid.SampledFrom([][]byte{
				[]byte("garbage"),
				rawEntry(t, 99, fsm.MustCommand(&fsmpb.Purge{})),
				rawEntry(t, 0, fsm.MustCommand(&fsmpb.Purge{})),
				entry(t, &fsmpb.Purge{}, &fsmpb.DeleteDestination{Name: "x"}),
				rawEntry(t, 1, fsm.MustCommand(&fsmpb.Purge{}), &fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_ACK, Payload: []byte{0xff}}),
				rawEntry(t, 1, fsm.MustCommand(&fsmpb.Wake{Now: 1 << 62}), &fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_MOVE, Payload: []byte{0x0a, 0x05}}),
			}).Draw(t, "corrupt entry")
			before := fullState(t, p.f.m)
			if rs, err := p.f.m.Apply(p.f.idx+1, data); !errors.Is(err, fsm.ErrCorrupt) || rs != nil {
				t.Fatalf("corrupt entry = %+v, %v", rs, err)
			}
			if !bytes.Equal(before, fullState(t, p.f.m)) {
				t.Fatalf("a corrupt entry changed the state")
			}
		},
	}
}

// setDefaultFlag sets a rapid flag unless the command line or the
// environment set it.
func setDefaultFlag(t *testing.T, name, env, value string) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if _, ok := os.LookupEnv(env); set || ok {
		return
	}
	old := flag.Lookup(name).Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set(name, old) })
}

func TestProperty_MemberAgainstModel(t *testing.T) {
	// About 60 000 steps in 1500 sequences: some 10 s with -race on two cores.
	checks, steps := "1500", "40"
	if testing.Short() {
		checks = "150"
	}
	setDefaultFlag(t, "rapid.checks", "RAPID_CHECKS", checks)
	setDefaultFlag(t, "rapid.steps", "RAPID_STEPS", steps)
	rapid.Check(t, func(t *rapid.T) {
		p := newPropMachine(t)
		p.step(t, &fsmpb.OpenSession{Session: "s1", Owner: propOwners["s1"]})
		p.step(t, &fsmpb.OpenSession{Session: "s2", Owner: propOwners["s2"]})
		if rapid.Bool().Draw(t, "redelivery settings") {
			s := fsm.DefaultSettings()
			redelivery(t, s)
			p.step(t, &fsmpb.Configure{Settings: s})
		}
		t.Repeat(p.actions())
	})
}
