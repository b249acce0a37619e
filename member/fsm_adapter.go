package member

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
)

// memberFSM adapts the pure member state machine to hashicorp/raft. It holds
// the lock that serialises Apply with every reader.
type memberFSM struct {
	mu sync.RWMutex
	m  *fsm.Member
	// applied is called after each entry, outside the lock, to wake the
	// dispatcher; it must not block.
	applied func()
	// corrupt is called with an entry that cannot be applied; it must stop
	// the node.
	corrupt func(error)
	// since is the log applied since the last snapshot (or restore).
	since logVolume // under mu
}

// volume returns the bytes of the state's messages and the log applied
// since the last snapshot.
func (a *memberFSM) volume() (stateBytes int64, since logVolume) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.m.Stats().Bytes, a.since
}

var _ raft.BatchingFSM = (*memberFSM)(nil)

func (a *memberFSM) Apply(l *raft.Log) interface{} {
	return a.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies the entries of one Raft commit under one lock hold.
// Each response is the entry's []fsm.Result (nil for Raft's own entries).
func (a *memberFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	a.mu.Lock()
	for i, l := range logs {
		a.since.entries++
		a.since.bytes += uint64(len(l.Data))
		if l.Type != raft.LogCommand {
			continue
		}
		res, err := a.m.Apply(l.Index, l.Data)
		if err != nil {
			a.mu.Unlock()
			a.corrupt(fmt.Errorf("entry %d: %w", l.Index, err))
			return out
		}
		out[i] = res
	}
	a.mu.Unlock()
	a.applied()
	return out
}

func (a *memberFSM) Snapshot() (raft.FSMSnapshot, error) {
	// No entry is applied in between: Raft calls Snapshot on the goroutine
	// that applies them. Readers go on during the capture.
	a.mu.Lock()
	a.since = logVolume{}
	a.mu.Unlock()
	a.mu.RLock()
	defer a.mu.RUnlock()
	return memberSnapshot{img: a.m.Capture()}, nil
}

func (a *memberFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m, err := restoreMember(rc, restoreWorkers())
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.m, a.since = m, logVolume{}
	a.mu.Unlock()
	a.applied()
	return nil
}

// read runs fn with the state held against applies.
func (a *memberFSM) read(fn func(m *fsm.Member)) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	fn(a.m)
}

type memberSnapshot struct{ img *fsm.MemberImage }

func (s memberSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.img.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (memberSnapshot) Release() {}
