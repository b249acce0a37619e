package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/cairnmq/cairn/client"
)

// produce sends this producer's share: Count split evenly, or until
// Duration ends.
func (r *run) produce(ctx context.Context, no int, s *client.Session, p *client.Producer, start time.Time) {
	take := r.schedule(ctx, no, start)
	hist := newHist()
	defer r.mergeSend(hist)
	if r.cfg.Transacted > 0 {
		r.produceTx(ctx, no, s, p, take, hist)
		return
	}
	var histMu sync.Mutex
	finish := func(seq uint64, at time.Time, err error) {
		d := time.Since(at)
		if err != nil {
			r.sendErrors.Add(1)
			if !errors.Is(err, client.ErrDeliveryUnknown) && !errors.Is(err, client.ErrLostServer) {
				r.t.notSent(no, seq)
			}
			return
		}
		r.t.sent(no, seq, true)
		r.sent.Add(1)
		histMu.Lock()
		_ = hist.RecordValue(d.Microseconds())
		histMu.Unlock()
	}
	if r.cfg.Mode == Sync {
		for {
			seq, at, ok := take()
			if !ok {
				return
			}
			r.t.sending(no, seq)
			_, err := p.Send(ctx, &client.Message{Body: r.body(no, seq, at)})
			finish(seq, at, err)
		}
	}
	// Async: at most Window sends unconfirmed; SendAsync carries the ones
	// that queue up behind a batch in flight in the next batch.
	window := make(chan struct{}, r.cfg.Window)
	var wg sync.WaitGroup
	for {
		window <- struct{}{}
		seq, at, ok := take()
		if !ok {
			break
		}
		r.t.sending(no, seq)
		wg.Add(1)
		p.SendAsync(&client.Message{Body: r.body(no, seq, at)}, func(_ client.Receipt, err error) {
			finish(seq, at, err)
			<-window
			wg.Done()
		})
	}
	wg.Wait()
}

// schedule returns producer no's take: it hands out the next sequence
// number and its scheduled time (waiting for it under --rate), or false
// once the producer's share of --count or the --duration is used up.
func (r *run) schedule(ctx context.Context, no int, start time.Time) func() (uint64, time.Time, bool) {
	share := -1
	if r.cfg.Count > 0 {
		share = r.cfg.Count / r.cfg.Producers
		if no < r.cfg.Count%r.cfg.Producers {
			share++
		}
	}
	end := start.Add(r.cfg.Duration)
	var interval time.Duration
	if r.cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(r.cfg.Producers) / float64(r.cfg.Rate))
	}
	var next atomic.Int64 // the next sequence number to send
	return func() (uint64, time.Time, bool) {
		seq := next.Add(1) - 1
		if share >= 0 && seq >= int64(share) {
			return 0, time.Time{}, false
		}
		at := time.Now()
		if interval > 0 {
			at = start.Add(time.Duration(seq) * interval)
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
		}
		if share < 0 && !at.Before(end) {
			return 0, time.Time{}, false
		}
		return uint64(seq), at, ctx.Err() == nil
	}
}

// produceTx sends transactions of Transacted messages; a message counts as
// sent when its transaction committed, its latency from its own send to the
// commit.
func (r *run) produceTx(ctx context.Context, no int, s *client.Session, p *client.Producer, take func() (uint64, time.Time, bool), hist *hdrhistogram.Histogram) {
	type pending struct {
		seq uint64
		at  time.Time
	}
	for done := false; !done; {
		var tx []pending
		var err error
		for len(tx) < r.cfg.Transacted {
			seq, at, ok := take()
			if !ok {
				done = true
				break
			}
			r.t.sending(no, seq)
			tx = append(tx, pending{seq, at})
			if _, err = p.Send(ctx, &client.Message{Body: r.body(no, seq, at)}); err != nil {
				break
			}
		}
		if len(tx) == 0 {
			return
		}
		if err == nil {
			err = s.Commit(ctx)
		} else {
			_ = s.Rollback(ctx)
		}
		for _, m := range tx {
			// A rolled back transaction stored nothing; only an unknown
			// commit leaves its messages possibly stored.
			r.t.sent(no, m.seq, err == nil)
			if err != nil {
				if !errors.Is(err, client.ErrCommitUnknown) {
					r.t.notSent(no, m.seq)
				}
				r.sendErrors.Add(1)
				continue
			}
			r.sent.Add(1)
			_ = hist.RecordValue(time.Since(m.at).Microseconds())
		}
	}
}

func (r *run) mergeSend(h *hdrhistogram.Histogram) {
	r.histMu.Lock()
	defer r.histMu.Unlock()
	r.sendHist.Merge(h)
}

// body is a message of Size bytes: send time, producer, sequence, filler.
func (r *run) body(no int, seq uint64, at time.Time) []byte {
	b := make([]byte, r.cfg.Size)
	binary.BigEndian.PutUint64(b[0:8], uint64(at.UnixNano()))
	binary.BigEndian.PutUint32(b[8:12], uint32(no))
	binary.BigEndian.PutUint64(b[12:20], seq)
	return b
}
