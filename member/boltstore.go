package member

import (
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// boltDeleteChunk is how many entries one bbolt transaction of a compaction
// deletes (boltStore).
const boltDeleteChunk = 1024

// boltStore is raft-boltdb with the head of the log deleted a chunk at a
// time. raft-boltdb deletes a range in one transaction, and bbolt lets one
// transaction write at a time: a snapshot's compaction of 10,000–20,000
// entries took 29–53 ms and held every append meanwhile (up to 64 ms), with
// a queue at 8,000 msgs/s and snapshots every 8,192 entries. In chunks, an
// append waits for one chunk at most. Only the head is cut in chunks, from
// the oldest entry up, so that a log stopped halfway has no gap; cutting the
// tail (a follower's conflicting entries) is rare and short.
type boltStore struct {
	*raftboltdb.BoltStore
}

func (s boltStore) DeleteRange(lo, hi uint64) error {
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	if lo > first {
		return s.BoltStore.DeleteRange(lo, hi)
	}
	return inChunks(lo, hi, boltDeleteChunk, s.BoltStore.DeleteRange)
}

// inChunks calls del on [lo, hi] cut into ranges of at most n, lowest
// first, and stops at the first error.
func inChunks(lo, hi, n uint64, del func(lo, hi uint64) error) error {
	for lo <= hi {
		end := hi
		if hi-lo >= n {
			end = lo + n - 1
		}
		if err := del(lo, end); err != nil {
			return err
		}
		if end == hi {
			break
		}
		lo = end + 1
	}
	return nil
}
