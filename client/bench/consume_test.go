package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// script plays a consumer: receive hands out what is left of the last
// arrival, or else the first message of the next one; receiveMore only what
// is left; once all came, receive reports the consumer closed. Every acknowledgement or commit answers the
// next of outcomes and moves the clock on by settleTakes.
type script struct {
	arrivals    [][]*client.Message
	more        []*client.Message
	outcomes    []error
	settleCalls int
	clock       time.Time
	settleTakes time.Duration
}

func (sc *script) consumer() consumer {
	settle := func() error {
		sc.clock = sc.clock.Add(sc.settleTakes)
		sc.settleCalls++
		if len(sc.outcomes) == 0 {
			return nil
		}
		err := sc.outcomes[0]
		sc.outcomes = sc.outcomes[1:]
		return err
	}
	return consumer{
		receive: func(time.Duration) (*client.Message, error) {
			if len(sc.more) > 0 {
				m := sc.more[0]
				sc.more = sc.more[1:]
				return m, nil
			}
			if len(sc.arrivals) == 0 {
				return nil, client.ErrClosed
			}
			a := sc.arrivals[0]
			sc.arrivals = sc.arrivals[1:]
			sc.more = a[1:]
			return a[0], nil
		},
		receiveMore: func() *client.Message {
			if len(sc.more) == 0 {
				return nil
			}
			m := sc.more[0]
			sc.more = sc.more[1:]
			return m
		},
		ack:    func(*client.Message) error { return settle() },
		commit: settle,
		now:    func() time.Time { return sc.clock },
	}
}

// benchRun is a run of one producer that sent n messages at sentAt, and
// those messages.
func benchRun(cfg Config, n int, sentAt time.Time) (*run, []*client.Message) {
	cfg.Size = HeaderBytes
	r := &run{cfg: cfg, t: newTrackers(1, 1), stopConsumers: make(chan struct{})}
	msgs := make([]*client.Message, n)
	for i := range msgs {
		r.t.sending(0, uint64(i))
		r.t.sent(0, uint64(i), true)
		msgs[i] = &client.Message{Body: r.body(0, uint64(i), sentAt)}
	}
	return r, msgs
}

// A message's end-to-end latency ends when the consumer took it, not when
// the acknowledgement or commit that counts it returned.
func TestConsume_EndToEndEndsWhenTaken(t *testing.T) {
	for _, cfg := range []Config{{Ack: AckClient}, {Transacted: 2}} {
		sentAt := time.Unix(1000, 0)
		r, msgs := benchRun(cfg, 2, sentAt)
		sc := &script{arrivals: [][]*client.Message{msgs}, clock: sentAt.Add(5 * time.Millisecond), settleTakes: 50 * time.Millisecond}
		hist := newHist()
		c := sc.consumer()
		c.t = r.t[0]
		r.consumeWith(context.Background(), c, hist)
		if hist.TotalCount() != 2 || hist.Max() < 4900 || hist.Max() > 5100 {
			t.Errorf("%+v: %d latencies, the largest %d µs; want 2 of 5,000: from the send to the take, not to the settling", cfg, hist.TotalCount(), hist.Max())
		}
		if lost, dups, unexpected := r.t.verdict(); r.consumed.Load() != 2 || lost+dups+unexpected != 0 {
			t.Errorf("%+v: consumed %d, lost %d, duplicates %d, unexpected %d; want 2 consumed and nothing else", cfg, r.consumed.Load(), lost, dups, unexpected)
		}
	}
}

// What an acknowledgement or a commit that failed did to its messages
// decides how they count: kept by the session, they count with its next
// success; returned, they count when they come again; of unknown outcome,
// they are not lost if they never come again, nor duplicated if they do.
func TestConsume_FailedSettlements(t *testing.T) {
	lostServer := client.ErrLostServer
	notAnswered := errors.New("request timed out")
	for _, c := range []struct {
		name     string
		cfg      Config
		outcomes []error
		again    bool // the batch comes again after the failure
		consumed int64
	}{
		{"ack not answered, kept", Config{Ack: AckClient}, []error{notAnswered}, false, 2},
		{"ack of unknown outcome, not again", Config{Ack: AckClient}, []error{lostServer}, false, 0},
		{"ack of unknown outcome, again", Config{Ack: AckClient}, []error{lostServer}, true, 2},
		{"commit refused, kept", Config{Transacted: 2}, []error{notAnswered}, false, 2},
		{"commit rolled back, again", Config{Transacted: 2}, []error{client.ErrTransactionRolledBack}, true, 2},
		{"commit unknown, not again", Config{Transacted: 2}, []error{client.ErrCommitUnknown}, false, 0},
	} {
		r, msgs := benchRun(c.cfg, 2, time.Now())
		sc := &script{arrivals: [][]*client.Message{msgs}, outcomes: c.outcomes, clock: time.Now()}
		if c.again {
			sc.arrivals = append(sc.arrivals, msgs)
		}
		k := sc.consumer()
		k.t = r.t[0]
		r.consumeWith(context.Background(), k, newHist())
		lost, dups, unexpected := r.t.verdict()
		if r.consumed.Load() != c.consumed || lost+dups+unexpected != 0 || !r.t.allConsumed() {
			t.Errorf("%s: consumed %d (want %d), lost %d, duplicates %d, unexpected %d, all consumed %v after %d settlements",
				c.name, r.consumed.Load(), c.consumed, lost, dups, unexpected, r.t.allConsumed(), sc.settleCalls)
		}
	}
}
