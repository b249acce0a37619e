package member

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A restore reads the snapshot's records on one goroutine, decodes them in
// chunks on others, and builds the state in order on the caller's: a node
// restarting with a million messages spends most of its restore copying
// bodies into memory the process touches for the first time, and that work
// divides between cores (member/DESIGN.md).
const (
	// A chunk ends after this many records, or once it holds this many
	// bytes (a record larger than that is a chunk of its own).
	restoreChunkRecords = 256
	restoreChunkBytes   = 1 << 20
	// restoreBudget bounds the bytes of records read and not yet built into
	// the state, in units of restoreChunkBytes: 16 MiB, whatever the number
	// of cores or the size of the messages (a record larger than the budget
	// is read alone).
	restoreBudget = 16
	// maxRestoreWorkers bounds the decoders: two cores halved the time,
	// and more only hold more chunks.
	maxRestoreWorkers = 8
)

// restoreChunk is a run of message records, back to back, and what they
// decode to.
type restoreChunk struct {
	recs []byte
	ends []int
	// tokens is what the chunk holds of the budget.
	tokens int
	msgs   []*fsmpb.StoredMessage
	// refs are where msgs' bodies were put away, if they were.
	refs []fsm.BodyRef
	err  error
	done chan struct{}
}

// restoreWorkers is how many goroutines decode a snapshot's records.
func restoreWorkers() int { return min(runtime.GOMAXPROCS(0), maxRestoreWorkers) }

// restoreMember reads a snapshot written by fsm.MemberImage.WriteTo with
// workers goroutines decoding its records, which put away the bodies that
// do not fit in memory when put is not nil; with fewer than two workers and
// no bodies to put away it decodes them on the caller's.
func restoreMember(r io.Reader, workers int, put *restoreBodies) (*fsm.Member, error) {
	if workers < 2 && put == nil {
		return fsm.RestoreMember(r)
	}
	snap, err := fsm.OpenMemberSnapshot(r)
	if err != nil {
		return nil, err
	}
	return restoreFrom(snap, workers, put)
}

func restoreFrom(snap *fsm.MemberSnapshot, workers int, put *restoreBodies) (*fsm.Member, error) {
	d := decodeRecords(snap, max(workers, 1), put)
	defer d.close()
	return snap.Restore(d.next)
}

// restoreGroup reads a snapshot written by fsm.GroupImage.WriteTo, each
// member as restoreMember does.
func restoreGroup(r io.Reader, workers int, put *restoreBodies) (*fsm.Group, error) {
	snap, err := fsm.OpenGroupSnapshot(r)
	if err != nil {
		return nil, err
	}
	var members []*fsm.Member
	for {
		name, ms, err := snap.NextMember()
		if errors.Is(err, io.EOF) {
			return snap.NewGroupFrom(members)
		}
		if err != nil {
			return nil, err
		}
		m, err := restoreFrom(ms, workers, put)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", name, err)
		}
		members = append(members, m)
	}
}

// restoreBodies puts away, during a restore, the bodies past the first
// memory bytes of them in the snapshot's order, whatever their messages'
// state: unlike the applies, which put away only bodies that wait, as the
// snapshot holds them all and memory must not.
type restoreBodies struct {
	store  *bodyStore
	memory int64
	held   atomic.Int64
	// failed is the first put that failed; its bodies, and those after,
	// stay in memory rather than fail the restore.
	failed atomic.Pointer[error]
}

// takeOut puts away the bodies of msgs that do not fit in memory, emptying
// them in msgs; refs[i] is where msgs[i]'s went.
func (p *restoreBodies) takeOut(msgs []*fsmpb.StoredMessage) []fsm.BodyRef {
	if p == nil || p.failed.Load() != nil {
		return nil
	}
	var bodies [][]byte
	var at []int
	for i, sm := range msgs {
		n := int64(len(sm.Message.Body))
		if n > 0 && p.held.Add(n) > p.memory {
			bodies = append(bodies, sm.Message.Body)
			at = append(at, i)
		}
	}
	if len(bodies) == 0 {
		return nil
	}
	got, err := p.store.put(bodies)
	if err != nil {
		p.failed.CompareAndSwap(nil, &err)
		return nil
	}
	refs := make([]fsm.BodyRef, len(msgs))
	for k, i := range at {
		refs[i] = got[k]
		msgs[i].Message.Body = nil
	}
	return refs
}

// recordDecoder hands out a snapshot's records decoded on several
// goroutines, in the order they were written.
type recordDecoder struct {
	ordered <-chan *restoreChunk
	free    chan []byte
	budget  chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	cur     *restoreChunk
	at      int
}

// decodeRecords starts reading snap's records and decoding them on workers
// goroutines; close stops them and waits for them.
func decodeRecords(snap *fsm.MemberSnapshot, workers int, put *restoreBodies) *recordDecoder {
	work := make(chan *restoreChunk, workers)
	ordered := make(chan *restoreChunk, 2*workers)
	d := &recordDecoder{
		ordered: ordered,
		free:    make(chan []byte, restoreBudget),
		budget:  make(chan struct{}, restoreBudget),
		stop:    make(chan struct{}),
	}
	d.wg.Go(func() { d.read(snap, work, ordered) })
	for range workers {
		d.wg.Go(func() {
			for c := range work {
				decodeChunk(c, put)
			}
		})
	}
	return d
}

// next returns the next message, in the order of the snapshot, and where
// its body was put away if it was.
func (d *recordDecoder) next() (*fsmpb.StoredMessage, fsm.BodyRef, error) {
	for d.cur == nil || d.at == len(d.cur.msgs) {
		if d.cur != nil {
			// A chunk's error comes after the messages before it.
			if d.cur.err != nil {
				return nil, fsm.BodyRef{}, d.cur.err
			}
			d.release(d.cur)
		}
		var ok bool
		if d.cur, ok = <-d.ordered; !ok {
			return nil, fsm.BodyRef{}, fmt.Errorf("%w: %v", fsm.ErrCorrupt, io.ErrUnexpectedEOF)
		}
		<-d.cur.done
		d.at = 0
	}
	m := d.cur.msgs[d.at]
	d.cur.msgs[d.at] = nil
	var ref fsm.BodyRef
	if d.cur.refs != nil {
		ref = d.cur.refs[d.at]
	}
	d.at++
	return m, ref, nil
}

// release keeps a built chunk's buffer for the reader, unless it grew past
// a chunk's size for one large record, and gives its budget back: in that
// order, so that the chunk the budget lets the reader send is followed by
// one read into the buffer.
func (d *recordDecoder) release(c *restoreChunk) {
	if cap(c.recs) <= 2*restoreChunkBytes {
		select {
		case d.free <- c.recs[:0]:
		default:
		}
	}
	for range c.tokens {
		<-d.budget
	}
}

func (d *recordDecoder) close() {
	close(d.stop)
	d.wg.Wait()
}

// read cuts the snapshot's records into chunks and hands each to the
// decoders and, in order, to next, until the records end, one fails to
// read (next then returns the error after the records before it), or close
// is called. It reads ahead at most restoreBudget chunks' worth of bytes.
func (d *recordDecoder) read(snap *fsm.MemberSnapshot, work, ordered chan<- *restoreChunk) {
	defer close(ordered)
	defer close(work)
	send := func(ch chan<- *restoreChunk, c *restoreChunk) bool {
		select {
		case ch <- c:
			return true
		case <-d.stop:
			return false
		}
	}
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		c := &restoreChunk{done: make(chan struct{})}
		select {
		case c.recs = <-d.free:
		default:
		}
		var err error
		for len(c.ends) < restoreChunkRecords && len(c.recs) < restoreChunkBytes {
			if c.recs, err = snap.NextRecord(c.recs); err != nil {
				break
			}
			c.ends = append(c.ends, len(c.recs))
		}
		if len(c.ends) > 0 {
			c.tokens = min(max(1, len(c.recs)/restoreChunkBytes), restoreBudget)
			for range c.tokens {
				select {
				case d.budget <- struct{}{}:
				case <-d.stop:
					return
				}
			}
			if !send(work, c) || !send(ordered, c) {
				return
			}
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

// decodeChunk decodes c's records. With bodies to put away, each body is
// first a slice of c.recs: most go to a file from there, and those kept in
// memory are copied, as c.recs is reused once the chunk is built.
func decodeChunk(c *restoreChunk, put *restoreBodies) {
	defer close(c.done)
	decode := fsm.DecodeStoredMessage
	if put != nil {
		decode = fsm.DecodeStoredMessageAliasing
	}
	c.msgs = make([]*fsmpb.StoredMessage, len(c.ends))
	start := 0
	for i, end := range c.ends {
		sm, err := decode(c.recs[start:end])
		if err != nil {
			c.msgs, c.err = c.msgs[:i], err
			break
		}
		c.msgs[i] = sm
		start = end
	}
	c.refs = put.takeOut(c.msgs)
	if put != nil {
		for _, sm := range c.msgs {
			if len(sm.Message.Body) > 0 {
				sm.Message.Body = bytes.Clone(sm.Message.Body)
			}
		}
	}
}
