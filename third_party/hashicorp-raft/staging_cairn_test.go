//go:build cairn_staging

package raft

import (
	"sync"
	"testing"
	"time"
)

// With -tags cairn_staging every cluster these tests make puts its log
// behind stagingStore, so the leader takes Cairn's path in dispatchLogs
// (CAIRN.md): go test -tags cairn_staging .
func init() {
	wrapTestLogStore = func(s LogStore) LogStore {
		if m, ok := s.(MonotonicLogStore); ok {
			return monotonicStagingStore{&stagingStore{LogStore: s}, m}
		}
		return &stagingStore{LogStore: s}
	}
}

// stagingStore does what Cairn's member/logcache.go does for StageLogs: a
// leader's new entries are readable from memory until StoreLogs has
// written them, and stay so if the write fails.
type stagingStore struct {
	LogStore
	mu     sync.RWMutex
	staged []*Log
	stages int // batches staged, so a test can see the path was taken
}

func (s *stagingStore) StageLogs(logs []*Log) {
	s.mu.Lock()
	s.staged = logs
	s.stages++
	s.mu.Unlock()
}

func (s *stagingStore) GetLog(idx uint64, log *Log) error {
	s.mu.RLock()
	if n := len(s.staged); n > 0 {
		if first := s.staged[0].Index; idx >= first && idx-first < uint64(n) {
			*log = *s.staged[idx-first]
			s.mu.RUnlock()
			return nil
		}
	}
	s.mu.RUnlock()
	return s.LogStore.GetLog(idx, log)
}

func (s *stagingStore) StoreLog(l *Log) error { return s.StoreLogs([]*Log{l}) }

func (s *stagingStore) StoreLogs(logs []*Log) error {
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	s.mu.Lock()
	s.staged = nil
	s.mu.Unlock()
	return nil
}

// monotonicStagingStore passes on a store's IsMonotonic; a plain
// stagingStore has none, as the store it wraps.
type monotonicStagingStore struct {
	*stagingStore
	MonotonicLogStore
}

// The tests of this package run through the staged write only if the
// leader takes it.
func TestCairnStaging_LeaderStagesItsEntries(t *testing.T) {
	c := MakeCluster(3, t, nil)
	defer c.Close()
	leader := c.Leader()
	if err := leader.Apply([]byte("x"), time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	store, ok := leader.logs.(*stagingStore)
	if !ok {
		t.Fatalf("the leader's log store is a %T, not a *stagingStore", leader.logs)
	}
	store.mu.RLock()
	defer store.mu.RUnlock()
	if store.stages == 0 {
		t.Fatal("the leader wrote its entries without staging them")
	}
}
