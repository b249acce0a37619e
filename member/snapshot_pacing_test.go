package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cairnmq/cairn/raftgroup"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
)

func TestSnapshotPace_Enough(t *testing.T) {
	const min = 8192
	for _, c := range []struct {
		name       string
		stateBytes int64
		since      logVolume
		want       bool
	}{
		{"too few entries", 0, logVolume{entries: min - 1, bytes: 1 << 30}, false},
		{"empty state", 0, logVolume{entries: min}, true},
		{"small state", 4 << 20, logVolume{entries: min, bytes: min << 10}, true},
		// A million 1 KiB messages; 8,192 sends of one message each since.
		{"large state, little log", 1 << 30, logVolume{entries: min, bytes: min << 10}, false},
		{"large state, log half its size", 1 << 30, logVolume{entries: 1 << 19, bytes: 1 << 29}, true},
	} {
		if got := snapshotPaceOf(min, true, 0, 1).enough(c.stateBytes, c.since); got != c.want {
			t.Errorf("%s: enough = %v, want %v", c.name, got, c.want)
		}
	}
}

// A leader with followers waits the longest: twice the entries and the
// whole state's bytes of log; each follower waits for its own share of the
// state's bytes.
func TestSnapshotPaceOf_StaggersBytesAndSparesTheLeader(t *testing.T) {
	const min, state = 8192, 6 << 30
	// due finds the least entries, and the least log bytes in 1 MiB steps,
	// that are enough at pace p.
	due := func(p snapshotPace) (entries uint64, bytes int64) {
		for !p.enough(0, logVolume{entries: entries}) {
			entries++
		}
		for bytes = 0; !p.enough(state, logVolume{entries: 1 << 30, bytes: uint64(bytes)}); bytes += 1 << 20 {
		}
		return entries, bytes
	}
	seen := map[int64]bool{}
	for rank := range 3 {
		e, b := due(snapshotPaceOf(min, false, rank, 3))
		if b < state/2 || b >= state || seen[b] || e != min {
			t.Errorf("follower ranked %d of 3 snapshots after %d entries and %d bytes of log beside %d of state; want %d entries and bytes from half the state, unlike the others, under the whole", rank, e, b, state, min)
		}
		seen[b] = true
		if e, b := due(snapshotPaceOf(min, true, rank, 3)); e != 2*min || b != state {
			t.Errorf("leader ranked %d of 3 snapshots after %d entries and %d bytes of log; want %d and the state's %d", rank, e, b, 2*min, state)
		}
	}
	if e, b := due(snapshotPaceOf(min, true, 0, 1)); e != min || b != state/2 {
		t.Errorf("a leader alone snapshots after %d entries and %d bytes of log; want %d and half the state, %d", e, b, min, state/2)
	}
}

// Each rank's turns start at entries of their own, at least
// minEntries/(2·replicas) from any other rank's, once every cycle of the
// ranks; the leader keeps its rank's turns. A batch of entries starts a
// turn exactly when one of its entries does.
func TestSnapshotPace_TurnsOfTheRanksNeverMeet(t *testing.T) {
	const min, replicas, entries = 8192, 3, 50_000
	turnLen := uint64(min / (2 * replicas))
	startsAt := map[uint64]int{}
	for rank := range replicas {
		for _, leader := range []bool{false, true} {
			p := snapshotPaceOf(min, leader, rank, replicas)
			var starts []uint64
			for i := uint64(1); i <= entries; i++ {
				if p.turnStarts(i-1, i) {
					starts = append(starts, i)
				}
			}
			if len(starts) < entries/int(turnLen*replicas) {
				t.Fatalf("rank %d (leader %v): %d turns in %d entries, want one every %d", rank, leader, len(starts), entries, turnLen*replicas)
			}
			for k, i := range starts {
				if k > 0 && i-starts[k-1] != turnLen*replicas {
					t.Fatalf("rank %d (leader %v): turns at %d and %d, want %d apart", rank, leader, starts[k-1], i, turnLen*replicas)
				}
				if other, ok := startsAt[i]; ok && other != rank {
					t.Fatalf("ranks %d and %d both start a turn at entry %d", other, rank, i)
				}
				startsAt[i] = rank
			}
			// Batches of every length from every entry of a cycle.
			for from := uint64(0); from < 2*turnLen*replicas; from += 7 {
				for n := uint64(0); n < 3*turnLen*replicas; n += 13 {
					want := slices.ContainsFunc(starts, func(i uint64) bool { return i > from && i <= from+n })
					if got := p.turnStarts(from, from+n); got != want {
						t.Fatalf("rank %d (leader %v): turnStarts(%d, %d) = %v, want %v", rank, leader, from, from+n, got, want)
					}
				}
			}
		}
	}
	if p := snapshotPaceOf(min, true, 0, 1); !p.turnStarts(min/2-1, min/2) || p.turnStarts(min/2, min-1) {
		t.Errorf("a replica alone starts a turn every %d entries; want every %d", p.turnLen, min/2)
	}
}

// A replica snapshots at the turn nearest to where its log is enough, and
// waits for a turn no longer than a cycle of entries.
func TestSnapshotPace_Due(t *testing.T) {
	const min = 8192
	p := snapshotPaceOf(min, false, 1, 3) // turns of 1,365 entries from entry 1,365, every 4,095
	turn := uint64(1365 + 2*4095)         // a turn start past min entries of log
	for _, c := range []struct {
		name       string
		stateBytes int64
		since      logVolume
		from, to   uint64
		enoughAt   uint64
		want       bool
	}{
		{"enough, the turn starts", 0, logVolume{entries: min}, turn - 1, turn, turn - 1, true},
		{"enough, the turn starts inside a batch", 0, logVolume{entries: min}, turn - 10, turn + 10, turn - 10, true},
		{"enough, no turn", 0, logVolume{entries: min}, turn, turn + 100, turn, false},
		{"half a cycle short of enough, the turn starts", 0, logVolume{entries: min - 2047}, turn - 1, turn, 0, true},
		{"over half a cycle short of enough, the turn starts", 0, logVolume{entries: min - 2048}, turn - 1, turn, 0, false},
		{"a cycle past enough, no turn", 0, logVolume{entries: min + 4095}, turn, turn + 1, turn + 1 - 4095, true},
		{"just under a cycle past enough, no turn", 0, logVolume{entries: min + 4094}, turn, turn + 1, turn + 2 - 4095, false},
		// Beside a large state, the state's bytes hold it until a turn
		// past its share (2/3 for rank 1), however many entries.
		{"a large state, under its share, the turn starts", 1 << 30, logVolume{entries: 1 << 20, bytes: 680 << 20}, turn - 1, turn, 0, false},
		{"a large state, its share reached, the turn starts", 1 << 30, logVolume{entries: 1 << 20, bytes: 720 << 20}, turn - 1, turn, turn - 100, true},
		{"a large state, its share just reached, no turn", 1 << 30, logVolume{entries: 1 << 20, bytes: 720 << 20}, turn, turn + 1, turn + 1, false},
		{"a large state, its share reached a cycle ago, no turn", 1 << 30, logVolume{entries: 1 << 20, bytes: 720 << 20}, turn, turn + 1, turn + 1 - 4095, true},
	} {
		if got := p.due(c.stateBytes, c.since, c.from, c.to, c.enoughAt); got != c.want {
			t.Errorf("%s: due(%d, %+v, %d, %d, %d) = %v, want %v", c.name, c.stateBytes, c.since, c.from, c.to, c.enoughAt, got, c.want)
		}
	}
}

// Three replicas' state machines, fed the same batches, ask for their
// snapshots at their own turns only: each ask comes with a batch that
// starts one of its replica's turns, whatever the batch sizes (up to a
// fifth of a turn, as MaxAppendEntries is of the default's 1,365).
func TestMemberFSM_ReplicasAskAtTheirOwnTurns(t *testing.T) {
	const threshold, turnLen = 600, 100
	var fsms []*memberFSM
	for rank := range 3 {
		a := &memberFSM{m: fsm.NewMember(), applied: func([]string) {}, snapshotWanted: make(chan struct{}, 1)}
		p := snapshotPaceOf(threshold, rank == 0, rank, 3)
		a.pace.Store(&p)
		fsms = append(fsms, a)
	}
	asks := make([][]uint64, len(fsms))
	next := uint64(1)
	for batch := 0; next < 50*threshold; batch++ {
		n := uint64(1 + (batch*7)%(turnLen/5))
		var logs []*raft.Log
		for range n {
			logs = append(logs, &raft.Log{Index: next, Type: raft.LogConfiguration})
			next++
		}
		for i, a := range fsms {
			a.ApplyBatch(logs)
			select {
			case <-a.snapshotWanted:
			default:
				continue
			}
			first, at := logs[0].Index, logs[len(logs)-1].Index
			if !slices.ContainsFunc(logs, func(l *raft.Log) bool { return (l.Index+3*turnLen-uint64(i)*turnLen)%(3*turnLen) == 0 }) {
				t.Fatalf("rank %d asked after entries %d to %d, which start none of its turns (from %d, every %d)", i, first, at, i*turnLen, 3*turnLen)
			}
			asks[i] = append(asks[i], at)
			if _, err := a.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, at := range asks {
		// A follower every threshold (a whole number of cycles here), the
		// leader (rank 0) every twice that.
		want := int(next) / threshold
		if i == 0 {
			want /= 2
		}
		if len(at) < want-1 || len(at) > want+1 {
			t.Errorf("rank %d asked %d times in %d entries (%v); want about %d", i, len(at), next-1, at, want)
		}
	}
}

// The state machine asks for a snapshot when an applied batch starts a
// turn, counting from the last entry it applied: a turn that starts on an
// entry Raft kept from it (a no-op, a barrier) is still seen.
func TestMemberFSM_AsksAtTurnsAcrossEntriesItDoesNotSee(t *testing.T) {
	a := &memberFSM{m: fsm.NewMember(), applied: func([]string) {}, snapshotWanted: make(chan struct{}, 1)}
	// Turns of 2 entries from entry 2, every 6; due at a turn from 9
	// entries of log.
	p := snapshotPaceOf(12, false, 1, 3)
	a.pace.Store(&p)
	apply := func(indexes ...uint64) bool {
		var logs []*raft.Log
		for _, i := range indexes {
			logs = append(logs, &raft.Log{Index: i, Type: raft.LogConfiguration})
		}
		a.ApplyBatch(logs)
		select {
		case <-a.snapshotWanted:
			return true
		default:
			return false
		}
	}
	for i := uint64(1); i <= 13; i++ {
		if apply(i) {
			t.Fatalf("asked for a snapshot after entry %d, before 9 entries of log at a turn's start", i)
		}
	}
	// Entry 14 starts a turn and never reaches the state machine.
	if !apply(15) {
		t.Fatal("no ask after entry 15, though a turn started at entry 14 since entry 13")
	}
}

// The replica counts the log it applies, snapshots on its own when the log
// is large enough for the state, and starts counting again.
func TestReplica_SnapshotsWhenTheLogOutgrowsHalfTheState(t *testing.T) {
	ctx := context.Background()
	r := testReplica(t, t.TempDir(), func(c *Config) {
		c.SnapshotThreshold = 8
		c.SnapshotInterval = 20 * time.Millisecond
	})
	if got := r.Raft().ReloadableConfig().SnapshotThreshold; got != maxSnapshotThreshold {
		t.Fatalf("hashicorp/raft's own threshold is %d, want %d", got, maxSnapshotThreshold)
	}
	lastSnapshot := func() uint64 {
		n, _ := strconv.ParseUint(r.Raft().Stats()["last_snapshot_index"], 10, 64)
		return n
	}
	body := make([]byte, 1024)
	enqueue := func(entries, perEntry int, prefix string) {
		t.Helper()
		for i := range entries {
			m := msgs(perEntry, fmt.Sprintf("%s%03d-", prefix, i))
			for _, x := range m {
				x.Body = body
			}
			if _, err := r.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(10, 200, "big") // 2 MiB, all of it in the log
	wait.For(t, 10*time.Second, "a snapshot", func() bool { return lastSnapshot() > 0 })
	_, before := r.host.fsm.volume()
	if before.entries >= 10 {
		t.Fatalf("after the snapshot, %+v counted: the count did not start again", before)
	}
	// What the first snapshot left counted depends on the turn it took;
	// count the small sends from an empty log.
	if err := r.Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	_, before = r.host.fsm.volume()

	enqueue(20, 1, "one")
	state, since := r.host.fsm.volume()
	if added := since.bytes - before.bytes; since.entries != before.entries+20 || added < 20<<10 || added > 30<<10 || state < 2_000_000 {
		t.Fatalf("volume = %d state bytes, %+v since the snapshot (%+v before 20 sends of 1 KiB); want about 2 MiB and 20 more entries of about 1 KiB", state, since, before)
	}
	if r.host.snapshotPace().enough(state, since) {
		t.Fatalf("%+v of log against %d bytes of state is due a snapshot", since, state)
	}
}

// volume returns the bytes of the state's messages and the log applied
// since the last snapshot.
func (a *memberFSM) volume() (stateBytes int64, since logVolume) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.m.Stats().Bytes, a.since
}

// threeReplicas opens a group of three replicas of "q#0" on nodes n2, n3
// and n1, in that order, and waits for its leader.
func threeReplicas(t *testing.T, opts ...func(*Config)) (ids []string, replicas []*Replica) {
	ids = []string{"n2", "n3", "n1"}
	var peers []raft.Server
	var layers []raft.StreamLayer
	for _, id := range ids {
		layer, addr := loopbackLayer(t, "q#0")
		peers = append(peers, raft.Server{ID: raft.ServerID(id), Address: addr})
		layers = append(layers, layer)
	}
	for i, id := range ids {
		cfg := Config{Name: "q#0", GroupID: "q#0", NodeID: id, Dir: t.TempDir(), Stream: layers[i],
			Peers: peers, Timing: raftgroup.TestTiming, ExpiryInterval: 20 * time.Millisecond}
		for _, o := range opts {
			o(&cfg)
		}
		r, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		replicas = append(replicas, r)
	}
	wait.For(t, 10*time.Second, "a leader", func() bool { return slices.ContainsFunc(replicas, (*Replica).Leading) })
	return ids, replicas
}

// In a group of three, the leader takes the leader's pace and each follower
// the pace of its rank among the servers sorted by id.
func TestReplica_SnapshotPaceFollowsRoleAndRank(t *testing.T) {
	// An interval longer than the test: only the leadership change
	// refreshes the pace.
	ids, replicas := threeReplicas(t, func(c *Config) { c.SnapshotThreshold, c.SnapshotInterval = 100, time.Hour })
	rankOf := map[string]int{"n1": 0, "n2": 1, "n3": 2}
	for i, r := range replicas {
		wait.For(t, 10*time.Second, "the pace of "+ids[i], func() bool {
			p := r.host.fsm.pace.Load()
			return p != nil && *p == snapshotPaceOf(100, r.Raft().State() == raft.Leader, rankOf[ids[i]], 3)
		})
	}
}

// The replicas of a group snapshot on their own as their log grows, the
// leader half as often as the followers, with an interval longer than the
// test: the state machine's asks alone start them. (Where in the log each
// one falls is TestMemberFSM_ReplicasAskAtTheirOwnTurns's: a follower
// behind applies up to 256 entries at once, which moves its snapshot.)
func TestReplica_ReplicasSnapshotAsTheirLogGrows(t *testing.T) {
	const threshold, entries = 192, 900
	ids, replicas := threeReplicas(t, func(c *Config) {
		c.SnapshotThreshold = threshold
		c.SnapshotInterval = time.Hour
		// Slower than raftgroup.TestTiming, so that a loaded machine does not
		// change the leader the test sends through.
		c.Timing = raftgroup.Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond, LeaderLease: 250 * time.Millisecond, Commit: 5 * time.Millisecond}
	})
	leader := slices.IndexFunc(replicas, (*Replica).Leading)
	const turnLen = threshold / 6
	taken := make([][]uint64, len(replicas))
	record := func() {
		for i, r := range replicas {
			n, _ := strconv.ParseUint(r.Raft().Stats()["last_snapshot_index"], 10, 64)
			if k := len(taken[i]); n > 0 && (k == 0 || taken[i][k-1] != n) {
				taken[i] = append(taken[i], n)
			}
		}
	}
	ctx := context.Background()
	for i := range entries {
		if _, err := replicas[leader].Enqueue(ctx, msgs(1, fmt.Sprintf("m%04d-", i))); err != nil {
			t.Fatal(err)
		}
		record()
	}
	for i, r := range replicas {
		wait.For(t, 10*time.Second, ids[i]+" applying the last entry", func() bool { return r.Raft().AppliedIndex() >= replicas[leader].Raft().LastIndex() })
	}
	record()
	t.Logf("snapshot entries of %v (leader %s): %v", ids, ids[leader], taken)
	for i, at := range taken {
		// A follower snapshots every threshold entries, or a half cycle
		// of turns later; a leader every twice that.
		least, most := entries/(threshold+3*turnLen), entries/(threshold-turnLen)
		if i == leader {
			least, most = entries/(2*threshold+3*turnLen), entries/(2*threshold-turnLen)
		}
		if len(at) < least || len(at) > most {
			t.Errorf("%s (leader %v) snapshotted at entries %v; want %d to %d snapshots in %d entries", ids[i], i == leader, at, least, most, entries)
		}
	}
}
