package raftgroup

import (
	"context"
	"errors"
	"io"

	"golang.org/x/time/rate"
)

// SnapshotSends paces the snapshots every Raft group of a node sends to
// followers that are too far behind for the log (a new replica, a node
// back empty): at most a few at once, and all of them together at most a
// number of bytes a second, so that repairing a node that held a thousand
// members leaves bandwidth and disk to client traffic. Other Raft traffic
// is not paced. A nil *SnapshotSends paces nothing.
type SnapshotSends struct {
	slots   chan struct{}
	limiter *rate.Limiter // nil: no bandwidth limit
}

// snapshotChunk is the most a paced snapshot send reads before it waits
// for the bandwidth to allow it, and the limiter's burst.
const snapshotChunk = 256 << 10

// NewSnapshotSends paces a node's snapshot sends: at most transfers at once
// (at least 1), together at most bytesPerSecond (0 or less: no limit).
func NewSnapshotSends(transfers int, bytesPerSecond int64) *SnapshotSends {
	s := &SnapshotSends{slots: make(chan struct{}, max(transfers, 1))}
	if bytesPerSecond > 0 {
		s.limiter = rate.NewLimiter(rate.Limit(bytesPerSecond), snapshotChunk)
	}
	return s
}

// errGroupClosed ends a snapshot send that waited while its group closed.
var errGroupClosed = errors.New("raft group closed while its snapshot send waited")

// send runs one snapshot send in a slot, reading the snapshot through the
// bandwidth limit; it gives up waiting once done is closed.
func (s *SnapshotSends) send(done <-chan struct{}, data io.Reader, send func(io.Reader) error) error {
	if s == nil {
		return send(data)
	}
	select {
	case s.slots <- struct{}{}:
	case <-done:
		return errGroupClosed
	}
	defer func() { <-s.slots }()
	if s.limiter == nil {
		return send(data)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return send(&pacedReader{r: data, ctx: ctx, limiter: s.limiter})
}

// pacedReader reads r no faster than limiter allows.
type pacedReader struct {
	r       io.Reader
	ctx     context.Context
	limiter *rate.Limiter
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if len(b) > snapshotChunk {
		b = b[:snapshotChunk]
	}
	n, err := p.r.Read(b)
	if n > 0 {
		if werr := p.limiter.WaitN(p.ctx, n); werr != nil {
			return n, errGroupClosed
		}
	}
	return n, err
}
