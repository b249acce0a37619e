package member

import (
	"errors"
	"io"
	"runtime"
	"sync"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A restore reads the snapshot's records on one goroutine, decodes them in
// chunks on the others, and builds the state in order on the caller's: a
// node restarting with a million messages spends most of its restore
// copying bodies into memory the process touches for the first time, and
// that work divides between cores (member/DESIGN.md).
const (
	restoreChunkRecords = 256
	restoreChunkBytes   = 1 << 20
)

// restoreChunk is a run of message records, back to back, and what they
// decode to.
type restoreChunk struct {
	recs []byte
	ends []int
	msgs []*fsmpb.StoredMessage
	err  error
	done chan struct{}
}

// restoreMember reads a snapshot written by fsm.MemberImage.WriteTo with
// workers goroutines decoding its records; with fewer than two it decodes
// them on the caller's.
func restoreMember(r io.Reader, workers int) (*fsm.Member, error) {
	if workers < 2 {
		return fsm.RestoreMember(r)
	}
	snap, err := fsm.OpenMemberSnapshot(r)
	if err != nil {
		return nil, err
	}
	work := make(chan *restoreChunk, workers)
	ordered := make(chan *restoreChunk, 2*workers)
	free := make(chan []byte, 3*workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { readChunks(snap, work, ordered, free, stop) })
	for range workers {
		wg.Go(func() {
			for c := range work {
				decodeChunk(c)
			}
		})
	}
	defer wg.Wait()
	defer close(stop)

	var cur *restoreChunk
	next := 0
	return snap.Restore(func() (*fsmpb.StoredMessage, error) {
		for cur == nil || next == len(cur.msgs) {
			if cur != nil {
				// A chunk's error comes after the messages before it.
				if cur.err != nil {
					return nil, cur.err
				}
				select {
				case free <- cur.recs[:0]:
				default:
				}
			}
			var ok bool
			if cur, ok = <-ordered; !ok {
				return nil, io.ErrUnexpectedEOF
			}
			<-cur.done
			next = 0
		}
		m := cur.msgs[next]
		cur.msgs[next] = nil
		next++
		return m, nil
	})
}

// readChunks cuts the snapshot's records into chunks, hands each to the
// decoders and, in order, to the builder, until the records end, one fails
// to read (the builder then gets the error after the records before it), or
// stop closes.
func readChunks(snap *fsm.MemberSnapshot, work, ordered chan<- *restoreChunk, free <-chan []byte, stop <-chan struct{}) {
	defer close(ordered)
	defer close(work)
	send := func(ch chan<- *restoreChunk, c *restoreChunk) bool {
		select {
		case ch <- c:
			return true
		case <-stop:
			return false
		}
	}
	for {
		c := &restoreChunk{done: make(chan struct{})}
		select {
		case c.recs = <-free:
		default:
		}
		var err error
		for len(c.ends) < restoreChunkRecords && len(c.recs) < restoreChunkBytes {
			if c.recs, err = snap.NextRecord(c.recs); err != nil {
				break
			}
			c.ends = append(c.ends, len(c.recs))
		}
		if len(c.ends) > 0 && (!send(work, c) || !send(ordered, c)) {
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				failed := &restoreChunk{err: err, done: make(chan struct{})}
				close(failed.done)
				send(ordered, failed)
			}
			return
		}
	}
}

func decodeChunk(c *restoreChunk) {
	defer close(c.done)
	c.msgs = make([]*fsmpb.StoredMessage, len(c.ends))
	start := 0
	for i, end := range c.ends {
		sm, err := fsm.DecodeStoredMessage(c.recs[start:end])
		if err != nil {
			c.msgs, c.err = c.msgs[:i], err
			return
		}
		c.msgs[i] = sm
		start = end
	}
}

// restoreWorkers is how many goroutines decode a snapshot's records.
func restoreWorkers() int { return runtime.GOMAXPROCS(0) }
