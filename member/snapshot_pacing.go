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

// snapshotPace says when a replica snapshots (member/DESIGN.md, "Snapshots
// paced by bytes", "staggered" and "at each replica's own turn"): at the
// start of one of its turns, once at least entries entries, carrying at
// least num/den of the state's bytes, came since its last snapshot or will
// have within half a cycle. The log is cut into turns of turnLen entries,
// dealt in a cycle to the ranks of the group's voters; the replica's turns
// are those of rank.
type snapshotPace struct {
	entries     uint64
	num, den    int64
	turnLen     uint64
	rank, ranks uint64
}

// snapshotPaceOf is the pace of a replica ranked rank among replicas
// voters sorted by id. A follower waits for minEntries and a share of the
// state's bytes that grows with its rank, so that the replicas of a large
// state write it out at different moments of the log; a leader, whose
// capture holds the applies every send waits for, waits twice the entries
// and the whole state's bytes, unless it is alone. Turns are
// minEntries/(2·replicas) long, so a cycle of them is half of minEntries.
func snapshotPaceOf(minEntries uint64, leader bool, rank, replicas int) snapshotPace {
	n, r := uint64(max(replicas, 1)), uint64(rank)
	p := snapshotPace{entries: minEntries, num: int64(n + r), den: int64(2 * n),
		turnLen: max(minEntries/(2*n), 1), rank: r % n, ranks: n}
	if leader && n > 1 {
		p.entries, p.num = max(minEntries, minEntries<<1), p.den // not wrapping past 2^64
	}
	return p
}

// enough says whether the log since the last snapshot, since, is long
// enough for one beside a state of stateBytes.
func (p snapshotPace) enough(stateBytes int64, since logVolume) bool {
	return since.entries >= p.entries && int64(since.bytes)*p.den >= stateBytes*p.num
}

// enoughNearTurn says whether the log since the last snapshot is enough,
// or will be within half a cycle: a turn takes the snapshot the replica is
// due nearer to it than to its next turn. The threshold is seldom a whole
// number of cycles (8,192 entries against 4,095 for three voters), and
// waiting for the full count snapshotted every third cycle; taking it at
// the last turn before would snapshot every cycle and a half on average.
func (p snapshotPace) enoughNearTurn(stateBytes int64, since logVolume) bool {
	since.entries += p.turnLen * p.ranks / 2
	return p.enough(stateBytes, since)
}

// due says whether the replica snapshots after applying the entries from+1
// to to: when one of its turns starts in them and the log since the last
// one is enough near it. A turn moves a snapshot by at most half a cycle
// of entries, a quarter of the configured threshold. A replica enough since
// entry enoughAt (0: not yet) that went a whole cycle on without a turn
// (its rank changed, an ask was lost) does not wait for the next.
func (p snapshotPace) due(stateBytes int64, since logVolume, from, to, enoughAt uint64) bool {
	if p.turnStarts(from, to) && p.enoughNearTurn(stateBytes, since) {
		return true
	}
	return enoughAt != 0 && to-enoughAt >= p.turnLen*p.ranks
}

// turnStarts says whether one of the replica's turns starts in the log
// entries from+1 to to.
func (p snapshotPace) turnStarts(from, to uint64) bool {
	if p.turnLen == 0 || p.ranks == 0 || to <= from {
		return false
	}
	cycle := p.turnLen * p.ranks
	first := from + 1
	next := first + (p.rank*p.turnLen+cycle-first%cycle)%cycle
	return next <= to
}

// snapshotLoop takes the snapshots the state machine asks for as it
// applies (memberFSM.askSnapshotLocked).
func (h *raftHost) snapshotLoop() {
	for {
		select {
		case <-h.stop:
			return
		case <-h.fsm.snapshotWanted:
			// The ask may have waited behind a snapshot just taken, or
			// behind Close.
			select {
			case <-h.stop:
				return
			default:
			}
			if h.fsm.snapshotEnoughNearTurn() {
				h.snapshot()
			}
		}
	}
}

func (h *raftHost) snapshot() {
	err := h.group.Raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
		h.log.Warn("snapshot failed; the replica tries again once as much log has come again", "err", err)
	}
}

// refreshSnapshotPace hands the state machine the pace of the replica's
// role and rank now; a new leader's pace changes at once. paceMu keeps a
// refresh at the interval's tick from storing a pace older than the one a
// leadership change stored meanwhile.
func (h *raftHost) refreshSnapshotPace() {
	h.paceMu.Lock()
	defer h.paceMu.Unlock()
	p := h.snapshotPace()
	h.fsm.pace.Store(&p)
}

// snapshotPace is this replica's pace now, from its role and its rank in
// the group's latest configuration; a replica with no configuration yet
// paces as one alone. Ranks are among voters, the replicas that write
// snapshots of their own and count in a quorum.
func (h *raftHost) snapshotPace() snapshotPace {
	leader := h.group.Raft.State() == raft.Leader
	var ids []string
	for _, s := range h.group.Raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	rank := max(slices.Index(ids, h.nodeID), 0)
	return snapshotPaceOf(h.snapshotEntries, leader, rank, len(ids))
}
