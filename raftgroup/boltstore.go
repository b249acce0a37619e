package raftgroup

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
// append waits for one chunk at most.
//
// A range that begins at or before the log's first entry is cut from the
// oldest entry up, so that a log stopped halfway is still contiguous; any
// other range (a follower's conflicting tail: rare and short) in one
// transaction.
type boltStore struct {
	*raftboltdb.BoltStore
}

func (s boltStore) DeleteRange(lo, hi uint64) error {
	return deleteHead(lo, hi, boltDeleteChunk, s.FirstIndex, s.BoltStore.DeleteRange)
}

// deleteHead deletes [lo, hi] through del, n entries at a time from the
// first entry there is when lo is at or before it. Each chunk starts at the
// entry first finds, not at the next index: a bolt log keeps its old entries
// below a snapshot a follower installed, with a gap up to the snapshot's,
// and a chunk per 1,024 missing indexes would be a commit each.
func deleteHead(lo, hi, n uint64, first func() (uint64, error), del func(lo, hi uint64) error) error {
	f, err := first()
	if err != nil {
		return err
	}
	if lo > f {
		return del(lo, hi)
	}
	for f != 0 && f <= hi {
		end := hi
		if hi-f >= n {
			end = f + n - 1
		}
		if err := del(f, end); err != nil {
			return err
		}
		if f, err = first(); err != nil {
			return err
		}
	}
	return nil
}
