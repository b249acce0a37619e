package member

import (
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// heldStore holds command writes while told to, so a test can look at a
// group in the middle of one.
type heldStore struct {
	*raft.InmemStore
	mu      sync.Mutex
	held    chan struct{} // closed to let the held writes through; nil: none held
	entered chan uint64   // the last index of each write held
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
	held, entered := s.held, s.entered
	s.mu.Unlock()
	if held != nil && logs[len(logs)-1].Type == raft.LogCommand {
		entered <- logs[len(logs)-1].Index
		<-held
	}
	return s.InmemStore.StoreLogs(logs)
}

func (s *heldStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("no snapshots here") }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

// startInmemGroup starts three voters on in-memory transports and stores,
// each log behind the logCache OpenRaft puts in front of it, and returns
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
	waitFor(t, "a leader", func() bool {
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
// third_party/hashicorp-raft), and the entry still needs a majority of
// written copies: the follower's alone does not answer the Apply, the
// leader's and that follower's do while the other follower's write is
// still under way.
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
	waitFor(t, "follower's write while the leader's was held", func() bool {
		last, _ := fast.LastIndex()
		return last >= index
	})
	select {
	case err := <-applied:
		t.Fatalf("the Apply was answered (%v) with one written copy of three", err)
	default:
	}

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
