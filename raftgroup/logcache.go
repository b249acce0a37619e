package raftgroup

import (
	"sync"

	"github.com/hashicorp/raft"
)

// The newest entries of a group's log are kept in memory, up to both
// bounds: the leader reads them to replicate, a follower to apply what it
// has just appended. hashicorp/raft's LogCache bounds only the count, so its
// memory grew with the entries' size: 512 entries of batched 1 MiB messages
// held 193 MiB on a leader, and could reach 2 GiB per group at
// maxBatchBytes. 16 MiB still holds the last 25 or more entries of
// batched 1 KiB messages (up to 1,024 of them per entry), more than a
// follower applies at once or a leader sends to one that keeps up; 64 MiB
// measured no faster, and cost a million pending messages 10 % more
// resident memory (raftgroup/DESIGN.md).
const (
	logCacheEntries = 512
	logCacheBytes   = 16 << 20
)

// logCache keeps the newest entries of a log in memory, in index order,
// within a count and a byte bound; older entries are read from the store.
type logCache struct {
	raft.LogStore
	maxEntries int
	maxBytes   int

	mu      sync.RWMutex
	entries []*raft.Log // contiguous indexes, oldest first
	bytes   int
	// staged are a leader's newest entries from StageLogs until
	// StoreLogs has written them.
	staged []*raft.Log
}

func newLogCache(store raft.LogStore, maxEntries, maxBytes int) *logCache {
	return &logCache{LogStore: store, maxEntries: maxEntries, maxBytes: maxBytes}
}

// IsMonotonic passes on the store's answer (see storageGuard.IsMonotonic).
func (c *logCache) IsMonotonic() bool { return isMonotonic(c.LogStore) }

func (c *logCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	if l := find(c.staged, idx); l != nil {
		*log = *l
		c.mu.RUnlock()
		return nil
	}
	if l := find(c.entries, idx); l != nil {
		*log = *l
		c.mu.RUnlock()
		return nil
	}
	c.mu.RUnlock()
	return c.LogStore.GetLog(idx, log)
}

// find returns the entry of index idx in entries of contiguous indexes, or
// nil.
func find(entries []*raft.Log, idx uint64) *raft.Log {
	if n := len(entries); n > 0 {
		if first := entries[0].Index; idx >= first && idx-first < uint64(n) {
			return entries[idx-first]
		}
	}
	return nil
}

// StageLogs makes a leader's new entries readable before they are written,
// so that its replication sends them to the followers while StoreLogs
// writes them here (third_party/hashicorp-raft calls it; member/DESIGN.md,
// "The leader writes while its followers do"). They stay readable until
// StoreLogs has written them; if it fails they stay, since the replication
// may still read them and the leader ends the process.
func (c *logCache) StageLogs(logs []*raft.Log) {
	c.mu.Lock()
	c.staged = logs
	c.mu.Unlock()
}

func (c *logCache) StoreLog(log *raft.Log) error {
	return c.StoreLogs([]*raft.Log{log})
}

func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.staged = nil
	for _, l := range logs {
		if n := len(c.entries); n > 0 && c.entries[n-1].Index+1 != l.Index {
			// Not the next index (a follower's log replaced after a
			// snapshot): what is cached no longer ends where l begins.
			c.clear()
		}
		c.entries = append(c.entries, l)
		c.bytes += entryBytes(l)
	}
	drop := 0
	for len(c.entries)-drop > c.maxEntries || (c.bytes > c.maxBytes && len(c.entries)-drop > 1) {
		c.bytes -= entryBytes(c.entries[drop])
		c.entries[drop] = nil
		drop++
	}
	if drop > 0 {
		// Copying down keeps the backing array from growing without end.
		c.entries = append(c.entries[:0], c.entries[drop:]...)
	}
	return nil
}

// DeleteRange keeps the cached entries outside [min, max]. A snapshot's
// compaction deletes the log's head, which the cache, holding the newest
// entries, rarely reaches; emptying the cache each time sent a leader's
// replication and a follower's applies to the disk after every snapshot.
func (c *logCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	kept := c.entries[:0]
	c.bytes = 0
	for _, l := range c.entries {
		if l.Index < min || l.Index > max {
			kept = append(kept, l)
			c.bytes += entryBytes(l)
		}
	}
	clear(c.entries[len(kept):])
	c.entries = kept
	if n := len(kept); n > 0 && kept[n-1].Index-kept[0].Index+1 != uint64(n) {
		// A range from the middle: what is left is not contiguous.
		c.clear()
	}
	c.mu.Unlock()
	return c.LogStore.DeleteRange(min, max)
}

func (c *logCache) clear() {
	clear(c.entries)
	c.entries = c.entries[:0]
	c.bytes = 0
}

func entryBytes(l *raft.Log) int { return len(l.Data) + len(l.Extensions) }
