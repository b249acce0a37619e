package member

import (
	"errors"
	"slices"

	"github.com/hashicorp/raft"
)

// maxSnapshotThreshold bounds how many entries the log may grow between two
// snapshots, whatever the state's size: hashicorp/raft's own threshold is
// set to it, and it snapshots on its own once that many entries are in.
const maxSnapshotThreshold = 1 << 20

// logVolume is what the log took since the last snapshot.
type logVolume struct{ entries, bytes uint64 }

// snapshotPace is how much log a replica lets pass before it snapshots: at
// least entries entries, carrying at least num/den of the state's bytes.
type snapshotPace struct {
	entries  uint64
	num, den int64
}

// snapshotPaceOf staggers the replicas of a group so that they do not all
// write the state at once, and leaves the most of it to the followers;
// minEntries is the least any replica waits for.
//
// With a million 1 KiB messages pending, all three replicas wrote 1 GiB at
// the same moment, since they count the same log from the same start, and
// sends beside them fell to a fifth (docs/performance.md). A follower ranked
// rank among the group's servers sorted by id waits for (replicas+rank)/
// replicas times minEntries and for (replicas+rank)/(2·replicas) of the
// state's bytes (1/2, 2/3 and 5/6 for three), so each one snapshots at other
// moments of the log.
//
// A leader waits as if it ranked after every follower: twice minEntries and
// the whole state's bytes. Capturing the state holds its applies, hence
// every send's reply, and a large state's capture took about a second of
// its CPU. A leader alone in its group has no one to leave it to.
func snapshotPaceOf(minEntries uint64, leader bool, rank, replicas int) snapshotPace {
	if leader && replicas > 1 {
		rank = replicas
	}
	n, r := uint64(replicas), uint64(rank)
	return snapshotPace{entries: minEntries * (n + r) / n, num: int64(n + r), den: int64(2 * n)}
}

// snapshotDue says whether a replica should snapshot at pace p, since the
// state a snapshot writes is stateBytes. A snapshot writes the whole state;
// with a million 1 KiB messages pending and one send per entry, a fixed
// threshold of 8,192 entries wrote 1 GiB for every 9 MiB of log and stalled
// sends for over a second each time (member/DESIGN.md). The price is a
// longer log to keep and to replay on restart: at most the state's bytes. A
// small state snapshots every p.entries.
func snapshotDue(p snapshotPace, stateBytes int64, since logVolume) bool {
	return since.entries >= p.entries && int64(since.bytes)*p.den >= stateBytes*p.num
}

// snapshotTick takes a snapshot when snapshotDue says so; it runs at the
// snapshot interval, as hashicorp/raft checks its own threshold.
func (r *Replica) snapshotTick(minEntries uint64) {
	stateBytes, since := r.fsm.volume()
	if !snapshotDue(r.snapshotPace(minEntries), stateBytes, since) {
		return
	}
	err := r.group.Raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
		r.log.Warn("snapshot failed; the next check tries again", "err", err)
	}
}

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
