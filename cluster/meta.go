package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cairnmq/cairn/cluster/raftgroup"
	"github.com/cairnmq/cairn/destination"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// metaGroupID names the meta group on the shared Raft port.
const metaGroupID = "meta"

// metaGroup is this node's replica of the meta group.
type metaGroup struct {
	n     *Node
	group *raftgroup.Group
	fsm   *metaFSM
	kick  chan struct{}
	// bootstrapped is true once the group has (or had) a configuration.
	bootstrapped bool
	// placedAt is the last placeReplicas round that found nothing to do,
	// rebalanced when it last moved a preferred host; only run's goroutine
	// uses them.
	placedAt   placementRound
	rebalanced time.Time
}

// metaFSM adapts the pure meta state machine to hashicorp/raft.
type metaFSM struct {
	mu      sync.RWMutex
	m       *fsm.Meta
	changed func()
	corrupt func(error)
	// appliedCh is closed, and replaced, whenever the state moves on.
	appliedCh chan struct{} // under mu
}

func (a *metaFSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	a.mu.Lock()
	res, err := a.m.Apply(l.Index, l.Data)
	a.movedOnLocked()
	a.mu.Unlock()
	if err != nil {
		a.corrupt(fmt.Errorf("meta entry %d: %w", l.Index, err))
		return nil
	}
	a.changed()
	return res
}

func (a *metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var buf bytes.Buffer
	if err := a.m.WriteSnapshot(&buf); err != nil {
		return nil, err
	}
	return metaSnapshot(buf.Bytes()), nil
}

func (a *metaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m, err := fsm.RestoreMeta(rc)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.m = m
	a.movedOnLocked()
	a.mu.Unlock()
	a.changed()
	return nil
}

// movedOnLocked wakes those waiting for the state to reach an index.
func (a *metaFSM) movedOnLocked() {
	if a.appliedCh != nil {
		close(a.appliedCh)
	}
	a.appliedCh = make(chan struct{})
}

// maxApplyWait bounds how long a node waits for its own replica of the meta
// group to apply a command the leader applied: the command is committed by
// then, so a replica that lags longer only makes a read stale.
const maxApplyWait = 5 * time.Second

// waitApplied waits until this replica applied the command at index, the
// context ends, or maxApplyWait passed.
func (a *metaFSM) waitApplied(ctx context.Context, index uint64) {
	timeout := time.NewTimer(maxApplyWait)
	defer timeout.Stop()
	for {
		a.mu.Lock()
		if a.appliedCh == nil {
			a.appliedCh = make(chan struct{})
		}
		applied, ch := a.m.Applied(), a.appliedCh
		a.mu.Unlock()
		if applied >= index {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		}
	}
}

func (a *metaFSM) read(fn func(m *fsm.Meta)) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	fn(a.m)
}

type metaSnapshot []byte

func (s metaSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (metaSnapshot) Release() {}

func openMeta(n *Node) (*metaGroup, error) {
	mg := &metaGroup{n: n, kick: n.metaKick}
	mg.fsm = &metaFSM{
		m:       fsm.NewMeta(),
		changed: func() { mg.poke(); n.groups.poke() },
		corrupt: func(err error) {
			n.cfg.OnFatal(fmt.Errorf("meta log entry cannot be applied; stopping to avoid diverging from the other nodes: %w", err))
		},
	}
	// Before Raft starts: its address lookups read the registry through n.meta.
	n.meta = mg
	layer, err := n.mux.Layer(metaGroupID)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(n.cfg.DataDir, "meta")
	mg.bootstrapped = n.hadState
	if !mg.bootstrapped && n.cfg.BootstrapExpect == 0 && len(n.cfg.Join) == 0 {
		return nil, fmt.Errorf("%w: %s holds no cluster state yet: start a new cluster with --bootstrap-expect N (1 for a single node), or join one with --join ADDR", ErrConfig, n.cfg.DataDir)
	}
	var peers []raft.Server
	if n.cfg.BootstrapExpect == 1 {
		mg.bootstrapped = true
		peers = []raft.Server{{ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.addrs.Raft)}}
	}
	g, err := raftgroup.Open(raftgroup.Config{
		Group: metaGroupID, NodeID: n.cfg.NodeID, Dir: dir,
		Stream: layer, Peers: peers, Timing: n.cfg.Timing, NotifyCommit: true, Logger: n.log, Addresses: raftAddresses{n}, OnStorageError: n.cfg.OnFatal,
		LogStore: n.cfg.LogStore, SnapshotSends: n.snapshotSends,
	}, mg.fsm)
	if err != nil {
		return nil, err
	}
	mg.group = g
	return mg, nil
}

func (mg *metaGroup) poke() {
	select {
	case mg.kick <- struct{}{}:
	default:
	}
}

// run keeps the registry current while this node leads the meta group:
// every node that gossip holds alive is registered with its addresses.
func (mg *metaGroup) run() {
	defer mg.n.bg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-mg.n.stopped:
			return
		case <-mg.kick:
		case <-t.C:
		case <-mg.group.Raft.LeaderCh():
		}
		if !mg.bootstrapped {
			mg.bootstrapWhenExpected()
		}
		if mg.group.Raft.State() == raft.Leader {
			if err := mg.registerNodes(); err != nil {
				mg.n.log.Warn("registering nodes in the meta group", "err", err)
			}
			if err := mg.reconcileMetaVoters(); err != nil {
				mg.n.log.Warn("matching the meta group to the registry", "err", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := mg.placeReplicas(ctx); err != nil {
				mg.n.log.Warn("placing replicas", "err", err)
			}
			if err := mg.renewMembers(ctx); err != nil {
				mg.n.log.Warn("renewing members", "err", err)
			}
			cancel()
		}
	}
}

// bootstrapWhenExpected forms the meta group once --bootstrap-expect nodes
// are alive in gossip, unless one of them already serves a cluster. Every
// one of them proposes the same configuration (the first N nodes by id),
// which hashicorp/raft accepts from each.
func (mg *metaGroup) bootstrapWhenExpected() {
	want := mg.n.cfg.BootstrapExpect
	if want < 2 {
		return
	}
	if _, leader := mg.group.Raft.LeaderWithID(); leader != "" {
		mg.bootstrapped = true
		return
	}
	var servers []raft.Server
	for _, m := range mg.n.gossip.members() {
		if m.State == "alive" && m.Meta.Serving {
			// A node that serves is in a formed cluster: this one, back
			// with an empty data directory, joins it rather than forming
			// another from the first entry on.
			return
		}
		if m.State == "alive" && m.Meta.Raft != "" {
			servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Meta.Raft)})
		}
	}
	if len(servers) < want {
		return
	}
	servers = servers[:want]
	if !slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == mg.n.cfg.NodeID }) {
		return
	}
	err := mg.group.Raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		mg.n.log.Warn("bootstrapping the meta group", "err", err)
		return
	}
	mg.bootstrapped = true
	mg.n.log.Info("meta group bootstrapped", "servers", len(servers))
}

func (mg *metaGroup) registerNodes() error {
	for _, gm := range mg.n.gossip.members() {
		if gm.State != "alive" || gm.Meta.Raft == "" {
			continue
		}
		want := &fsmpb.Node{Id: gm.ID, ClientAddr: gm.Meta.Client, PeerAddr: gm.Meta.Peer, RaftAddr: gm.Meta.Raft, GossipAddr: gm.Addr, HttpAddr: gm.Meta.HTTP, Incarnation: gm.Meta.Incarnation}
		var have *fsmpb.Node
		var refused bool
		mg.fsm.read(func(m *fsm.Meta) { have, _ = m.Node(gm.ID); refused = !m.MayRegister(want) })
		if refused || proto.Equal(have, want) {
			continue
		}
		if have != nil && have.Incarnation != "" && have.Incarnation != want.Incarnation {
			// Back with an empty data directory: its meta replica holds
			// nothing it voted for, so it stops voting until caught up
			// (reconcileMetaVoters); registering marks its member replicas
			// the same way (fsm.Meta.Rejoining).
			if err := mg.demoteEmptied(gm.ID); err != nil {
				return err
			}
			mg.n.log.Warn("node came back with an empty data directory: its replicas catch up again before they vote", "id", gm.ID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := mg.applyLocal(ctx, &fsmpb.RegisterNode{Node: want})
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// apply runs one meta command on the meta group's leader, here or on the
// node that leads it, and returns its result (a rejection as the error).
func (mg *metaGroup) apply(ctx context.Context, body proto.Message) (fsm.Result, error) {
	// A command that certainly did not reach the log (no leader known, the
	// leader not reachable, a node that no longer leads) waits out an
	// election, as member commands do (destination.RouteWindow).
	deadline := time.Now().Add(destination.RouteWindow)
	for {
		res, err := mg.applyOnce(ctx, body)
		if !errors.Is(err, destination.ErrNotSent) || !time.Now().Before(deadline) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return fsm.Result{}, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (mg *metaGroup) applyOnce(ctx context.Context, body proto.Message) (fsm.Result, error) {
	if mg.group.Raft.State() == raft.Leader {
		return mg.applyLocal(ctx, body)
	}
	_, leader := mg.group.Raft.LeaderWithID()
	if leader == "" {
		return fsm.Result{}, destination.MarkNotSent(fmt.Errorf("%w: the meta group has no leader (is a majority of the nodes up and connected?)", transport.ErrUnavailable))
	}
	c, err := mg.n.peers.client(string(leader))
	if err != nil {
		return fsm.Result{}, destination.MarkNotSent(fmt.Errorf("%w: meta leader %s: %v", transport.ErrUnavailable, leader, err))
	}
	cmd, err := fsm.NewCommand(body)
	if err != nil {
		return fsm.Result{}, err
	}
	resp, err := c.MetaApply(ctx, &peerpb.MetaApplyRequest{Command: cmd})
	if err != nil {
		return fsm.Result{}, fmt.Errorf("%w: meta leader %s: %v", transport.ErrUnavailable, leader, err)
	}
	if e := resp.Error; e != nil {
		err := fmt.Errorf("%w: meta leader %s: %s", transport.ErrUnavailable, leader, e.Message)
		if e.Code == codeNotLeader {
			return fsm.Result{}, destination.MarkNotSent(err)
		}
		return fsm.Result{}, err
	}
	// What this node's clients read next comes from its own replica: it
	// must hold the command (a queue deleted, then listed, is gone).
	mg.fsm.waitApplied(ctx, resp.Index)
	res := toResult(resp.Result)
	return res, res.Err
}

// applyLocal proposes one meta command on this node, which must lead.
func (mg *metaGroup) applyLocal(ctx context.Context, body proto.Message) (fsm.Result, error) {
	res, _, err := mg.applyLocalAt(ctx, body)
	return res, err
}

// applyLocalAt is applyLocal, also returning the index the command was
// applied at.
func (mg *metaGroup) applyLocalAt(ctx context.Context, body proto.Message) (fsm.Result, uint64, error) {
	if mg.group.Raft.State() != raft.Leader {
		return fsm.Result{}, 0, destination.MarkNotSent(fmt.Errorf("%w: this node does not lead the meta group (leader: %s)", transport.ErrUnavailable, mg.leaderID()))
	}
	data, err := fsm.Encode(fsm.MustCommand(body))
	if err != nil {
		return fsm.Result{}, 0, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		// hashicorp/raft reads a timeout of 0 as none at all.
		if timeout = time.Until(dl); timeout <= 0 {
			return fsm.Result{}, 0, context.DeadlineExceeded
		}
	}
	f := mg.group.Raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		err = fmt.Errorf("%w: meta group: %w", transport.ErrUnavailable, err)
		if errors.Is(err, raft.ErrNotLeader) {
			err = destination.MarkNotSent(err)
		}
		return fsm.Result{}, 0, err
	}
	res, _ := f.Response().([]fsm.Result)
	if len(res) != 1 {
		return fsm.Result{}, 0, errors.New("meta group: no result for the command")
	}
	return res[0], f.Index(), res[0].Err
}

func (mg *metaGroup) leaderID() string {
	_, id := mg.group.Raft.LeaderWithID()
	if id == "" {
		return "none"
	}
	return string(id)
}

// ready reports whether the meta group has a leader, this node is in its
// configuration and registered, and this replica has applied what it knows.
func (mg *metaGroup) ready() error {
	if _, id := mg.group.Raft.LeaderWithID(); id == "" {
		return errors.New("the meta group has no leader yet")
	}
	if err := mg.caughtUp(); err != nil {
		return err
	}
	var registered bool
	mg.fsm.read(func(m *fsm.Meta) {
		_, registered = m.Node(mg.n.cfg.NodeID)
		registered = registered && !mg.staleRecord(m)
	})
	if !registered {
		return errors.New("this node is not registered in the meta group yet")
	}
	return nil
}

// staleRecord reports whether m registers this node under another data
// directory: it came back empty, and the leader has not yet registered it
// again and marked the groups its replicas must catch up in.
func (mg *metaGroup) staleRecord(m *fsm.Meta) bool {
	nd, ok := m.Node(mg.n.cfg.NodeID)
	return ok && nd.Incarnation != "" && nd.Incarnation != mg.n.incarnation
}

// caughtUp is nil once this replica has applied what it knows committed.
// An election under way leaves it as caught up as it was; a node removed
// from the cluster, no longer registered, still acts on what it applied.
func (mg *metaGroup) caughtUp() error {
	var applied uint64
	mg.fsm.read(func(m *fsm.Meta) { applied = m.Applied() })
	if !mg.group.CaughtUp(applied) {
		return fmt.Errorf("the meta group is catching up (applied %d, committed %d)", applied, mg.group.Raft.CommitIndex())
	}
	return nil
}

func (mg *metaGroup) read(fn func(m *fsm.Meta)) { mg.fsm.read(fn) }

// destination returns a destination's definition.
func (mg *metaGroup) destination(name string) (d *fsmpb.Destination, ok bool) {
	mg.read(func(m *fsm.Meta) { d, ok = m.Destination(name) })
	return d, ok
}

// role is this node's role in the meta group, as the status shows it.
func (mg *metaGroup) role(nodeID string) string {
	r := mg.group.Raft
	if nodeID == mg.n.cfg.NodeID {
		return roleName(r.State())
	}
	_, leader := r.LeaderWithID()
	if string(leader) == nodeID {
		return "leader"
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return "unknown"
	}
	i := slices.IndexFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == nodeID })
	switch {
	case i < 0:
		return "none"
	case f.Configuration().Servers[i].Suffrage == raft.Nonvoter:
		return "nonvoter"
	}
	return "follower"
}

func roleName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "none"
}

func (mg *metaGroup) close() {
	if err := mg.group.Close(); err != nil {
		mg.n.log.Warn("closing the meta group", "err", err)
	}
}
