package raftgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// heldStore holds command writes while told to, so a test can look at a
// group in the middle of one, or fails them.
type heldStore struct {
	*raft.InmemStore
	mu      sync.Mutex
	held    chan struct{} // closed to let the held writes through; nil: none held
	entered chan uint64   // the last index of each write held
	fail    error         // what command writes return, if not nil
}

func (s *heldStore) failWith(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *heldStore) hold() {
	s.mu.Lock()
	s.held, s.entered = make(chan struct{}), make(chan uint64, 16)
	s.mu.Unlock()
}

func (s *heldStore) release() {
	s.mu.Lock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
	s.mu.Unlock()
}

func (s *heldStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	held, entered, fail := s.held, s.entered, s.fail
	s.mu.Unlock()
	if logs[len(logs)-1].Type == raft.LogCommand {
		if fail != nil {
			return fail
		}
		if held != nil {
			entered <- logs[len(logs)-1].Index
			<-held
		}
	}
	return s.InmemStore.StoreLogs(logs)
}

func (s *heldStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("no snapshots here") }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

// startInmemGroup starts three voters on in-memory transports and stores,
// each log behind the logCache Open puts in front of it, and returns
// them with the leader first.
func startInmemGroup(t *testing.T) ([3]*raft.Raft, [3]*heldStore) {
	t.Helper()
	var (
		rafts  [3]*raft.Raft
		stores [3]*heldStore
		trans  [3]*raft.InmemTransport
		config raft.Configuration
	)
	for i := range trans {
		_, trans[i] = raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("n%d", i+1)))
		config.Servers = append(config.Servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i+1)), Address: trans[i].LocalAddr()})
	}
	for i := range trans {
		for j := range trans {
			if i != j {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
	for i := range rafts {
		conf := raft.DefaultConfig()
		conf.LocalID = config.Servers[i].ID
		conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
		conf.CommitTimeout = 5 * time.Millisecond
		conf.Logger = hclog.NewNullLogger()
		stores[i] = &heldStore{InmemStore: raft.NewInmemStore()}
		logs := newLogCache(stores[i], logCacheEntries, logCacheBytes)
		snaps := raft.NewInmemSnapshotStore()
		if err := raft.BootstrapCluster(conf, logs, stores[i], snaps, trans[i], config); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(conf, nopFSM{}, logs, stores[i], snaps, trans[i])
		if err != nil {
			t.Fatal(err)
		}
		rafts[i] = r
	}
	t.Cleanup(func() {
		for i := range rafts {
			stores[i].release()
			rafts[i].Shutdown()
		}
	})
	wait.For(t, 10*time.Second, "a leader", func() bool {
		for _, r := range rafts {
			if r.State() == raft.Leader {
				return true
			}
		}
		return false
	})
	for i, r := range rafts {
		if r.State() == raft.Leader {
			rafts[0], rafts[i] = rafts[i], rafts[0]
			stores[0], stores[i] = stores[i], stores[0]
		}
	}
	return rafts, stores
}

// A leader's followers write an entry while the leader does (the patch in
// third_party/hashicorp-raft), and the leader's written copy and one
// follower's commit it while the other follower's write is still under
// way. (Nothing can be answered while the leader's own write is held: the
// leader loop waits for it.)
func TestLeader_FollowersWriteWhileTheLeaderDoes(t *testing.T) {
	rafts, stores := startInmemGroup(t)
	leader, slow, fast := stores[0], stores[1], stores[2]
	leader.hold()
	slow.hold()

	applied := make(chan error, 1)
	future := rafts[0].Apply([]byte("x"), 10*time.Second)
	go func() { applied <- future.Error() }()

	var index uint64
	select {
	case index = <-leader.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader never wrote the entry")
	}
	wait.For(t, 10*time.Second, "follower's write while the leader's was held", func() bool {
		last, _ := fast.LastIndex()
		return last >= index
	})

	leader.release()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's and one follower's writes did not commit the entry")
	}
	if last, _ := slow.LastIndex(); last >= index {
		t.Fatalf("the held follower wrote index %d before it was let through", last)
	}
}

// A leader whose write of entries its followers may already hold fails
// ends the process (the patch panics) rather than stepping down: stepping
// down would answer entries as failed that may commit without it, and
// could send a follower a snapshot over entries it has written. Cairn's
// storage guard ends the process before this; the patch must not rely on
// it. The leader runs in a child process of this test.
func TestLeader_FailedWriteOfStagedEntriesEndsTheProcess(t *testing.T) {
	const child = "CAIRN_TEST_LEADER_WRITE_FAILS"
	if os.Getenv(child) != "" {
		rafts, stores := startInmemGroup(t)
		stores[0].failWith(errors.New("disk on fire"))
		err := rafts[0].Apply([]byte("x"), 10*time.Second).Error()
		t.Fatalf("the leader's write failed and the process went on; Apply: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeader_FailedWriteOfStagedEntriesEndsTheProcess$", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), child+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child process with a failing leader write exited cleanly:\n%s", out)
	}
	for _, want := range []string{"panic: failed to write the leader's new log entries", "disk on fire"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the child process did not end with %q (%v):\n%s", want, err, out)
		}
	}
}
