package member

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestSnapshotDue(t *testing.T) {
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
		if got := snapshotDue(snapshotPaceOf(min, true, 0, 1), c.stateBytes, c.since); got != c.want {
			t.Errorf("%s: snapshotDue = %v, want %v", c.name, got, c.want)
		}
	}
}

// The replicas of a group snapshot at different points of the log, and a
// leader with followers waits the longest: twice the entries and the whole
// state's bytes of log.
func TestSnapshotPaceOf_StaggersReplicasAndSparesTheLeader(t *testing.T) {
	const min, state = 8192, 6 << 30
	// due finds the least entries, and the least log bytes in 1 MiB steps,
	// that make a snapshot due at pace p.
	due := func(p snapshotPace) (entries uint64, bytes int64) {
		entries = min
		for !snapshotDue(p, 0, logVolume{entries: entries}) {
			entries++
		}
		for bytes = 0; !snapshotDue(p, state, logVolume{entries: 1 << 30, bytes: uint64(bytes)}); bytes += 1 << 20 {
		}
		return entries, bytes
	}
	seen := map[int64]bool{}
	lastEntries := uint64(0)
	for rank := range 3 {
		e, b := due(snapshotPaceOf(min, false, rank, 3))
		if b < state/2 || b >= state || seen[b] || e <= lastEntries || e >= 2*min {
			t.Errorf("follower ranked %d of 3 snapshots after %d entries and %d bytes of log beside %d of state; want entries from %d, rising with the rank, under %d, and bytes from half the state, unlike the others, under the whole", rank, e, b, state, min, 2*min)
		}
		seen[b], lastEntries = true, e
		if e, b := due(snapshotPaceOf(min, true, rank, 3)); e != 2*min || b != state {
			t.Errorf("leader ranked %d of 3 snapshots after %d entries and %d bytes of log; want %d and the state's %d", rank, e, b, 2*min, state)
		}
	}
	if e, b := due(snapshotPaceOf(min, true, 0, 1)); e != min || b != state/2 {
		t.Errorf("a leader alone snapshots after %d entries and %d bytes of log; want %d and half the state, %d", e, b, min, state/2)
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
	waitFor(t, "a snapshot", func() bool { return lastSnapshot() > 0 })
	_, before := r.fsm.volume()
	if before.entries >= 10 {
		t.Fatalf("after the snapshot, %+v counted: the count did not start again", before)
	}

	enqueue(20, 1, "one")
	state, since := r.fsm.volume()
	if added := since.bytes - before.bytes; since.entries != before.entries+20 || added < 20<<10 || added > 30<<10 || state < 2_000_000 {
		t.Fatalf("volume = %d state bytes, %+v since the snapshot (%+v before 20 sends of 1 KiB); want about 2 MiB and 20 more entries of about 1 KiB", state, since, before)
	}
	if snapshotDue(r.snapshotPace(8), state, since) {
		t.Fatalf("%+v of log against %d bytes of state is due a snapshot", since, state)
	}
}

// In a group of three, the leader takes the leader's pace and each follower
// the pace of its rank among the servers sorted by id.
func TestReplica_SnapshotPaceFollowsRoleAndRank(t *testing.T) {
	ids := []string{"n2", "n3", "n1"}
	var peers []raft.Server
	var layers []raft.StreamLayer
	for _, id := range ids {
		layer, addr := loopbackLayer(t, "q#0")
		peers = append(peers, raft.Server{ID: raft.ServerID(id), Address: addr})
		layers = append(layers, layer)
	}
	var replicas []*Replica
	for i, id := range ids {
		r, err := Open(Config{Name: "q#0", GroupID: "q#0", NodeID: id, Dir: t.TempDir(), Stream: layers[i],
			Peers: peers, Timing: fastTiming, ExpiryInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		replicas = append(replicas, r)
	}
	waitFor(t, "a leader", func() bool { return slices.ContainsFunc(replicas, (*Replica).Leading) })
	rankOf := map[string]int{"n1": 0, "n2": 1, "n3": 2}
	for i, r := range replicas {
		waitFor(t, "the pace of "+ids[i], func() bool {
			return r.snapshotPace(100) == snapshotPaceOf(100, r.Raft().State() == raft.Leader, rankOf[ids[i]], 3)
		})
	}
}
