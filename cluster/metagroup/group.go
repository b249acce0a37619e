package metagroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/raftgroup"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
)

// ID names the meta group on the shared Raft port and in the status.
const ID = "meta"

// Config says how to open this node's replica of the meta group.
type Config struct {
	NodeID string
	// Incarnation names this node's data directory: a registry record of
	// another one is stale (StaleRecord).
	Incarnation string
	// Dir holds the group's log and snapshots; Bootstrapped says the node
	// had state already (it was in a cluster).
	Dir          string
	Bootstrapped bool
	// BootstrapExpect forms a new cluster once that many nodes are alive
	// (1: this node alone, at once, on RaftAddr).
	BootstrapExpect int
	RaftAddr        string
	Stream          raft.StreamLayer
	Addresses       raft.ServerAddressProvider
	Timing          raftgroup.Timing
	LogStore        string
	SnapshotSends   *raftgroup.SnapshotSends
	Logger          *slog.Logger
	// OnFatal stops the node: a log store that failed a write. (A meta
	// entry that cannot be applied stops the replica alone: ErrStopped.)
	OnFatal func(error)
	// CheckRPC sees each Raft RPC the replica is sent before Raft does
	// (raftgroup.Config.CheckRPC).
	CheckRPC func(conn net.Conn, command any, latest raft.Configuration) error
	// Kick wakes the leader's loop (Run) before its next second.
	Kick chan struct{}
}

// Node is what the meta group asks of the node it runs on. Package
// cluster implements it.
type Node interface {
	// Members are the nodes gossip knows, and what each says of itself.
	Members() []Member
	// ReplicaCaughtUp says whether node's replica of group (named name)
	// has applied nearly all the group committed, as node reports it.
	ReplicaCaughtUp(node, name string, group *raft.Raft) bool
	// Changed is told each time the meta state moved on.
	Changed()
	// Forward runs a meta command on leader, another node, and returns its
	// result and the index it was applied at; an error marked
	// destination.ErrNotSent says it certainly was not.
	Forward(ctx context.Context, leader string, cmd *fsmpb.Command) (fsm.Result, uint64, error)
	// Lead runs the leader's other duties once: placement and renewals.
	Lead(ctx context.Context)
	// Proves says whether the node at m's peer address holds the
	// certificate of m.ID (nil when TLS is off): gossip alone names no
	// one.
	Proves(ctx context.Context, m Member) error
}

// Member is a node as gossip knows it.
type Member struct {
	ID, Addr                              string
	Alive, Serving                        bool
	Raft, Client, Peer, HTTP, Incarnation string
}

// Group is this node's replica of the meta group.
type Group struct {
	cfg   Config
	node  Node
	group *raftgroup.Group
	fsm   *metaFSM
	// bootstrapped is true once the group has (or had) a configuration.
	bootstrapped bool
	// opened is closed once Open has set group (or failed).
	opened chan struct{}

	mu sync.Mutex
	// unprovenWhy is the last reason logged of each gossip member not
	// registered for want of proof.
	unprovenWhy map[string]string
}

// New is this node's replica of the meta group, its state machine
// without Raft yet: Open starts Raft, whose address lookups may read the
// registry (Read) at once.
func New(cfg Config, node Node) *Group {
	g := &Group{cfg: cfg, node: node, bootstrapped: cfg.Bootstrapped, opened: make(chan struct{})}
	g.fsm = &metaFSM{
		m:       fsm.NewMeta(),
		changed: node.Changed,
		corrupt: func(index uint64, err error) {
			cfg.Logger.Error("meta replica stopped: a log entry cannot be applied; the node stays up, not ready, and leaves the meta group to the others (empty its data directory and start it again to copy the meta state from them)", "group", ID, "index", index, "err", err)
			// Neither leading nor voting on a state it no longer
			// follows; not from Raft's goroutine, which Shutdown waits for.
			go func() {
				<-g.opened
				if g.group != nil {
					if err := g.group.Raft.Shutdown().Error(); err != nil {
						cfg.Logger.Warn("shutting the stopped meta replica's Raft down", "err", err)
					}
				}
			}()
		},
	}
	return g
}

// ErrStopped is wrapped when this node's meta replica has stopped on an
// entry it cannot apply: its state stays where it was, its Raft is shut
// down (New), and the node is not ready.
var ErrStopped = errors.New("meta replica stopped")

// Open opens the group's Raft log and starts Raft.
func (mg *Group) Open() error {
	var peers []raft.Server
	if mg.cfg.BootstrapExpect == 1 {
		mg.bootstrapped = true
		peers = []raft.Server{{ID: raft.ServerID(mg.cfg.NodeID), Address: raft.ServerAddress(mg.cfg.RaftAddr)}}
	}
	g, err := raftgroup.Open(raftgroup.Config{
		Group: ID, NodeID: mg.cfg.NodeID, Dir: mg.cfg.Dir,
		Stream: mg.cfg.Stream, Peers: peers, Timing: mg.cfg.Timing, NotifyCommit: true, Logger: mg.cfg.Logger, Addresses: mg.cfg.Addresses, OnStorageError: mg.cfg.OnFatal,
		LogStore: mg.cfg.LogStore, SnapshotSends: mg.cfg.SnapshotSends, CheckRPC: mg.cfg.CheckRPC,
	}, mg.fsm)
	defer close(mg.opened)
	if err != nil {
		return err
	}
	mg.group = g
	return nil
}

// Raft is the group's Raft.
func (mg *Group) Raft() *raft.Raft { return mg.group.Raft }

// Run, until stop is closed, keeps the registry current while this node
// leads the meta group (every node gossip holds alive is registered with
// its addresses, and the group's voters follow the registry), and runs the
// node's other leader duties (Node.Lead).
func (mg *Group) Run(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-mg.cfg.Kick:
		case <-t.C:
		case <-mg.group.Raft.LeaderCh():
		}
		if mg.fsm.stoppedErr() != nil {
			return // a stopped replica does nothing more; its Raft is shut down (New)
		}
		if !mg.bootstrapped {
			mg.bootstrapWhenExpected()
		}
		if mg.group.Raft.State() == raft.Leader {
			if err := mg.registerNodes(); err != nil {
				mg.cfg.Logger.Warn("registering nodes in the meta group", "err", err)
			}
			if err := mg.reconcileMetaVoters(); err != nil {
				mg.cfg.Logger.Warn("matching the meta group to the registry", "err", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			mg.node.Lead(ctx)
			cancel()
		}
	}
}

// bootstrapWhenExpected forms the meta group once --bootstrap-expect nodes
// are alive in gossip, unless one of them already serves a cluster. Every
// one of them proposes the same configuration (the first N nodes by id),
// which hashicorp/raft accepts from each.
func (mg *Group) bootstrapWhenExpected() {
	want := mg.cfg.BootstrapExpect
	if want < 2 {
		return
	}
	if _, leader := mg.group.Raft.LeaderWithID(); leader != "" {
		mg.bootstrapped = true
		return
	}
	var servers []raft.Server
	for _, m := range mg.node.Members() {
		if m.Alive && m.Serving {
			// A node that serves is in a formed cluster: this one, back
			// with an empty data directory, joins it rather than forming
			// another from the first entry on.
			return
		}
		if m.Alive && m.Raft != "" {
			servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Raft)})
		}
	}
	if len(servers) < want {
		return
	}
	servers = servers[:want]
	if !slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == mg.cfg.NodeID }) {
		return
	}
	err := mg.group.Raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		mg.cfg.Logger.Warn("bootstrapping the meta group", "err", err)
		return
	}
	mg.bootstrapped = true
	mg.cfg.Logger.Info("meta group bootstrapped", "servers", len(servers))
}

// unproven logs, once per reason, that a gossip member is not registered:
// it did not prove its name with its certificate.
func (mg *Group) unproven(id string, err error) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if mg.unprovenWhy == nil {
		mg.unprovenWhy = map[string]string{}
	}
	if mg.unprovenWhy[id] == err.Error() {
		return
	}
	mg.unprovenWhy[id] = err.Error()
	mg.cfg.Logger.Warn("not registering a gossip member: it did not prove its name with a node certificate of this cluster", "id", id, "err", err)
}

func (mg *Group) registerNodes() error {
	for _, gm := range mg.node.Members() {
		if !gm.Alive || gm.Raft == "" {
			continue
		}
		want := &fsmpb.Node{Id: gm.ID, ClientAddr: gm.Client, PeerAddr: gm.Peer, RaftAddr: gm.Raft, GossipAddr: gm.Addr, HttpAddr: gm.HTTP, Incarnation: gm.Incarnation}
		var have *fsmpb.Node
		var refused bool
		mg.fsm.read(func(m *fsm.Meta) { have, _ = m.Node(gm.ID); refused = !m.MayRegister(want) })
		if refused || proto.Equal(have, want) {
			continue
		}
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := mg.node.Proves(pctx, gm)
		cancel()
		if err != nil {
			mg.unproven(gm.ID, err)
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
			mg.cfg.Logger.Warn("node came back with an empty data directory: its replicas catch up again before they vote", "id", gm.ID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = mg.applyLocal(ctx, &fsmpb.RegisterNode{Node: want})
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// Apply runs one meta command on the meta group's leader, here or on the
// node that leads it, and returns its result (a rejection as the error).
func (mg *Group) Apply(ctx context.Context, body proto.Message) (fsm.Result, error) {
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

func (mg *Group) applyOnce(ctx context.Context, body proto.Message) (fsm.Result, error) {
	if mg.group.Raft.State() == raft.Leader {
		return mg.applyLocal(ctx, body)
	}
	_, leader := mg.group.Raft.LeaderWithID()
	if leader == "" {
		return fsm.Result{}, destination.MarkNotSent(fmt.Errorf("%w: the meta group has no leader (is a majority of the nodes up and connected?)", transport.ErrUnavailable))
	}
	cmd, err := fsm.NewCommand(body)
	if err != nil {
		return fsm.Result{}, err
	}
	res, index, err := mg.node.Forward(ctx, string(leader), cmd)
	if err != nil {
		return res, err
	}
	// What this node's clients read next comes from its own replica: it
	// must hold the command (a queue deleted, then listed, is gone).
	mg.fsm.waitApplied(ctx, index)
	return res, res.Err
}

// applyLocal proposes one meta command on this node, which must lead.
func (mg *Group) applyLocal(ctx context.Context, body proto.Message) (fsm.Result, error) {
	res, _, err := mg.ApplyLocalAt(ctx, body)
	return res, err
}

// ApplyLocalAt is applyLocal, also returning the index the command was
// applied at.
func (mg *Group) ApplyLocalAt(ctx context.Context, body proto.Message) (fsm.Result, uint64, error) {
	if mg.group.Raft.State() != raft.Leader {
		return fsm.Result{}, 0, destination.MarkNotSent(fmt.Errorf("%w: this node does not lead the meta group (leader: %s)", transport.ErrUnavailable, mg.LeaderID()))
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
	if err, ok := f.Response().(error); ok { // committed, but this replica stopped before it
		return fsm.Result{}, 0, fmt.Errorf("%w: %w: %w", transport.ErrUnavailable, destination.ErrOutcomeUnknown, err)
	}
	res, _ := f.Response().([]fsm.Result)
	if len(res) != 1 {
		return fsm.Result{}, 0, errors.New("meta group: no result for the command")
	}
	return res[0], f.Index(), res[0].Err
}

func (mg *Group) LeaderID() string {
	_, id := mg.group.Raft.LeaderWithID()
	if id == "" {
		return "none"
	}
	return string(id)
}

// Ready reports whether the meta group has a leader, this node is in its
// configuration and registered, and this replica has applied what it knows.
func (mg *Group) Ready() error {
	if err := mg.fsm.stoppedErr(); err != nil {
		return err
	}
	if _, id := mg.group.Raft.LeaderWithID(); id == "" {
		return errors.New("the meta group has no leader yet")
	}
	if err := mg.CaughtUp(); err != nil {
		return err
	}
	var registered bool
	mg.fsm.read(func(m *fsm.Meta) {
		_, registered = m.Node(mg.cfg.NodeID)
		registered = registered && !mg.StaleRecord(m)
	})
	if !registered {
		return errors.New("this node is not registered in the meta group yet")
	}
	return nil
}

// StaleRecord reports whether m registers this node under another data
// directory: it came back empty, and the leader has not yet registered it
// again and marked the groups its replicas must catch up in.
func (mg *Group) StaleRecord(m *fsm.Meta) bool {
	nd, ok := m.Node(mg.cfg.NodeID)
	return ok && nd.Incarnation != "" && nd.Incarnation != mg.cfg.Incarnation
}

// CaughtUp is nil once this replica has applied what it knows committed.
// An election under way leaves it as caught up as it was; a node removed
// from the cluster, no longer registered, still acts on what it applied.
func (mg *Group) CaughtUp() error {
	if err := mg.fsm.stoppedErr(); err != nil {
		return err
	}
	var applied uint64
	mg.fsm.read(func(m *fsm.Meta) { applied = m.Applied() })
	if !mg.group.CaughtUp(applied) {
		return fmt.Errorf("the meta group is catching up (applied %d, committed %d)", applied, mg.group.Raft.CommitIndex())
	}
	return nil
}

func (mg *Group) Read(fn func(m *fsm.Meta)) { mg.fsm.read(fn) }

// Destination returns a destination's definition.
func (mg *Group) Destination(name string) (d *fsmpb.Destination, ok bool) {
	mg.Read(func(m *fsm.Meta) { d, ok = m.Destination(name) })
	return d, ok
}

// Role is this node's role in the meta group, as the status shows it.
func (mg *Group) Role(nodeID string) string {
	r := mg.group.Raft
	if nodeID == mg.cfg.NodeID {
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

func (mg *Group) Close() {
	if err := mg.group.Close(); err != nil {
		mg.cfg.Logger.Warn("closing the meta group", "err", err)
	}
}
