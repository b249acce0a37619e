package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sync/errgroup"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/raftgroup"
)

// groups runs the member replicas that the meta group places on this node:
// it opens the ones placed here and destroys the ones whose destination was
// deleted.
type groups struct {
	n    *Node
	kick chan struct{}

	mu sync.RWMutex
	// byGroup is keyed by a member's incarnation (groupID: its Raft group
	// id when it has a group of its own), byName by member address.
	byGroup map[string]*member.Replica
	byName  map[string]*member.Replica
	// shared are the shared groups open here, by group id; sharing
	// serialises their opening and closing.
	shared  map[string]*member.Shared
	sharing sync.Mutex
	// transferred is when each group's leadership was last moved.
	transferred map[string]time.Time
	// reconciledAt is the meta state's index at the last reconcile that
	// opened every replica placed here.
	reconciledAt atomic.Uint64
	// retiring is set while a replica that moved away is still in its
	// group's configuration: every round looks at it again.
	retiring atomic.Bool
	// placed is placedHere's answer at the meta state's index placedAt.
	placedMu sync.Mutex
	placed   []string
	placedAt uint64
	// stale is when dropStale first found each member in a group that no
	// destination places in it; only run's goroutine uses it.
	stale map[string]time.Time
	// rebuilding holds the groups (by id) whose replica here is to be
	// rebuilt (false) or is being rebuilt (true), rebuildAsked the first
	// ones' targets, and rebuilds counts rebuilds by reason (rebuild.go).
	rebuilding   map[string]bool
	rebuildAsked map[string]rebuildTarget
	rebuilds     map[string]uint64
}

func newGroups(n *Node) *groups {
	return &groups{n: n, kick: n.groupsKick, byGroup: make(map[string]*member.Replica), byName: make(map[string]*member.Replica),
		shared: make(map[string]*member.Shared), transferred: make(map[string]time.Time), stale: make(map[string]time.Time),
		rebuilding: make(map[string]bool), rebuildAsked: make(map[string]rebuildTarget), rebuilds: make(map[string]uint64)}
}

// raftUnit is one Raft group open here: a member's own, or a shared one.
type raftUnit struct {
	// id names the group; member is a member in it, whose placement
	// says where the group's replicas go.
	id, member string
	raft       *raft.Raft
	// applied is the last entry its state machine applied.
	applied func() uint64
}

func (u raftUnit) Name() string     { return u.member }
func (u raftUnit) Raft() *raft.Raft { return u.raft }

// units lists the Raft groups open here, each once.
func (gs *groups) units() []raftUnit {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	var out []raftUnit
	for _, r := range gs.byName {
		if r.Shared() == nil {
			out = append(out, raftUnit{id: r.Name(), member: r.Name(), raft: r.Raft(), applied: r.Applied})
		}
	}
	for id, s := range gs.shared {
		if rs := s.Replicas(); len(rs) > 0 {
			out = append(out, raftUnit{id: id, member: rs[0].Name(), raft: s.Raft(), applied: s.Applied})
		}
	}
	return out
}

func (gs *groups) poke() {
	select {
	case gs.kick <- struct{}{}:
	default:
	}
}

// groupID names a member's Raft group. The destination's uid keeps a group
// of a deleted destination apart from one of a new destination of the same
// name; a member's own uid (members added by a resize) keeps it apart from
// an earlier member of the same index that a resize removed.
func groupID(d *fsmpb.Destination, index uint32) string {
	if uid := d.Members[index].Uid; uid != "" {
		return fsm.MemberName(d.Name, index) + "@" + d.Uid + "." + uid
	}
	return fsm.MemberName(d.Name, index) + "@" + d.Uid
}

func (gs *groups) run() {
	defer gs.n.bg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-gs.n.stopped:
			return
		case <-gs.kick:
		case <-t.C:
		}
		gs.reconcile()
		gs.startRebuilds()
		gs.dropStale()
		gs.sweepSessions()
		gs.preferHosts()
	}
}

// openMember and openShared open a member's own group and a shared group;
// tests wrap them to watch the opens.
var (
	openMember = member.Open
	openShared = member.OpenShared
)

type placed struct {
	dest  *fsmpb.Destination
	place *fsmpb.MemberPlacement
}

func (gs *groups) reconcile() {
	// A restarted node's meta replica holds the placement of its last
	// snapshot until the leader says what was committed since; acting on
	// it opened the replicas in waves (those the snapshot knew, then the
	// rest once the log was applied), each wave reading its logs before
	// the next began. Every meta apply pokes this loop, the last one
	// included.
	if gs.n.meta.CaughtUp() != nil {
		return
	}
	want := map[string]placed{}
	existing := map[string]bool{}
	// elsewhere are the members placed on other nodes only: a replica
	// here of one of them moved away, and its state is the others' still.
	elsewhere := map[string]placed{}
	var nodes map[string]*fsmpb.Node
	var at uint64
	unchanged := false
	gs.n.meta.Read(func(m *fsm.Meta) {
		// A round that opened everything placed here needs no other
		// until the placement changes: with a thousand destinations
		// it walks them all. A node back with an empty data directory
		// opens nothing until the leader registered it again, marking
		// the groups it rejoins (raftConfig).
		at = m.Applied()
		if unchanged = (at == gs.reconciledAt.Load() && !gs.retiring.Load()) || gs.n.meta.StaleRecord(m); unchanged {
			return
		}
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				existing[fsm.MemberName(d.Name, p.Index)] = true
				if slices.Contains(p.Replicas, gs.n.cfg.NodeID) {
					want[groupID(d, p.Index)] = placed{d, p}
				} else {
					elsewhere[groupID(d, p.Index)] = placed{d, p}
				}
			}
		}
		nodes = map[string]*fsmpb.Node{}
		for _, nd := range m.Nodes() {
			nodes[nd.Id] = nd
		}
	})
	if unchanged {
		return
	}
	gs.keepRetiring(want, elsewhere)
	gs.closeRemoved(want, elsewhere, existing)
	if gs.openPlaced(want, nodes) {
		gs.reconciledAt.Store(at)
	}
}

// keepRetiring keeps in want the replicas here that moved away (found in
// elsewhere) until they are out of their group's configuration. A replica
// that moved away stays open, voting, until its group's leader has removed
// it from the configuration, which it does once the replica replacing it
// votes (reconcileMemberVoters): the group never runs on fewer replicas
// than before the move.
func (gs *groups) keepRetiring(want, elsewhere map[string]placed) {
	gs.mu.RLock()
	movedOut := map[string]*member.Replica{}
	for id, r := range gs.byGroup {
		if _, ok := elsewhere[id]; ok {
			movedOut[id] = r
		}
	}
	gs.mu.RUnlock()
	retiring := false
	retired := map[*raft.Raft]bool{} // the members of a shared group share its answer
	for id, r := range movedOut {
		done, asked := retired[r.Raft()]
		if !asked {
			done = gs.retired(r)
			retired[r.Raft()] = done
		}
		if !done {
			want[id] = elsewhere[id]
			retiring = true
		}
	}
	gs.retiring.Store(retiring)
}

// closeRemoved destroys the replicas here of members that no longer exist
// and closes those that moved away, once out of want, and ends what used
// them.
func (gs *groups) closeRemoved(want, elsewhere map[string]placed, existing map[string]bool) {
	gs.mu.Lock()
	var gone, moved []*member.Replica
	for id, r := range gs.byGroup {
		if _, ok := want[id]; !ok {
			if _, ok := elsewhere[id]; ok {
				moved = append(moved, r)
			} else {
				gone = append(gone, r)
			}
			delete(gs.byGroup, id)
			delete(gs.byName, r.Name())
		}
	}
	gs.mu.Unlock()
	gs.n.conns.PruneDeleted(func(name string) bool { _, ok := existing[name]; return ok })
	for _, r := range gone {
		gs.n.log.Info("destroying member replica: its destination was deleted or the member removed", "member", r.Name())
		if err := r.Destroy(); err != nil {
			gs.n.log.Warn("destroying member replica", "member", r.Name(), "err", err)
		}
	}
	// Destroying a replica that moved away would drop the member from a
	// shared group's state on every replica when this one leads it: it is
	// closed, once out of its group's configuration.
	for _, r := range moved {
		gs.n.log.Info("closing member replica: its replica moved to another node", "member", r.Name())
		if err := r.Close(); err != nil {
			gs.n.log.Warn("closing member replica", "member", r.Name(), "err", err)
		}
	}
	gs.closeUnused(want)
}

// openPlaced opens the replicas in want not open yet, and reports whether
// every one opened.
func (gs *groups) openPlaced(want map[string]placed, nodes map[string]*fsmpb.Node) bool {
	// Replicas open side by side, because opening one reads its whole log
	// since its last snapshot (hashicorp/raft's NewRaft looks through it for
	// configuration changes) and a node is ready only once every replica
	// placed on it is open (cluster/DESIGN.md, "Replicas open side by side").
	var opening errgroup.Group
	var failed atomic.Bool
	opening.SetLimit(max(2, runtime.GOMAXPROCS(0)))
	for id, p := range want {
		gs.mu.RLock()
		_, open := gs.byGroup[id]
		gs.mu.RUnlock()
		if open {
			continue
		}
		t := rebuildTarget{id: id, key: fsm.GroupKey(p.dest.Name, p.place)}
		if p.place.Group != "" {
			t.id = p.place.Group
		}
		if gs.rebuildingGroup(t.id) {
			failed.Store(true)
			continue
		}
		opening.Go(func() error {
			r, err := gs.open(id, p, nodes)
			if errors.Is(err, raftgroup.ErrDamaged) {
				gs.n.log.Error("member replica's data on disk cannot be read: rebuilding it from its group's other replicas", "group", t.id, "err", err)
				gs.toRebuild(t, rebuildLog)
			} else if err != nil {
				gs.n.log.Warn("cannot open member replica yet", "group", id, "err", err)
			}
			if err != nil {
				failed.Store(true)
				return nil
			}
			gs.mu.Lock()
			gs.byGroup[id] = r
			gs.byName[r.Name()] = r
			gs.mu.Unlock()
			return nil
		})
	}
	_ = opening.Wait() // each open logs its own failure; the next round tries it again
	return !failed.Load()
}

func (gs *groups) open(id string, p placed, nodes map[string]*fsmpb.Node) (*member.Replica, error) {
	cfg := gs.n.replicaConfig()
	cfg.Name = fsm.MemberName(p.dest.Name, p.place.Index)
	cfg.Settings, cfg.FirstDeliveryID = memberSettings(p.dest), p.place.FirstDeliveryId
	if s := p.dest.Subscription; s != nil {
		cfg.Settings.Subscribes, cfg.Settings.Selector = subscribedKey(s, p.place.Index), s.Selector
	}
	cfg.Mover = mover{n: gs.n, group: id}
	cfg.ForwardDelay = forwardDelay(p.dest)
	// A new leader checks at once whether the preferred host should lead.
	cfg.OnLeaderChange = func(leading bool) {
		if leading {
			gs.poke()
		}
	}
	if g := p.place.Group; g != "" {
		s, err := gs.openShared(g, p, nodes)
		if err != nil {
			return nil, err
		}
		return s.Open(id, cfg)
	}
	rc, err := gs.raftConfig(id, p, nodes)
	if err != nil {
		return nil, err
	}
	cfg.GroupID, cfg.Dir, cfg.Stream, cfg.Peers, cfg.OnCorrupt = rc.GroupID, rc.Dir, rc.Stream, rc.Peers, rc.OnCorrupt
	r, err := openMember(cfg)
	if err != nil {
		rc.Stream.Close()
		return nil, err
	}
	return r, nil
}

// raftConfig says where Raft group id runs on this node: its directory,
// its layer of the Raft port, and, for a replica the group was created
// with, the first configuration to bootstrap it with.
func (gs *groups) raftConfig(id string, p placed, nodes map[string]*fsmpb.Node) (member.Config, error) {
	// Only the replicas the group was created with bootstrap it; one placed
	// later, or back with an empty data directory, joins the running group
	// when its leader adds it.
	initial := p.place.Initial
	if len(initial) == 0 {
		initial = p.place.Replicas
	}
	var rejoining bool
	gs.n.meta.Read(func(m *fsm.Meta) { rejoining = m.Rejoining(gs.n.cfg.NodeID, fsm.GroupKey(p.dest.Name, p.place)) })
	var peers []raft.Server
	if slices.Contains(initial, gs.n.cfg.NodeID) && !rejoining {
		for _, nid := range initial {
			nd, ok := nodes[nid]
			if !ok {
				// A node the group was created with has left the
				// cluster: the group runs, and this replica, placed
				// again, joins it.
				peers = nil
				break
			}
			peers = append(peers, raft.Server{ID: raft.ServerID(nid), Address: raft.ServerAddress(nd.RaftAddr)})
		}
	}
	layer, err := gs.n.mux.Layer(id)
	if err != nil {
		return member.Config{}, err
	}
	cfg := gs.n.replicaConfig()
	cfg.Name, cfg.GroupID, cfg.Dir, cfg.Stream, cfg.Peers = id, id, filepath.Join(gs.n.cfg.DataDir, "members", id), layer, peers
	cfg.OnCorrupt = gs.onCorrupt(rebuildTarget{id: id, key: fsm.GroupKey(p.dest.Name, p.place)})
	return cfg, nil
}

// openShared returns the shared group id, opening it if it is not open.
func (gs *groups) openShared(id string, p placed, nodes map[string]*fsmpb.Node) (*member.Shared, error) {
	gs.sharing.Lock()
	defer gs.sharing.Unlock()
	gs.mu.RLock()
	s := gs.shared[id]
	gs.mu.RUnlock()
	if s != nil {
		return s, nil
	}
	cfg, err := gs.raftConfig(id, p, nodes)
	if err != nil {
		return nil, err
	}
	s, err = openShared(cfg)
	if err != nil {
		cfg.Stream.Close()
		return nil, err
	}
	gs.mu.Lock()
	gs.shared[id] = s
	gs.mu.Unlock()
	return s, nil
}

// closeUnused closes the shared groups that no member placed here uses
// any more; their data stays, for a member placed in them again.
func (gs *groups) closeUnused(want map[string]placed) {
	gs.sharing.Lock()
	defer gs.sharing.Unlock()
	used := map[string]bool{}
	for _, p := range want {
		used[p.place.Group] = true
	}
	gs.mu.Lock()
	var unused []*member.Shared
	for id, s := range gs.shared {
		if !used[id] {
			unused = append(unused, s)
			delete(gs.shared, id)
		}
	}
	gs.mu.Unlock()
	for _, s := range unused {
		if err := s.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
			gs.n.log.Warn("closing a shared group no member here uses", "err", err)
		}
	}
}

// memberSettings splits the destination's limits among its members, which
// count what messages cost in memory (a member made by an older build
// starts to once it is empty).
func memberSettings(d *fsmpb.Destination) *fsmpb.MemberSettings {
	s := fsm.DefaultSettings()
	s.CountMemory = true
	if n := int64(len(d.Members)); n > 0 && d.Kind != fsmpb.DestinationKind_DESTINATION_KIND_TOPIC { // a topic's members hold nothing; its subscriptions' do
		s.MaxBytes = (d.MaxBytes + n - 1) / n
		s.MaxMessages = (d.MaxMessages + uint64(n) - 1) / uint64(n)
	}
	if d.DedupWindowNs > 0 {
		s.DedupWindowNs = d.DedupWindowNs
	}
	if d.DedupMaxIds > 0 {
		s.DedupMaxIds = d.DedupMaxIds
	}
	s.MaxDeliveries = d.MaxDeliveries
	s.RedeliveryDelayNs, s.RedeliveryBackoff, s.RedeliveryMaxDelayNs = d.RedeliveryDelayNs, d.RedeliveryBackoff, d.RedeliveryMaxDelayNs
	return s
}

// sweepSessions lets each hosted member release the sessions of front-ends
// that gossip no longer holds alive.
func (gs *groups) sweepSessions() {
	for _, r := range gs.all() {
		if !r.Leading() || !r.HoldsDeadSessions() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.SweepSessions(ctx); err != nil {
			gs.n.log.Warn("releasing sessions of dead front-ends", "member", r.Name(), "err", err)
		}
		cancel()
	}
}

func (gs *groups) all() []*member.Replica {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	out := make([]*member.Replica, 0, len(gs.byName))
	for _, r := range gs.byName {
		out = append(out, r)
	}
	return out
}

// replica returns this node's replica of a member, if it has one.
func (gs *groups) replica(name string) (*member.Replica, bool) {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	r, ok := gs.byName[name]
	return r, ok
}

// ready reports whether every member replica placed here is open, has a
// leader, and — where this node leads — has finished its takeover, so that
// a ready node serves every queue it hosts. Readiness asks four times a
// second with thousands of members placed here, a few shared groups among
// them: the map is locked once and each group's leader asked once.
func (gs *groups) ready() error {
	placed := gs.placedHere()
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	leaders := map[*raft.Raft]raft.ServerID{}
	for _, name := range placed {
		r, ok := gs.byName[name]
		if !ok {
			return fmt.Errorf("member %s is not open yet", name)
		}
		leader, asked := leaders[r.Raft()]
		if !asked {
			_, leader = r.Raft().LeaderWithID()
			leaders[r.Raft()] = leader
		}
		switch {
		case leader == "":
			return fmt.Errorf("member %s has no leader yet", name)
		case string(leader) == gs.n.cfg.NodeID && !r.Leading():
			return fmt.Errorf("member %s is taking over here", name)
		}
	}
	return nil
}

// opening reports whether a member replica placed here is not open yet.
func (gs *groups) opening() bool {
	placed := gs.placedHere()
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	return slices.ContainsFunc(placed, func(name string) bool {
		_, open := gs.byName[name]
		return !open
	})
}

// placedHere lists the members the placement gives a replica on this node.
// Readiness asks four times a second; the list is worked out again only
// when the meta state changed.
func (gs *groups) placedHere() (placed []string) {
	gs.n.meta.Read(func(m *fsm.Meta) {
		gs.placedMu.Lock()
		defer gs.placedMu.Unlock()
		if gs.placedAt == m.Applied() && gs.placed != nil {
			placed = gs.placed
			return
		}
		placed = []string{}
		for _, d := range m.Destinations() {
			for _, p := range d.Members {
				if slices.Contains(p.Replicas, gs.n.cfg.NodeID) {
					placed = append(placed, fsm.MemberName(d.Name, p.Index))
				}
			}
		}
		gs.placed, gs.placedAt = placed, m.Applied()
	})
	return placed
}

func (gs *groups) closeAll() {
	gs.mu.Lock()
	rs := make([]*member.Replica, 0, len(gs.byName))
	for _, r := range gs.byName {
		rs = append(rs, r)
	}
	shared := slices.Collect(maps.Values(gs.shared))
	gs.byGroup, gs.byName, gs.shared = map[string]*member.Replica{}, map[string]*member.Replica{}, map[string]*member.Shared{}
	gs.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
				gs.n.log.Warn("closing member replica", "member", r.Name(), "err", err)
			}
		}()
	}
	wg.Wait()
	for _, s := range shared {
		wg.Go(func() {
			if err := s.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
				gs.n.log.Warn("closing shared group", "err", err)
			}
		})
	}
	wg.Wait()
}
