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

// stagingStore does what Cairn's raftgroup/logcache.go does for StageLogs: a
// leader's new entries are readable from memory until StoreLogs has
// written them, and stay so if the write fails.
type stagingStore struct {
	LogStore
	mu     sync.RWMutex
	staged []*Log
	stages int           // batches staged, so a test can see the path was taken
	delay  time.Duration // how long each write takes, for a slow disk
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
	s.mu.RLock()
	delay := s.delay
	s.mu.RUnlock()
	time.Sleep(delay)
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

// A nonvoter promoted while a voter is down: the configuration entry that
// makes it a voter needs its acknowledgement. Staged, the entry reached the
// followers while the leader wrote it, before the leader counted the
// nonvoter as a voter, so its acknowledgement was dropped and, the group
// idle, the entry never committed (the promotion hung). The leader writes
// configuration entries before it sends them.
func TestCairnStaging_PromotionWithAVoterDownCommits(t *testing.T) {
	// Timeouts that outlast the slow writes below.
	conf := inmemConfig(t)
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	c := MakeCluster(3, t, conf)
	defer c.Close()
	c1 := MakeClusterNoBootstrap(1, t, conf)
	c.Merge(c1)
	c.FullyConnect()
	leader := c.Leader()
	newcomer := c1.rafts[0]
	if err := leader.AddNonvoter(newcomer.localID, newcomer.localAddr, 0, time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Apply([]byte("x"), time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	c.WaitForReplication(1)
	// One voter down, the other slower to write than the leader, the
	// nonvoter quick: it acknowledges while the leader writes.
	var voters []*Raft
	for _, f := range c.Followers() {
		if f != newcomer {
			voters = append(voters, f)
		}
	}
	c.Disconnect(voters[0].localAddr)
	slow(t, leader, 50*time.Millisecond)
	slow(t, voters[1], 150*time.Millisecond)
	promoted := make(chan error, 1)
	go func() { promoted <- leader.AddVoter(newcomer.localID, newcomer.localAddr, 0, time.Second).Error() }()
	select {
	case err := <-promoted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("promoting the nonvoter did not commit within 5 s")
	}
}

// slow makes r's log writes take d.
func slow(t *testing.T, r *Raft, d time.Duration) {
	t.Helper()
	var s *stagingStore
	switch l := r.logs.(type) {
	case *stagingStore:
		s = l
	case monotonicStagingStore:
		s = l.stagingStore
	default:
		t.Fatalf("the log store is %T, not staging", r.logs)
	}
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}
