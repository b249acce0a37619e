package member

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Observer is told how long a replica's work took, for metrics; its
// methods are called on hot paths and must not block.
type Observer interface {
	// Sent: an Enqueue or Publish, from its arrival at the host to its
	// commit.
	Sent(time.Duration)
	// Pushed: a Deliver, from its proposal by the host to the push of its
	// messages to the consumer.
	Pushed(time.Duration)
	// Applied: one Raft entry applied to the state machine.
	Applied(time.Duration)
	// LogWritten: Raft entries written to the log, fsync included.
	LogWritten(time.Duration)
}

// isSend says whether body stores messages a client sent or published.
func isSend(body proto.Message) bool {
	switch body.(type) {
	case *fsmpb.Enqueue, *fsmpb.Publish:
		return true
	}
	return false
}

// Snapshots counts the snapshots of the replica's group taken here, and
// its restores from one, since the replica opened.
func (r *Replica) Snapshots() (taken, restored uint64) {
	return r.host.fsm.snapshots.Load(), r.host.fsm.restores.Load()
}

// Stats counts what the member holds, as applied on this replica.
func (r *Replica) Stats() (s fsm.Stats) {
	r.host.fsm.read(r.key, func(m *fsm.Member) { s = m.Stats() })
	return s
}

// Read runs fn on the replica's state, held against applies; fn must not
// keep the state or block.
func (r *Replica) Read(fn func(m *fsm.Member)) { r.host.fsm.read(r.key, fn) }

// timedSend is done, telling the Observer how long body took from now to
// its commit when body is a send.
func (r *Replica) timedSend(body proto.Message, done func(fsm.Result, error)) func(fsm.Result, error) {
	o := r.cfg.Observer
	if o == nil || !isSend(body) {
		return done
	}
	start := time.Now()
	return func(res fsm.Result, err error) {
		if err == nil && res.Err == nil {
			o.Sent(time.Since(start))
		}
		done(res, err)
	}
}
