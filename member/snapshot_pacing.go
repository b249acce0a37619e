package member

import (
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// maxSnapshotThreshold bounds how many entries the log may grow between two
// snapshots, whatever the state's size: hashicorp/raft's own threshold is
// set to it, and it snapshots on its own once that many entries are in.
const maxSnapshotThreshold = 1 << 20

// logVolume is what the log took since the last snapshot.
type logVolume struct{ entries, bytes uint64 }

// snapshotPace says when a replica snapshots: once at least entries
// entries, carrying at least num/den of the state's bytes, came since its
// last snapshot, at the next start of its turn in the log. The log is cut
// into turns of turnLen entries, dealt in a cycle to the group's ranks;
// the replica's turns are those of rank.
type snapshotPace struct {
	entries     uint64
	num, den    int64
	turnLen     uint64
	rank, ranks uint64
}

// snapshotPaceOf staggers the replicas of a group so that they do not all
// write the state at once, and leaves the most of it to the followers;
// minEntries is the least any replica waits for, rank the replica's place
// among the group's servers sorted by id.
//
// Each replica starts its snapshots only at its own turns of the log.
// Replicas apply the same log at about the same moment, so the turns keep
// their snapshots apart by at least a turn's entries: minEntries/(2·replicas),
// 1,365 for three at the default 8,192. Waiting for thresholds alone did
// not: replicas whose thresholds had passed between two checks of a 5 s
// tick all snapshotted at that tick, and at the end-to-end row's 3,000
// entries a second that was every tick (docs/performance.md).
//
// With a million 1 KiB messages pending, all three replicas wrote 1 GiB at
// the same moment, since they count the same log from the same start, and
// sends beside them fell to a fifth (docs/performance.md). So a follower
// also waits for (replicas+rank)/(2·replicas) of the state's bytes (1/2,
// 2/3 and 5/6 for three): it becomes due at other moments of a large
// state's log than the others.
//
// A leader waits twice minEntries and the whole state's bytes, as if
// ranked after every follower: capturing the state holds its applies,
// hence every send's reply, and a large state's capture took about a
// second of its CPU. It keeps its own rank's turns, which no follower
// has. A leader alone in its group has no one to leave it to.
func snapshotPaceOf(minEntries uint64, leader bool, rank, replicas int) snapshotPace {
	n, r := uint64(replicas), uint64(rank)
	p := snapshotPace{entries: minEntries, num: int64(n + r), den: int64(2 * n),
		turnLen: max(minEntries/(2*n), 1), rank: r, ranks: n}
	if leader && replicas > 1 {
		p.entries, p.num = 2*minEntries, p.den
	}
	return p
}

// enough says whether the log since the last snapshot is long enough for a
// snapshot at pace p, since the state a snapshot writes is stateBytes. A
// snapshot writes the whole state; with a million 1 KiB messages pending
// and one send per entry, a fixed threshold of 8,192 entries wrote 1 GiB
// for every 9 MiB of log and stalled sends for over a second each time
// (member/DESIGN.md). The price is a longer log to keep and to replay on
// restart: at most the state's bytes. A small state snapshots every
// p.entries.
func (p snapshotPace) enough(stateBytes int64, since logVolume) bool {
	return since.entries >= p.entries && int64(since.bytes)*p.den >= stateBytes*p.num
}

// turnStarts says whether one of the replica's turns starts in the log
// entries from+1 to to.
func (p snapshotPace) turnStarts(from, to uint64) bool {
	if p.turnLen == 0 || to <= from {
		return false
	}
	cycle := p.turnLen * p.ranks
	first := from + 1
	next := first + (p.rank*p.turnLen+cycle-first%cycle)%cycle
	return next <= to
}

// snapshotLoop takes the snapshots the state machine asks for at the
// replica's turns (memberFSM.ApplyBatch). Every interval it refreshes the
// pace from the replica's role and rank, and snapshots a replica that was
// due at the last check already and has not reached a turn since: with
// entries of a megabyte or more, a turn of 1,365 entries is a long wait.
func (r *Replica) snapshotLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var dueSince uint64 // the snapshot count at which a due replica was last seen waiting, plus one
	for {
		select {
		case <-r.stop:
			return
		case <-r.fsm.snapshotWanted:
			// The ask may have waited behind a snapshot just taken.
			if enough, _ := r.fsm.snapshotDue(); enough {
				r.snapshot()
			}
		case <-t.C:
			r.refreshSnapshotPace()
			switch enough, taken := r.fsm.snapshotDue(); {
			case !enough:
				dueSince = 0
			case dueSince == taken+1:
				r.snapshot()
				dueSince = 0
			default:
				dueSince = taken + 1
			}
		}
	}
}

func (r *Replica) snapshot() {
	err := r.group.Raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
		r.log.Warn("snapshot failed; the next turn tries again", "err", err)
	}
}

// refreshSnapshotPace hands the state machine the replica's pace now.
func (r *Replica) refreshSnapshotPace() { r.fsm.setPace(r.snapshotPace(r.snapshotEntries)) }

// snapshotPace is this replica's pace now, from its role and its rank in
// the group's latest configuration; a replica with no configuration yet
// paces as one alone.
func (r *Replica) snapshotPace(minEntries uint64) snapshotPace {
	leader := r.group.Raft.State() == raft.Leader
	var ids []string
	for _, s := range r.group.Raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	rank := max(slices.Index(ids, r.cfg.NodeID), 0)
	return snapshotPaceOf(minEntries, leader, rank, max(len(ids), 1))
}
