package metagroup

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
)

// metaFSM adapts the pure meta state machine to hashicorp/raft.
type metaFSM struct {
	mu      sync.RWMutex
	m       *fsm.Meta
	changed func()
	// corrupt is called once with an entry that cannot be applied (its
	// index); the replica has stopped then (stopped): it applies nothing
	// more and refuses to snapshot.
	corrupt func(index uint64, err error)
	stopped error // under mu: why the replica stopped, nil while it runs
	// appliedCh is closed, and replaced, whenever the state moves on.
	appliedCh chan struct{} // under mu
}

func (a *metaFSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	a.mu.Lock()
	if a.stopped != nil {
		a.mu.Unlock()
		return a.stopped
	}
	res, err := a.m.Apply(l.Index, l.Data)
	if err != nil {
		a.stopped = fmt.Errorf("%w: this node's meta replica stopped at entry %d, which it cannot apply: %w", ErrStopped, l.Index, err)
	}
	a.movedOnLocked()
	a.mu.Unlock()
	if err != nil {
		a.corrupt(l.Index, err)
		return a.stopped
	}
	a.changed()
	return res
}

func (a *metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.stopped != nil {
		return nil, a.stopped
	}
	var buf bytes.Buffer
	if err := a.m.WriteSnapshot(&buf); err != nil {
		return nil, err
	}
	return metaSnapshot(buf.Bytes()), nil
}

func (a *metaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m, err := fsm.RestoreMeta(rc)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.m = m
	a.movedOnLocked()
	a.mu.Unlock()
	a.changed()
	return nil
}

// stoppedErr is why the replica stopped, nil while it runs.
func (a *metaFSM) stoppedErr() error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.stopped
}

// movedOnLocked wakes those waiting for the state to reach an index.
func (a *metaFSM) movedOnLocked() {
	if a.appliedCh != nil {
		close(a.appliedCh)
	}
	a.appliedCh = make(chan struct{})
}

// maxApplyWait bounds how long a node waits for its own replica of the meta
// group to apply a command the leader applied: the command is committed by
// then, so a replica that lags longer only makes a read stale.
const maxApplyWait = 5 * time.Second

// waitApplied waits until this replica applied the command at index, the
// context ends, or maxApplyWait passed.
func (a *metaFSM) waitApplied(ctx context.Context, index uint64) {
	timeout := time.NewTimer(maxApplyWait)
	defer timeout.Stop()
	for {
		a.mu.Lock()
		if a.appliedCh == nil {
			a.appliedCh = make(chan struct{})
		}
		applied, ch := a.m.Applied(), a.appliedCh
		a.mu.Unlock()
		if applied >= index {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		}
	}
}

func (a *metaFSM) read(fn func(m *fsm.Meta)) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	fn(a.m)
}

type metaSnapshot []byte

func (s metaSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (metaSnapshot) Release() {}
