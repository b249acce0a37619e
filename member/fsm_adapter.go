package member

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
)

// memberFSM adapts the pure state machine of a group to hashicorp/raft:
// one member's (m) in a group of its own, or a shared group's (g, Shared).
// It holds the lock that serialises Apply with every reader.
type memberFSM struct {
	mu sync.RWMutex
	m  *fsm.Member
	g  *fsm.Group
	// applied is called after each batch of entries, outside the lock, with
	// the members they touched (nil in a group of one member), to wake their
	// dispatchers; it must not block.
	applied func(touched []string)
	// corrupt is called once with an entry that cannot be applied (its
	// index), after which the state machine has stopped (stopped): it
	// applies nothing more and refuses to snapshot, as its state is no
	// longer the group's. fatal is called with bodies put away that cannot
	// be read back, and must stop the node.
	corrupt func(index uint64, err error)
	fatal   func(error)
	stopped bool // under mu
	// since is the log applied since the last snapshot (or restore).
	since logVolume // under mu
	// lastIndex is the last entry applied, 0 after a restore, so that a
	// turn starting on an entry Raft keeps from the state machine (a
	// leader's no-op or barrier) is still seen; enoughAt is the entry at
	// which the log since the last snapshot became enough for one, 0
	// before (snapshotPace.due).
	lastIndex, enoughAt uint64 // under mu
	// pace is when the replica snapshots (snapshotPaceOf), kept apart from
	// mu so that setting it never waits behind a capture; ApplyBatch asks
	// for a snapshot on snapshotWanted when the pace says it is due.
	pace           atomic.Pointer[snapshotPace]
	snapshotWanted chan struct{}
	// bodies keeps the bodies put away beyond bodyMemory bytes held
	// (bodies.go); nil keeps them all in memory.
	bodies     *bodyStore
	bodyMemory int64
	// putFailed is when putting bodies away last failed, to log it once a
	// minute rather than on every entry.
	putFailed time.Time // under mu
	log       *slog.Logger
	observer  Observer // nil: not observed
	// snapshots and restores count the state's captures for a snapshot
	// and its restores from one (at a start, or sent by the leader).
	snapshots, restores atomic.Uint64
}

// snapshotEnoughNearTurn says whether the log since the last snapshot is
// long enough for one at a turn (snapshotPace.enoughNearTurn).
func (a *memberFSM) snapshotEnoughNearTurn() bool {
	p := a.pace.Load()
	a.mu.RLock()
	defer a.mu.RUnlock()
	return p != nil && p.enoughNearTurn(a.stateBytesLocked(), a.since)
}

// stateBytesLocked is what the group's members hold together.
func (a *memberFSM) stateBytesLocked() int64 {
	if a.g != nil {
		return a.g.Bytes()
	}
	return a.m.StoredBytes()
}

// absent is what a member not yet added to its shared group reads as: empty.
// Readers never change a state.
var absent = fsm.NewMember()

// memberLocked is the state of the member named key ("" in a group of its
// own): absent if a shared group does not hold it (yet).
func (a *memberFSM) memberLocked(key string) *fsm.Member {
	if a.g == nil {
		return a.m
	}
	if m := a.g.Member(key); m != nil {
		return m
	}
	return absent
}

// askSnapshotLocked asks the replica for a snapshot if one is due after
// the entries first to last were applied.
func (a *memberFSM) askSnapshotLocked(first, last uint64) {
	from := first - 1
	if a.lastIndex != 0 && a.lastIndex < first {
		from = a.lastIndex
	}
	a.lastIndex = last
	p := a.pace.Load()
	if p == nil {
		return
	}
	stateBytes := a.stateBytesLocked()
	if a.enoughAt == 0 && p.enough(stateBytes, a.since) {
		a.enoughAt = last
	}
	if p.due(stateBytes, a.since, from, last, a.enoughAt) {
		select {
		case a.snapshotWanted <- struct{}{}:
		default:
		}
	}
}

var _ raft.BatchingFSM = (*memberFSM)(nil)

// errNotApplied answers a committed entry a stopped replica did not apply:
// the group's other replicas apply it, so what it did is unknown here, and
// a command in it must not be sent again elsewhere as if it had not been.
var errNotApplied = fmt.Errorf("%w: this replica stopped before the entry, which the group's other replicas apply", destination.ErrOutcomeUnknown)

func (a *memberFSM) Apply(l *raft.Log) interface{} {
	return a.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies the entries of one Raft commit under one lock hold.
// Each response is the entry's []fsm.Result (nil for Raft's own entries).
func (a *memberFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	var touched []string
	a.mu.Lock()
	for i, l := range logs {
		a.since.entries++
		a.since.bytes += uint64(len(l.Data))
		if l.Type != raft.LogCommand {
			continue
		}
		if a.stopped {
			out[i] = errNotApplied
			continue
		}
		var res []fsm.Result
		var err error
		start := time.Now()
		if a.g != nil {
			res, err = a.g.Apply(l.Index, l.Data)
			touched = append(touched, a.g.Touched()...)
		} else {
			res, err = a.m.Apply(l.Index, l.Data)
		}
		if a.observer != nil {
			a.observer.Applied(time.Since(start))
		}
		if err != nil {
			// The entries before it applied; their bodies leave them.
			// Those after it in the batch are not applied either.
			a.putBodiesAwayLocked(touched)
			a.stopped = true
			for j := i; j < len(logs); j++ {
				out[j] = errNotApplied
			}
			a.mu.Unlock()
			a.corrupt(l.Index, fmt.Errorf("entry %d: %w", l.Index, err))
			return out
		}
		out[i] = res
	}
	a.putBodiesAwayLocked(touched)
	if len(logs) > 0 {
		a.askSnapshotLocked(logs[0].Index, logs[len(logs)-1].Index)
	}
	a.mu.Unlock()
	a.applied(touched)
	return out
}

// putBodiesAwayLocked puts away the bodies that bring each touched
// member's held bodies over bodyMemory, and forgets those whose messages
// left the state. A failure (a full disk) leaves the bodies in memory.
// a.mu is held.
func (a *memberFSM) putBodiesAwayLocked(touched []string) {
	if a.bodies == nil {
		return
	}
	if a.g == nil {
		a.putAwayLocked(a.m)
		a.bodies.drop(a.m.DroppedBodies())
		return
	}
	for _, key := range touched {
		if m := a.g.Member(key); m != nil {
			a.putAwayLocked(m)
		}
	}
	a.bodies.drop(a.g.DroppedBodies())
}

func (a *memberFSM) putAwayLocked(m *fsm.Member) {
	if err := m.PutBodiesAway(a.bodyMemory, a.bodies.put); err != nil && time.Since(a.putFailed) > time.Minute {
		a.putFailed = time.Now()
		a.log.Warn("cannot put message bodies away on disk; keeping them in memory", "held_bytes", m.HeldBodyBytes(), "err", err)
	}
}

// closeBodies deletes the bodies put away; the next start restores and
// replays them from the log and the snapshot.
func (a *memberFSM) closeBodies() {
	if a.bodies != nil {
		a.bodies.close()
	}
}

// withBody returns msg with its body, read from where ref says when it was
// put away. a.mu is held, so the body's file is not deleted under it; an
// error is fatal, as in deliveriesWithBodies.
func (a *memberFSM) withBody(msg *fsmpb.Message, ref fsm.BodyRef) (*fsmpb.Message, error) {
	if !ref.Away() {
		return msg, nil
	}
	body, err := a.bodies.read(ref, nil)
	if err != nil {
		return nil, fmt.Errorf("message %s: %w", msg.Id, err)
	}
	return fsm.WithBody(msg, body), nil
}

// deliveriesWithBodies gives each delivery its body, reading those put
// away in runs, outside the lock, with the store pinned. A delivery whose
// message left the state since is dropped (it expired, or moved). A body
// that cannot be read is a fault of this node's disk, not of the message:
// the node stops (fatal), and the deliveries stay with their session for
// the next host to push. After the replica stopped, they stay there too.
func (a *memberFSM) deliveriesWithBodies(key string, ds []fsm.Delivery) []fsm.Delivery {
	if !slices.ContainsFunc(ds, func(d fsm.Delivery) bool { return d.Body.Away() }) {
		return ds
	}
	out := make([]fsm.Delivery, 0, len(ds))
	var refs []fsm.BodyRef
	var at []int
	a.mu.RLock()
	for _, d := range ds {
		if d.Body.Away() {
			// The state's message now: a restore may have put its body
			// elsewhere since the Delivery was made.
			msg, ref, ok := a.memberLocked(key).Delivered(d.DeliveryID)
			if !ok || msg.Id != d.Message.Id {
				continue
			}
			d.Message, d.Body = msg, ref
			if ref.Away() {
				refs = append(refs, ref)
				at = append(at, len(out))
			}
		}
		out = append(out, d)
	}
	unpin := a.bodies.pin()
	a.mu.RUnlock()
	defer unpin()
	bodies, err := a.bodies.readAll(refs)
	if err != nil {
		if !errors.Is(err, errBodiesClosed) {
			a.fatal(fmt.Errorf("reading the bodies of %d deliveries put away on disk: %w", len(refs), err))
		}
		return slices.DeleteFunc(out, func(d fsm.Delivery) bool { return d.Body.Away() })
	}
	for k, i := range at {
		out[i].Message, out[i].Body = fsm.WithBody(out[i].Message, bodies[k]), fsm.BodyRef{}
	}
	return out
}

// browse is Member.Browse with every body read back from where it was put
// away.
func (a *memberFSM) browse(key string, now int64, sel *selector.Selector, limit int) ([]fsm.MessageState, error) {
	a.mu.RLock()
	sts := a.memberLocked(key).Browse(now, sel, limit)
	var refs []fsm.BodyRef
	var at []int
	for i, st := range sts {
		if st.Body.Away() {
			refs, at = append(refs, st.Body), append(at, i)
		}
	}
	unpin := a.bodies.pin()
	a.mu.RUnlock()
	defer unpin()
	if len(refs) == 0 {
		return sts, nil
	}
	bodies, err := a.bodies.readAll(refs)
	if err != nil {
		return nil, fmt.Errorf("reading the bodies of %d messages put away on disk: %w", len(refs), err)
	}
	for k, i := range at {
		sts[i].Message, sts[i].Body = fsm.WithBody(sts[i].Message, bodies[k]), fsm.BodyRef{}
	}
	return sts, nil
}

func (a *memberFSM) Snapshot() (raft.FSMSnapshot, error) {
	// No entry is applied in between: Raft calls Snapshot on the goroutine
	// that applies them. Readers go on during the capture.
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: it could not apply an entry, and its state is not the group's", ErrStopped)
	}
	a.since, a.enoughAt = logVolume{}, 0
	a.mu.Unlock()
	a.snapshots.Add(1)
	a.mu.RLock()
	defer a.mu.RUnlock()
	snap := memberSnapshot{release: func() {}}
	var images []*fsm.MemberImage
	if a.g != nil {
		img := a.g.Capture()
		snap.img, images = img, img.Members()
	} else {
		img := a.m.Capture()
		snap.img, images = img, []*fsm.MemberImage{img}
	}
	if a.bodies != nil {
		read := a.bodies.readAhead().read
		for _, img := range images {
			img.SetBodyReader(read)
		}
		snap.release = a.bodies.pin()
	}
	return snap, nil
}

func (a *memberFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	a.restores.Add(1)
	var put *restoreBodies
	var first uint32
	if a.bodies != nil {
		first = a.bodies.roll()
		put = &restoreBodies{store: a.bodies, memory: a.bodyMemory}
	}
	var m *fsm.Member
	var g *fsm.Group
	var err error
	if a.g != nil {
		g, err = restoreGroup(rc, restoreWorkers(), put)
	} else {
		m, err = restoreMember(rc, restoreWorkers(), put)
	}
	if err != nil {
		if a.bodies != nil {
			a.bodies.dropFiles(first, false)
		}
		return err
	}
	if put != nil {
		if perr := put.failed.Load(); perr != nil {
			a.log.Warn("cannot put message bodies away on disk while restoring a snapshot; keeping them in memory", "err", *perr)
		}
	}
	a.mu.Lock()
	a.m, a.g, a.since, a.lastIndex, a.enoughAt = m, g, logVolume{}, 0, 0
	var every []string
	if g != nil {
		every = g.Members()
	}
	if a.bodies != nil {
		if g != nil {
			g.TrackBodies()
		} else {
			m.TrackBodies()
		}
		a.bodies.dropFiles(first, true)
	}
	a.mu.Unlock()
	a.applied(every)
	return nil
}

// read runs fn with the state of the member named key held against
// applies (memberLocked).
func (a *memberFSM) read(key string, fn func(m *fsm.Member)) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	fn(a.memberLocked(key))
}

type memberSnapshot struct {
	img io.WriterTo
	// release lets the body store delete files the image may read.
	release func()
}

func (s memberSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.img.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s memberSnapshot) Release() { s.release() }
