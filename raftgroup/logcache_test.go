package raftgroup

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// readCounter counts the reads that reach the store behind the cache.
type readCounter struct {
	*raft.InmemStore
	reads int
}

func (s *readCounter) GetLog(idx uint64, l *raft.Log) error {
	s.reads++
	return s.InmemStore.GetLog(idx, l)
}

func entries(from, to uint64, size int) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, size)})
	}
	return out
}

// cached reports which of the indexes from..to the cache answers without the
// store, and fails on a wrong or missing entry.
func cached(t *testing.T, c *logCache, s *readCounter, from, to uint64) []uint64 {
	t.Helper()
	var hits []uint64
	for i := from; i <= to; i++ {
		before := s.reads
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if l.Index != i || len(l.Data) == 0 || l.Data[0] != byte(i) {
			t.Fatalf("GetLog(%d) returned index %d with data %v", i, l.Index, l.Data[:min(len(l.Data), 4)])
		}
		if s.reads == before {
			hits = append(hits, i)
		}
	}
	return hits
}

func newTestCache(maxEntries, maxBytes int) (*logCache, *readCounter) {
	s := &readCounter{InmemStore: raft.NewInmemStore()}
	return newLogCache(s, maxEntries, maxBytes), s
}

// The cache keeps the newest entries within its byte bound, whatever their
// count: large entries leave fewer in memory.
func TestLogCache_KeepsTheNewestWithinTheByteBound(t *testing.T) {
	c, s := newTestCache(512, 10_000)
	if err := c.StoreLogs(entries(1, 10, 3_000)); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(cached(t, c, s, 1, 10)), "[8 9 10]"; got != want {
		t.Errorf("cached after ten entries of 3,000 bytes: %s, want %s", got, want)
	}
	if c.bytes != 9_000 {
		t.Errorf("cache counts %d bytes, want 9000", c.bytes)
	}
	// One entry over the bound is still kept: it is the one a follower is
	// about to apply.
	if err := c.StoreLog(entries(11, 11, 50_000)[0]); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(cached(t, c, s, 9, 11)), "[11]"; got != want {
		t.Errorf("cached after an entry over the bound: %s, want %s", got, want)
	}
}

func TestLogCache_KeepsTheNewestWithinTheCount(t *testing.T) {
	c, s := newTestCache(4, 1<<20)
	for i := uint64(1); i <= 10; i++ {
		if err := c.StoreLog(entries(i, i, 10)[0]); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmt.Sprint(cached(t, c, s, 1, 10)), "[7 8 9 10]"; got != want {
		t.Errorf("cached: %s, want %s", got, want)
	}
	if cap(c.entries) > 16 {
		t.Errorf("the cache's array grew to %d for 4 entries", cap(c.entries))
	}
}

// A snapshot's compaction deletes the log's head: the newer entries stay
// cached, and the bytes counted are theirs.
func TestLogCache_CompactionKeepsTheNewerEntries(t *testing.T) {
	c, s := newTestCache(512, 1<<20)
	if err := c.StoreLogs(entries(1, 8, 10)); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(cached(t, c, s, 6, 8)), "[6 7 8]"; got != want {
		t.Errorf("cached after the head was deleted: %s, want %s", got, want)
	}
	if c.bytes != 30 {
		t.Errorf("cache counts %d bytes for 3 entries of 10", c.bytes)
	}
	if err := c.DeleteRange(7, 7); err != nil {
		t.Fatal(err)
	}
	if len(c.entries) != 0 || c.bytes != 0 {
		t.Errorf("after deleting an entry from the middle, %d entries and %d bytes are cached; want none, as 6 and 8 do not follow", len(c.entries), c.bytes)
	}
	if err := c.StoreLogs(entries(9, 10, 10)); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	if len(c.entries) != 0 || c.bytes != 0 {
		t.Errorf("after deleting the whole log, %d entries and %d bytes are cached", len(c.entries), c.bytes)
	}
}

// A deleted range, or entries that do not follow the cached ones (a
// follower's log replaced after a snapshot), leave nothing stale behind.
func TestLogCache_ForgetsWhatNoLongerFollows(t *testing.T) {
	c, s := newTestCache(512, 1<<20)
	if err := c.StoreLogs(entries(1, 5, 10)); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRange(4, 5); err != nil {
		t.Fatal(err)
	}
	replaced := entries(4, 5, 10)
	for _, l := range replaced {
		l.Term = 2
	}
	if err := c.StoreLogs(replaced); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(cached(t, c, s, 1, 5)), "[1 2 3 4 5]"; got != want {
		t.Errorf("cached after the tail was replaced: %s, want %s", got, want)
	}
	var l raft.Log
	if err := c.GetLog(5, &l); err != nil || l.Term != 2 {
		t.Errorf("entry 5 has term %d (%v), want the replacement's 2", l.Term, err)
	}

	if err := c.StoreLogs(entries(100, 101, 10)); err != nil {
		t.Fatal(err)
	}
	if c.bytes != 20 {
		t.Errorf("cache counts %d bytes after a jump to 100, want 20", c.bytes)
	}
	if got, want := fmt.Sprint(cached(t, c, s, 100, 101)), "[100 101]"; got != want {
		t.Errorf("cached after a jump: %s, want %s", got, want)
	}
}

// failingStore refuses every write.
type failingStore struct{ *raft.InmemStore }

func (failingStore) StoreLogs([]*raft.Log) error { return errors.New("disk on fire") }

// A leader's staged entries are read from memory before the store has them
// (its followers are sent them meanwhile), stay cached once written, and
// stay readable if the write fails: the replication may still read them
// until the leader has ended the process.
func TestLogCache_StagedEntriesReadableUntilStored(t *testing.T) {
	c, s := newTestCache(512, 1<<20)
	if err := c.StoreLogs(entries(1, 2, 100)); err != nil {
		t.Fatal(err)
	}
	staged := entries(3, 5, 100)
	c.StageLogs(staged)
	if got, want := fmt.Sprint(cached(t, c, s, 1, 5)), "[1 2 3 4 5]"; got != want {
		t.Errorf("cached with 3..5 staged: %s, want %s", got, want)
	}
	if last, _ := s.LastIndex(); last != 2 {
		t.Fatalf("staging wrote to the store: its last index is %d, want 2", last)
	}
	if err := c.StoreLogs(staged); err != nil {
		t.Fatal(err)
	}
	if len(c.staged) != 0 {
		t.Errorf("%d entries still staged after they were stored", len(c.staged))
	}
	if got, want := fmt.Sprint(cached(t, c, s, 1, 5)), "[1 2 3 4 5]"; got != want {
		t.Errorf("cached once 3..5 are stored: %s, want %s", got, want)
	}

	failing := newLogCache(failingStore{raft.NewInmemStore()}, 512, 1<<20)
	failing.StageLogs(entries(1, 1, 100))
	if err := failing.StoreLogs(entries(1, 1, 100)); err == nil {
		t.Fatal("StoreLogs into a failing store succeeded")
	}
	var l raft.Log
	if err := failing.GetLog(1, &l); err != nil || l.Index != 1 {
		t.Errorf("GetLog of a staged entry whose write failed: index %d, %v; want index 1", l.Index, err)
	}
}
