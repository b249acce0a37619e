package member

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Batching limits: one Raft entry carries at most this many commands or
// about this many bytes. Concurrent proposals that queue up while Raft
// writes the previous entry go into the next one, so one fsync carries many
// sends; the limits keep one entry from stalling followers.
const (
	maxBatchCommands = 1024
	maxBatchBytes    = 4 << 20
	// maxInflight bounds the entries handed to Raft whose results are not back.
	maxInflight = 64
	// enqueueTimeout bounds the wait for room in Raft's apply queue.
	enqueueTimeout = 10 * time.Second
)

// ErrNotLeader: this replica is not its group's leader, so the command was
// not appended to the log; it is safe to send it elsewhere
// (destination.ErrNotSent).
var ErrNotLeader = destination.MarkNotSent(errors.New("member: not the leader of its group"))

// ErrBusy: Raft's queue stayed full for the whole enqueue timeout; the
// command was not appended and may be sent again (destination.ErrNotSent).
var ErrBusy = destination.MarkNotSent(errors.New("member: raft is too busy to take the command"))

type proposal struct {
	cmd *fsmpb.Command
	// buf is the recycled buffer cmd's payload was marshalled into.
	buf  *[]byte
	done func(fsm.Result, error)
}

// command is a body to propose, the member of a shared group it is for
// ("" in a group of one member), and what to call with its result.
type command struct {
	member string
	body   proto.Message
	done   func(fsm.Result, error)
}

type inflight struct {
	future raft.ApplyFuture
	batch  []proposal
}

// proposer packs concurrent proposals into Raft entries and hands each
// proposal its own result.
type proposer struct {
	raft *raft.Raft
	// mu makes queueGroup and close exclusive, so no proposal is queued
	// after the batcher has stopped.
	mu     sync.RWMutex
	closed bool
	// queue holds proposals that go into one entry together.
	queue    chan []proposal
	inflight chan inflight
	stop     chan struct{}
	done     chan struct{}
}

func newProposer(r *raft.Raft) *proposer {
	p := &proposer{
		raft:     r,
		queue:    make(chan []proposal, maxBatchCommands),
		inflight: make(chan inflight, maxInflight),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go p.batch()
	go p.wait()
	return p
}

// submit queues cmds to go into one Raft entry together, in this order;
// each done is called once with its command's result, on the proposer's
// goroutine, and must not block.
func (p *proposer) submit(cmds ...command) { p.queueGroup(p.prepare(cmds...)) }

// prepare encodes cmds for queueGroup; a command that does not encode is
// answered with its error at once and left out.
func (p *proposer) prepare(cmds ...command) []proposal {
	group := make([]proposal, 0, len(cmds))
	for _, c := range cmds {
		q, err := newProposal(c.member, c.body, c.done)
		if err != nil {
			c.done(fsm.Result{}, err)
			continue
		}
		group = append(group, q)
	}
	return group
}

// queueGroup queues proposals that go into one entry together.
func (p *proposer) queueGroup(group []proposal) {
	if len(group) == 0 {
		return
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		finish(group, nil, ErrStopped)
		return
	}
	p.queue <- group
}

func (p *proposer) batch() {
	defer close(p.inflight)
	for {
		var batch []proposal
		select {
		case batch = <-p.queue:
		case <-p.stop:
			p.failQueued()
			return
		}
		size := groupSize(batch)
	drain:
		for len(batch) < maxBatchCommands && size < maxBatchBytes {
			select {
			case group := <-p.queue:
				batch = append(batch, group...)
				size += groupSize(group)
			default:
				break drain
			}
		}
		cmds := make([]*fsmpb.Command, len(batch))
		for i, q := range batch {
			cmds[i] = q.cmd
		}
		data, err := fsm.Encode(cmds...)
		for _, q := range batch {
			q.recycle()
		}
		if err != nil {
			finish(batch, nil, err)
			continue
		}
		// wait drains inflight until it is closed, so this send ends.
		p.inflight <- inflight{future: p.raft.Apply(data, enqueueTimeout), batch: batch}
	}
}

// payloads recycles the buffers commands are marshalled into: the batcher
// copies each payload into its entry and drops it, so a fresh one was 1 KiB
// more garbage per message sent, on the leader, which allocates the most.
var payloads = sync.Pool{New: func() any { return new([]byte) }}

// maxRecycledPayload bounds the buffers kept for reuse. It is an entry's
// worth, so the sends of asynchronous producers, which come in batches of
// up to 512 KiB, are recycled too (a 64 KiB bound left them all to the
// collector: a fifth of what the leader allocated in a run of them).
const maxRecycledPayload = maxBatchBytes

// smallPayload is the size up to which a buffer is always recycled. A
// larger one goes back only when its payload filled a quarter of it: the
// pool hands any buffer to any command, and a batch-sized buffer that keeps
// carrying acks would otherwise stay in use for as long as traffic lasts
// (golang/go#23199), so large buffers are kept only for about as many
// large payloads as are in flight.
const smallPayload = 64 << 10

// newProposal marshals body into a recycled buffer; the batcher hands it
// back (recycle) once it has copied the payload into the entry.
func newProposal(member string, body proto.Message, done func(fsm.Result, error)) (proposal, error) {
	buf := payloads.Get().(*[]byte)
	cmd, err := fsm.NewCommandInto(*buf, body)
	if err != nil {
		payloads.Put(buf)
		return proposal{}, err
	}
	cmd.Member = member
	return proposal{cmd: cmd, buf: buf, done: done}, nil
}

// recycle hands the payload's buffer back once nothing reads it.
func (q proposal) recycle() {
	if c := cap(q.cmd.Payload); q.buf != nil && c <= maxRecycledPayload && (c <= smallPayload || len(q.cmd.Payload) >= c/4) {
		*q.buf = q.cmd.Payload[:0]
		payloads.Put(q.buf)
	}
	q.cmd.Payload = nil
}

func groupSize(group []proposal) int {
	n := 0
	for _, q := range group {
		n += proto.Size(q.cmd)
	}
	return n
}

func (p *proposer) failQueued() {
	for {
		select {
		case group := <-p.queue:
			finish(group, nil, ErrStopped)
		default:
			return
		}
	}
}

func (p *proposer) wait() {
	defer close(p.done)
	for f := range p.inflight {
		if err := f.future.Error(); err != nil {
			finish(f.batch, nil, classify(err))
			continue
		}
		if err, ok := f.future.Response().(error); ok { // the replica stopped at or before the entry
			finish(f.batch, nil, err)
			continue
		}
		results, _ := f.future.Response().([]fsm.Result)
		finish(f.batch, results, nil)
	}
}

func finish(batch []proposal, results []fsm.Result, err error) {
	for i, q := range batch {
		switch {
		case err != nil:
			q.done(fsm.Result{}, err)
		case i < len(results):
			q.done(results[i], nil)
		default:
			q.done(fsm.Result{}, fmt.Errorf("member: entry applied with %d results for %d commands", len(results), len(batch)))
		}
	}
}

// close stops taking proposals and waits for the in-flight ones to end.
func (p *proposer) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
}

// classify tells a command that never reached the log from one that may have.
func classify(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrBusy, err)
	}
	// Leadership lost, shutdown, aborted by a restore, or anything this
	// code does not know: the entry may be in the log.
	return fmt.Errorf("member: %w: %v", destination.ErrOutcomeUnknown, err)
}
