package member

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
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
		if got := snapshotDue(min, c.stateBytes, c.since); got != c.want {
			t.Errorf("%s: snapshotDue = %v, want %v", c.name, got, c.want)
		}
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
	if snapshotDue(8, state, since) {
		t.Fatalf("%+v of log against %d bytes of state is due a snapshot", since, state)
	}
}
