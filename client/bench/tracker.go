package bench

import (
	"sync"
	"sync/atomic"
)

// Send states of one message.
const (
	unsent  uint8 = iota
	sending       // the send is in flight, or its outcome unknown
	sentOK
	notSent // refused or rolled back: it must not come
)

// tracker knows, per producer and sequence number, whether the message was
// sent and how often it came.
type tracker struct {
	producers  []producerLog
	unexpected atomic.Int64
	// ok counts messages sent, done those of them consumed (whichever of
	// the two came last counts it), so allConsumed need not walk the logs.
	ok, done atomic.Int64
}

type producerLog struct {
	mu    sync.Mutex
	state []uint8
	seen  []uint16
	// maybe: taken, with an acknowledgement or commit of unknown outcome;
	// unless it comes again, it was consumed.
	maybe []bool
}

// counted: the message was consumed, or may have been.
func (p *producerLog) counted(seq uint64) bool { return p.seen[seq] > 0 || p.maybe[seq] }

func newTracker(producers int) *tracker {
	return &tracker{producers: make([]producerLog, producers)}
}

func (p *producerLog) grow(seq uint64) {
	for uint64(len(p.state)) <= seq {
		p.state = append(p.state, unsent)
		p.seen = append(p.seen, 0)
		p.maybe = append(p.maybe, false)
	}
}

func (t *tracker) sending(no int, seq uint64) {
	p := &t.producers[no]
	p.mu.Lock()
	p.grow(seq)
	p.state[seq] = sending
	p.mu.Unlock()
}

// sent records a send's outcome; a failed one stays "sending": its outcome
// is unknown unless notSent says otherwise.
func (t *tracker) sent(no int, seq uint64, ok bool) {
	if !ok {
		return
	}
	p := &t.producers[no]
	p.mu.Lock()
	p.state[seq] = sentOK
	if p.counted(seq) {
		t.done.Add(1)
	}
	p.mu.Unlock()
	t.ok.Add(1)
}

func (t *tracker) notSent(no int, seq uint64) {
	p := &t.producers[no]
	p.mu.Lock()
	p.state[seq] = notSent
	p.mu.Unlock()
}

// consumed records a receipt; true when it is the message's first.
func (t *tracker) consumed(no int, seq uint64) bool {
	if no < 0 || no >= len(t.producers) {
		t.unexpected.Add(1)
		return false
	}
	p := &t.producers[no]
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq >= uint64(len(p.state)) || p.state[seq] == unsent || p.state[seq] == notSent {
		t.unexpected.Add(1)
		return false
	}
	wasCounted := p.counted(seq)
	if p.seen[seq] < ^uint16(0) {
		p.seen[seq]++
	}
	if p.seen[seq] != 1 {
		return false
	}
	if !wasCounted && p.state[seq] == sentOK {
		t.done.Add(1)
	}
	return true
}

// maybeConsumed records a message taken whose acknowledgement or commit may
// or may not have happened: it is not lost if it never comes again, and its
// first receipt, if it does, is not a duplicate.
func (t *tracker) maybeConsumed(no int, seq uint64) {
	if no < 0 || no >= len(t.producers) {
		return
	}
	p := &t.producers[no]
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq >= uint64(len(p.state)) || p.state[seq] == unsent || p.state[seq] == notSent || p.counted(seq) {
		return
	}
	p.maybe[seq] = true
	if p.state[seq] == sentOK {
		t.done.Add(1)
	}
}

func (t *tracker) allConsumed() bool { return t.done.Load() >= t.ok.Load() }

// verdict counts messages sent and never consumed, receipts after the
// first, and receipts of messages never sent.
func (t *tracker) verdict() (lost, duplicates, unexpected int64) {
	for i := range t.producers {
		p := &t.producers[i]
		p.mu.Lock()
		for seq, st := range p.state {
			n := p.seen[seq]
			if st == sentOK && !p.counted(uint64(seq)) {
				lost++
			}
			if n > 1 {
				duplicates += int64(n - 1)
			}
		}
		p.mu.Unlock()
	}
	return lost, duplicates, t.unexpected.Load()
}

// trackers are a run's trackers, one per subscription of a topic (one for a
// queue): every subscription is to receive every message, so each send is
// recorded in all of them, each receipt in its subscription's.
type trackers []*tracker

func newTrackers(subscriptions, producers int) trackers {
	ts := make(trackers, max(subscriptions, 1))
	for i := range ts {
		ts[i] = newTracker(producers)
	}
	return ts
}

func (ts trackers) sending(no int, seq uint64) {
	for _, t := range ts {
		t.sending(no, seq)
	}
}

func (ts trackers) sent(no int, seq uint64, ok bool) {
	for _, t := range ts {
		t.sent(no, seq, ok)
	}
}

func (ts trackers) notSent(no int, seq uint64) {
	for _, t := range ts {
		t.notSent(no, seq)
	}
}

func (ts trackers) allConsumed() bool {
	for _, t := range ts {
		if !t.allConsumed() {
			return false
		}
	}
	return true
}

// verdict sums the trackers' verdicts: a message one subscription missed
// is lost once.
func (ts trackers) verdict() (lost, duplicates, unexpected int64) {
	for _, t := range ts {
		l, d, u := t.verdict()
		lost, duplicates, unexpected = lost+l, duplicates+d, unexpected+u
	}
	return lost, duplicates, unexpected
}
