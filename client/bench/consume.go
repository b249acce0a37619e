package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/cairnmq/cairn/client"
)

// consume receives until told to stop; in a transacted run it commits every
// Transacted messages (and what it holds when the receiving pauses).
func (r *run) consume(ctx context.Context, s *client.Session, k *client.Consumer, t *tracker) {
	hist := newHist()
	defer func() {
		r.histMu.Lock()
		r.e2eHist.Merge(hist)
		r.histMu.Unlock()
	}()
	r.consumeWith(ctx, consumer{
		receive:     k.ReceiveTimeout,
		receiveMore: func() *client.Message { m, _ := k.ReceiveNoWait(); return m },
		ack:         func(last *client.Message) error { return last.Ack() },
		commit:      func() error { return s.Commit(ctx) },
		now:         time.Now,
		t:           t,
	}, hist)
}

// consumer is what the consume loop does with a session and its consumer;
// a test gives its own.
type consumer struct {
	receive     func(timeout time.Duration) (*client.Message, error)
	receiveMore func() *client.Message
	// ack acknowledges, in ClientAck mode, every message handed out.
	ack    func(last *client.Message) error
	commit func() error
	now    func() time.Time
	// t tracks the subscription (or queue) this consumer receives.
	t *tracker
}

// settlement is what became of the messages an acknowledgement or a commit
// covered.
type settlement int

const (
	settledOK settlement = iota // consumed
	// settledReturned: they come again (a rollback, a closed session).
	settledReturned
	// settledKept: not answered; the session still holds them, and its next
	// acknowledgement or commit covers them too.
	settledKept
	// settledUnknown: they may or may not be consumed; if one never comes
	// again, it was.
	settledUnknown
)

func ackSettlement(err error) settlement {
	switch {
	case err == nil:
		return settledOK
	case errors.Is(err, client.ErrLostServer):
		// The node was lost during the acknowledgement, or the session
		// had reconnected: some of them may be acknowledged, the rest
		// come again.
		return settledUnknown
	case errors.Is(err, client.ErrClosed):
		return settledReturned
	}
	return settledKept
}

func commitSettlement(err error) settlement {
	switch {
	case err == nil:
		return settledOK
	case errors.Is(err, client.ErrCommitUnknown):
		return settledUnknown
	case errors.Is(err, client.ErrTransactionRolledBack), errors.Is(err, client.ErrClosed):
		return settledReturned
	}
	return settledKept
}

func (r *run) consumeWith(ctx context.Context, c consumer, hist *hdrhistogram.Histogram) {
	// held are the messages taken and not yet acknowledged or committed,
	// each with the moment it was taken: its end-to-end latency ends there,
	// while it counts as consumed only once its acknowledgement or commit
	// returned ok.
	var held []taken
	settle := func() {
		if len(held) == 0 {
			return
		}
		var how settlement
		switch {
		case r.cfg.Transacted > 0:
			how = commitSettlement(c.commit())
		case r.cfg.Ack == AckClient:
			how = ackSettlement(c.ack(held[len(held)-1].m))
		}
		switch how {
		case settledOK:
			for _, h := range held {
				r.received(c.t, h, hist)
			}
		case settledUnknown:
			for _, h := range held {
				r.maybeReceived(c.t, h.m)
			}
		case settledKept:
			return
		}
		held = held[:0]
	}
	for {
		select {
		case <-r.stopConsumers:
			settle()
			return
		default:
		}
		m, err := c.receive(100 * time.Millisecond)
		if m == nil {
			settle()
			if err != nil && (errors.Is(err, client.ErrClosed) || ctx.Err() != nil) {
				return
			}
			continue
		}
		held = append(held, taken{m, c.now()})
		switch {
		case r.cfg.Transacted > 0:
			if len(held) >= r.cfg.Transacted {
				settle()
			}
		case r.cfg.Ack == AckClient:
			// Every message is acknowledged: what has arrived is taken,
			// then acknowledged together (ClientAck acknowledges each
			// message handed out) and the acknowledgement waited for
			// before more is taken.
			for len(held) < clientAckBatch {
				more := c.receiveMore()
				if more == nil {
					break
				}
				held = append(held, taken{more, c.now()})
			}
			settle()
		default:
			settle()
		}
	}
}

// taken is a message as the consumer received it, and when.
type taken struct {
	m  *client.Message
	at time.Time
}

// clientAckBatch bounds the messages one acknowledgement covers in --ack
// client: a consumer's prefetch rarely holds more.
const clientAckBatch = 1024

// received counts one message consumed, now, and its end-to-end latency:
// from its send to the moment it was taken.
func (r *run) received(tr *tracker, t taken, hist *hdrhistogram.Histogram) {
	now := time.Now()
	sentAt, no, seq, ok := stamp(t.m)
	if !ok {
		tr.unexpected.Add(1)
		return
	}
	if !tr.consumed(no, seq) {
		return
	}
	r.consumed.Add(1)
	_ = hist.RecordValue(t.at.Sub(sentAt).Microseconds())
	n := now.UnixNano()
	r.firstRecv.CompareAndSwap(0, n)
	for {
		l := r.lastRecv.Load()
		if n <= l || r.lastRecv.CompareAndSwap(l, n) {
			break
		}
	}
}

// maybeReceived records a message whose acknowledgement or commit may or
// may not have happened.
func (r *run) maybeReceived(tr *tracker, m *client.Message) {
	if _, no, seq, ok := stamp(m); ok {
		tr.maybeConsumed(no, seq)
	}
}

// stamp reads what body wrote into a message: its send time, producer and
// sequence number.
func stamp(m *client.Message) (sentAt time.Time, no int, seq uint64, ok bool) {
	if len(m.Body) < HeaderBytes {
		return time.Time{}, 0, 0, false
	}
	sentAt = time.Unix(0, int64(binary.BigEndian.Uint64(m.Body[0:8])))
	return sentAt, int(binary.BigEndian.Uint32(m.Body[8:12])), binary.BigEndian.Uint64(m.Body[12:20]), true
}
