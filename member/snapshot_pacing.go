package member

import (
	"errors"

	"github.com/hashicorp/raft"
)

// maxSnapshotThreshold bounds how many entries the log may grow between two
// snapshots, whatever the state's size: hashicorp/raft's own threshold is
// set to it, and it snapshots on its own once that many entries are in.
const maxSnapshotThreshold = 1 << 20

// logVolume is what the log took since the last snapshot.
type logVolume struct{ entries, bytes uint64 }

// snapshotDue says whether a member should snapshot: once at least minEntries
// entries came since the last snapshot, and they carried at least half as
// many bytes as the state a snapshot writes. A snapshot writes the whole
// state; with a million 1 KiB messages pending and one send per entry, a
// fixed threshold of 8,192 entries wrote 1 GiB for every 9 MiB of log and
// stalled sends for over a second each time (member/DESIGN.md). The price
// is a longer log to keep and to replay on restart: about half the state's
// bytes at most. A small state snapshots every minEntries, as before.
func snapshotDue(minEntries uint64, stateBytes int64, since logVolume) bool {
	return since.entries >= minEntries && int64(since.bytes) >= stateBytes/2
}

// snapshotTick takes a snapshot when snapshotDue says so; it runs at the
// snapshot interval, as hashicorp/raft checks its own threshold.
func (r *Replica) snapshotTick(minEntries uint64) {
	stateBytes, since := r.fsm.volume()
	if !snapshotDue(minEntries, stateBytes, since) {
		return
	}
	err := r.group.Raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
		r.log.Warn("snapshot failed; the next check tries again", "err", err)
	}
}
