package member

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Shared is this node's replica of a Raft group that many members share,
// of one destination or of many (fsm.Group): one log, one proposer, one
// set of heartbeats and snapshots for all of them, so that a member that
// carries no traffic costs its state and nothing else. Each member is a
// Replica opened in the group (Open), with its own consumers and
// dispatcher; the group's leader hosts every member the group holds.
type Shared struct {
	cfg    Config
	host   *raftHost
	notify chan bool

	mu       sync.Mutex
	replicas map[string]*Replica
	leader   bool
	// barrierMu makes the members taking over wait for one barrier per
	// term: barrierTerm is the last term one passed in.
	barrierMu   sync.Mutex
	barrierTerm uint64

	stop     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// OpenShared starts this node's replica of a shared group, bootstrapping
// it on first use. cfg says where the group runs (Name and GroupID name
// it; Dir, Stream, Peers, Timing, LogStore, snapshots, BodyMemory,
// OnFatal, Addresses, Logger); its members' own settings come with Open.
func OpenShared(cfg Config) (*Shared, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Shared{cfg: cfg, notify: make(chan bool, 16), replicas: make(map[string]*Replica), stop: make(chan struct{})}
	a := &memberFSM{g: fsm.NewGroup(), applied: s.kick}
	h, err := openHost(cfg, a, s.notify)
	if err != nil {
		return nil, err
	}
	s.host = h
	s.wg.Go(s.watchLeadership)
	runEvery(&s.wg, s.stop, cmp.Or(cfg.ExpiryInterval, time.Second), s.tick)
	return s, nil
}

// tick runs the periodic work of the members this replica hosts
// (Replica.expireTick, Replica.moveTick): one timer for the group rather
// than two per member, and none of it for a member that holds nothing.
// Each member's work runs on a goroutine of its own, so that one waiting
// on another member (a move) holds up no other; a member whose last tick
// still runs skips this one.
func (s *Shared) tick() {
	for _, r := range s.Replicas() {
		if !r.ticking.CompareAndSwap(false, true) {
			continue
		}
		if !r.Leading() || r.idle() {
			r.strandedSince = time.Time{}
			r.ticking.Store(false)
			continue
		}
		s.wg.Go(func() {
			defer r.ticking.Store(false)
			r.expireTick()
			r.moveTick()
		})
	}
}

// kick wakes the dispatchers of the members an apply touched.
func (s *Shared) kick(touched []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range touched {
		if r := s.replicas[key]; r != nil {
			r.kick()
		}
	}
}

// watchLeadership passes the group's leadership news to every member.
func (s *Shared) watchLeadership() {
	for {
		select {
		case <-s.stop:
			return
		case leader := <-s.notify:
			s.host.refreshSnapshotPace()
			s.mu.Lock()
			s.leader = leader
			for _, r := range s.replicas {
				r.tell(leader)
			}
			s.mu.Unlock()
		}
	}
}

// barrier is Replica's barrier for a member taking over: once one passed
// in this leader's term, every entry of earlier terms is applied, and the
// members that take over after it need none of their own.
func (s *Shared) barrier(stop <-chan struct{}) error {
	s.barrierMu.Lock()
	defer s.barrierMu.Unlock()
	rf := s.host.group.Raft
	term := rf.CurrentTerm()
	if s.barrierTerm == term {
		return nil
	}
	if err := barrier(rf, stop); err != nil {
		return err
	}
	s.barrierTerm = term
	return nil
}

// tell hands a leadership change to the replica's watcher, unless it
// stopped.
func (r *Replica) tell(leader bool) {
	select {
	case r.notify <- leader:
	case <-r.stop:
	}
}

// Open starts the replica of the member named key in this group: its name
// in the group's state, an incarnation that is never reused (a member
// dropped and opened again under the same key starts empty). cfg gives the
// member's address, settings and callbacks; the group's own fields are
// ignored. The group's leader adds the member to the group's state when it
// first hosts it; until then the member reads as empty.
func (s *Shared) Open(key string, cfg Config) (*Replica, error) {
	if key == "" {
		return nil, fmt.Errorf("member %s: a member of a shared group needs a key", cfg.Name)
	}
	cfg.NodeID, cfg.Dir, cfg.GroupID = s.cfg.NodeID, s.cfg.Dir, s.cfg.GroupID
	if cfg.Logger == nil {
		cfg.Logger = s.cfg.Logger
	}
	r := newReplica(cfg)
	r.shared, r.key = s, key
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
		return nil, ErrStopped
	default:
	}
	if _, ok := s.replicas[key]; ok {
		return nil, fmt.Errorf("member %s: %s is open in group %s already", cfg.Name, key, s.cfg.GroupID)
	}
	r.start(s.host)
	s.replicas[key] = r
	if s.leader {
		r.tell(true)
	}
	return r, nil
}

// leave forgets a replica that stopped; destroy also drops its member from
// the group's state if this node leads the group (otherwise the leader's
// own replica does, when it is destroyed; a member whose leader changed in
// between stays in the state until Drop, which the cluster's leader of the
// group calls for members no destination places in it).
func (s *Shared) leave(r *Replica, destroy bool) error {
	s.mu.Lock()
	if s.replicas[r.key] == r {
		delete(s.replicas, r.key)
	}
	s.mu.Unlock()
	if !destroy || s.host.group.Raft.State() != raft.Leader {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Drop(ctx, r.key)
}

// Drop removes the member named key, and all it holds, from the group's
// state; a member the group does not hold is no error. Only the leader can.
func (s *Shared) Drop(ctx context.Context, key string) error {
	done := make(chan error, 1)
	s.host.prop.submit(command{member: key, body: &fsmpb.DropMember{}, done: func(res fsm.Result, err error) {
		done <- errors.Join(err, res.Err)
	}})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Members names the members the group's state holds on this replica.
func (s *Shared) Members() []string {
	s.host.fsm.mu.RLock()
	defer s.host.fsm.mu.RUnlock()
	return s.host.fsm.g.Members()
}

// Raft exposes the group for status and membership changes.
func (s *Shared) Raft() *raft.Raft { return s.host.group.Raft }

// Replicas are the member replicas open in the group, in no order.
func (s *Shared) Replicas() []*Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.replicas))
}

// Applied is the index of the last entry the group's state machine applied.
func (s *Shared) Applied() uint64 { return s.host.fsm.appliedIndex() }

// appliedIndex is the last entry the state machine applied.
func (a *memberFSM) appliedIndex() uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.g != nil {
		return a.g.Applied()
	}
	return a.m.Applied()
}

// Close stops the group and every member replica still open in it; the
// data stays for the next start.
func (s *Shared) Close() error {
	var err error
	s.stopOnce.Do(func() {
		s.mu.Lock()
		close(s.stop)
		replicas := slices.Collect(maps.Values(s.replicas))
		s.mu.Unlock()
		for _, r := range replicas {
			r.Close()
		}
		s.wg.Wait()
		err = s.host.close(false)
		s.host.fsm.closeBodies()
	})
	return err
}

// holds reports whether a shared group's state holds the member named key.
func (a *memberFSM) holds(key string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.g == nil || a.g.Member(key) != nil
}
