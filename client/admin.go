package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Admin runs administrative calls against a cluster, trying each address in
// turn until a node answers.
type Admin struct {
	addrs []string
	conns []*grpc.ClientConn
}

// NewAdmin prepares admin calls to the nodes at addrs; it connects lazily.
// Of opts, only the first is read, and of it only what says how to reach
// and prove oneself to the nodes (TLS).
func NewAdmin(addrs []string, opts ...Options) (*Admin, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no server address", ErrUnavailable)
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	a := &Admin{addrs: addrs}
	for _, addr := range addrs {
		cc, err := grpcDial(addr, &o)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("server address %q: %w", addr, err)
		}
		a.conns = append(a.conns, cc)
	}
	return a, nil
}

// Close releases the admin's connections.
func (a *Admin) Close() error {
	for _, cc := range a.conns {
		cc.Close()
	}
	return nil
}

// call runs fn against each node until one answers; only a node that cannot
// be reached makes it try the next.
func (a *Admin) call(ctx context.Context, fn func(clientpb.ClientServiceClient) error) error {
	var errs []string
	for i, cc := range a.conns {
		err := fn(clientpb.NewClientServiceClient(cc))
		if err == nil {
			return nil
		}
		if transport.ServerAnswered(err) || ctx.Err() != nil {
			return transport.FromStatus(err)
		}
		errs = append(errs, fmt.Sprintf("%s: %v", a.addrs[i], transport.FromStatus(err)))
	}
	return fmt.Errorf("%w: no server answered (%s)", ErrUnavailable, strings.Join(errs, "; "))
}

// QueueOptions are the settings of a new queue; zero values take the
// server's defaults.
type QueueOptions struct {
	// Members is the number of members (default: one per live node).
	Members int
	// Replicas is the replication factor (default: 3, or fewer nodes).
	Replicas int
	// TTL is the default time to live of its messages (0: forever).
	TTL time.Duration
	// MaxBytes bounds what the messages the queue holds cost in memory,
	// ids, headers and properties included, and MaxMessages how many it
	// holds (0: unlimited). Each member takes an even share.
	MaxBytes    int64
	MaxMessages int64
	// MaxDeliveries: a message delivered this many times and given back
	// again (recover, session end) moves to the dead-letter queue with its
	// properties and delivery count (0: unlimited).
	MaxDeliveries int
	// DeadLetterQueue is where dead messages go (default NAME.DLQ, created
	// on first use).
	DeadLetterQueue string
	// RedeliveryDelay is how long a message given back waits before it is
	// delivered again (0: at once); each later delivery waits
	// RedeliveryBackoff times longer (0 or 1: the same), at most
	// RedeliveryMaxDelay (0: 1 hour).
	RedeliveryDelay    time.Duration
	RedeliveryBackoff  int
	RedeliveryMaxDelay time.Duration
	// ForwardDelay is how long a member's pending messages wait with no
	// consumer on it before they move to a member that has consumers
	// (0: the default, 5 s; negative: never).
	ForwardDelay time.Duration
	// DedupWindow and DedupMaxIDs bound each member's duplicate-detection
	// window: how long and how many dedup ids it remembers (0: 2 minutes,
	// 100 000 ids).
	DedupWindow time.Duration
	DedupMaxIDs int
}

// QueueInfo describes a queue and what it holds; its JSON form is the one
// `cairn queue show --json` prints.
type QueueInfo struct {
	Name string `json:"name"`
	// Pending messages wait for a consumer; Delivered ones wait for an ack.
	Pending   uint64       `json:"pending"`
	Delivered uint64       `json:"delivered"`
	Members   []MemberInfo `json:"members"`
	Replicas  int          `json:"replicas"`
	TTLMillis int64        `json:"ttl_ms"`
	MaxBytes  int64        `json:"max_bytes"`
	// MaxMessages: 0 is unlimited.
	MaxMessages uint64 `json:"max_messages"`
	// Delayed messages wait out a redelivery delay; DeadLettered ones were
	// moved to the dead-letter queue.
	Delayed      uint64 `json:"delayed"`
	DeadLettered uint64 `json:"dead_lettered"`
	// Prepared messages are held by prepared transactions, apart from the
	// pending and delivered ones, until their decision.
	Prepared  uint64 `json:"prepared"`
	Consumers int    `json:"consumers"`
	// The poison-message and forwarding settings; ForwardDelayMillis is 0
	// when the queue never forwards.
	MaxDeliveries            int    `json:"max_deliveries"`
	DeadLetterQueue          string `json:"dead_letter_queue"`
	RedeliveryDelayMillis    int64  `json:"redelivery_delay_ms"`
	RedeliveryBackoff        int    `json:"redelivery_backoff"`
	RedeliveryMaxDelayMillis int64  `json:"redelivery_max_delay_ms"`
	ForwardDelayMillis       int64  `json:"forward_delay_ms"`
	DedupWindowMillis        int64  `json:"dedup_window_ms"`
	DedupMaxIDs              int    `json:"dedup_max_ids"`
	// Counters: its members' together.
	Counters Counters `json:"counters"`
}

// Counters count what a member did since it was made (kept by its state
// machine, so they go on across its hosts): messages stored (sent,
// published, or moved in from another member), delivered, delivered
// again marked redelivered, acknowledged, expired, and moved out to
// another member but to the dead-letter queue (QueueInfo.DeadLettered).
type Counters struct {
	Sent         uint64 `json:"sent"`
	Delivered    uint64 `json:"delivered"`
	Redelivered  uint64 `json:"redelivered"`
	Acknowledged uint64 `json:"acknowledged"`
	Expired      uint64 `json:"expired"`
	Moved        uint64 `json:"moved"`
}

func countersOf(c *clientpb.MessageCounters) Counters {
	return Counters{Sent: c.GetSent(), Delivered: c.GetDelivered(), Redelivered: c.GetRedelivered(),
		Acknowledged: c.GetAcknowledged(), Expired: c.GetExpired(), Moved: c.GetMoved()}
}

// MemberInfo describes one member of a queue.
type MemberInfo struct {
	Name string `json:"name"`
	Host string `json:"host"`
	// HostAddr is the host's client address, empty while no host is known:
	// Options.PreferHostOf connects there.
	HostAddr  string   `json:"host_addr"`
	Pending   uint64   `json:"pending"`
	Delivered uint64   `json:"delivered"`
	Consumers int      `json:"consumers"`
	Bytes     int64    `json:"bytes"`
	Replicas  []string `json:"replicas"`
	// Delayed: waiting out a redelivery delay. Moving: on the way to another
	// member or the dead-letter queue. DeadLettered: moved to the
	// dead-letter queue.
	Delayed      uint64 `json:"delayed"`
	Moving       uint64 `json:"moving"`
	DeadLettered uint64 `json:"dead_lettered"`
	// Draining: being removed by an update; it takes no new sends or
	// consumers and moves its messages to the other members.
	Draining bool `json:"draining"`
	// Renewing: draining (Draining is set too) to be placed anew, empty,
	// with the queue's replication factor, under the same name.
	Renewing bool `json:"renewing"`
	// Prepared: held by prepared transactions until their decision (sends
	// to enqueue, deliveries to acknowledge).
	Prepared uint64   `json:"prepared"`
	Counters Counters `json:"counters"`
}

func queueInfo(d *clientpb.DestinationInfo) QueueInfo {
	q := QueueInfo{Name: d.Name, Pending: d.Pending, Delivered: d.Delivered, Replicas: int(d.Replicas), TTLMillis: d.TtlMs, MaxBytes: d.MaxBytes, MaxMessages: d.MaxMessages, Members: []MemberInfo{},
		Delayed: d.Delayed, DeadLettered: d.DeadLettered, Prepared: d.Prepared, Consumers: int(d.Consumers),
		MaxDeliveries: int(d.MaxDeliveries), DeadLetterQueue: d.DeadLetterQueue, RedeliveryDelayMillis: d.RedeliveryDelayMs,
		RedeliveryBackoff: int(d.RedeliveryBackoff), RedeliveryMaxDelayMillis: d.RedeliveryMaxDelayMs, ForwardDelayMillis: d.ForwardDelayMs,
		DedupWindowMillis: d.DedupWindowMs, DedupMaxIDs: int(d.DedupMaxIds), Counters: countersOf(d.Counters)}
	for _, m := range d.Members {
		q.Members = append(q.Members, MemberInfo{Name: m.Name, Host: m.Host, HostAddr: m.HostAddr, Pending: m.Pending, Delivered: m.Delivered, Consumers: int(m.Consumers), Bytes: m.Bytes, Replicas: m.Replicas,
			Delayed: m.Delayed, Moving: m.Moving, DeadLettered: m.DeadLettered, Draining: m.Draining, Renewing: m.Renewing, Prepared: m.Prepared,
			Counters: countersOf(m.Counters)})
	}
	return q
}

// CreateQueue creates a queue.
func (a *Admin) CreateQueue(ctx context.Context, name string, o QueueOptions) (QueueInfo, error) {
	if o.Members < 0 || o.Replicas < 0 || o.TTL < 0 || o.MaxBytes < 0 || o.MaxMessages < 0 || o.MaxDeliveries < 0 || o.RedeliveryDelay < 0 || o.RedeliveryBackoff < 0 || o.RedeliveryMaxDelay < 0 || o.DedupWindow < 0 || o.DedupMaxIDs < 0 {
		return QueueInfo{}, fmt.Errorf("%w: members, replicas, ttl, max size and messages, max deliveries, redelivery delays, backoff and the dedup window must not be negative", ErrInvalidArgument)
	}
	forward := o.ForwardDelay.Milliseconds()
	if o.ForwardDelay < 0 {
		forward = -1
	} else if o.ForwardDelay > 0 && forward == 0 {
		forward = 1
	}
	var info QueueInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		d, err := api.CreateDestination(ctx, &clientpb.CreateDestinationRequest{
			Name: name, Kind: clientpb.DestinationKind_DESTINATION_KIND_QUEUE, Members: uint32(o.Members),
			Replicas: uint32(o.Replicas), TtlMs: o.TTL.Milliseconds(), MaxBytes: o.MaxBytes, MaxMessages: uint64(o.MaxMessages),
			MaxDeliveries: uint32(o.MaxDeliveries), DeadLetterQueue: o.DeadLetterQueue, RedeliveryDelayMs: o.RedeliveryDelay.Milliseconds(),
			RedeliveryBackoff: uint32(o.RedeliveryBackoff), RedeliveryMaxDelayMs: o.RedeliveryMaxDelay.Milliseconds(), ForwardDelayMs: forward,
			DedupWindowMs: o.DedupWindow.Milliseconds(), DedupMaxIds: uint32(o.DedupMaxIDs),
		})
		if err == nil {
			info = queueInfo(d)
		}
		return err
	})
	return info, err
}

// ShowQueue reports a queue's counts, in total and per member.
func (a *Admin) ShowQueue(ctx context.Context, name string) (QueueInfo, error) {
	var info QueueInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		d, err := api.ShowDestination(ctx, &clientpb.ShowDestinationRequest{Name: name})
		if err != nil {
			return err
		}
		if d.Kind == clientpb.DestinationKind_DESTINATION_KIND_TOPIC {
			return fmt.Errorf("%w: %s is a topic (cairn topic show)", ErrDestinationKind, name)
		}
		info = queueInfo(d)
		return nil
	})
	return info, err
}

// UpdateQueue changes a queue's number of members. New members take sends
// at once; removed ones (the highest) first drain their messages to the
// others, and show as draining until they are empty and gone.
func (a *Admin) UpdateQueue(ctx context.Context, name string, members int) (QueueInfo, error) {
	if members < 1 {
		return QueueInfo{}, fmt.Errorf("%w: a queue has at least one member", ErrInvalidArgument)
	}
	return a.UpdateQueueWith(ctx, name, QueueUpdate{Members: members})
}

// QueueUpdate is what UpdateQueueWith changes; a zero field leaves it as
// it is.
type QueueUpdate struct {
	Members int
	// Replicas is the replication factor. The queue's members are renewed
	// to it one at a time: each drains its messages into the others and is
	// placed anew, empty, under the same name (queue show lists it as
	// renewing meanwhile). A consumer pinned to it carries on there.
	Replicas int
}

// UpdateQueueWith changes a queue's number of members or replication
// factor, or both.
func (a *Admin) UpdateQueueWith(ctx context.Context, name string, u QueueUpdate) (QueueInfo, error) {
	if u.Members < 0 || u.Replicas < 0 {
		return QueueInfo{}, fmt.Errorf("%w: members and replicas must not be negative", ErrInvalidArgument)
	}
	var info QueueInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		d, err := api.UpdateDestination(ctx, &clientpb.UpdateDestinationRequest{Name: name, Members: uint32(u.Members), Replicas: uint32(u.Replicas)})
		if err == nil {
			info = queueInfo(d)
		}
		return err
	})
	return info, err
}

// ListQueues lists every queue with its counts.
func (a *Admin) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	var out []QueueInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.ListDestinations(ctx, &clientpb.ListDestinationsRequest{})
		if err != nil {
			return err
		}
		out = make([]QueueInfo, 0, len(resp.Destinations))
		for _, d := range resp.Destinations {
			if d.Kind != clientpb.DestinationKind_DESTINATION_KIND_TOPIC {
				out = append(out, queueInfo(d))
			}
		}
		return nil
	})
	return out, err
}

// PurgeQueue removes every pending message of a queue (or of one member,
// NAME#I); delivered messages stay with their sessions. It returns how many
// were removed.
func (a *Admin) PurgeQueue(ctx context.Context, name string) (uint64, error) {
	var n uint64
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.PurgeDestination(ctx, &clientpb.PurgeDestinationRequest{Name: name})
		if err == nil {
			n = resp.Purged
		}
		return err
	})
	return n, err
}

// BrowseOptions choose what BrowseQueue shows.
type BrowseOptions struct {
	// Selector, a JMS message selector, shows only the messages it selects.
	Selector string
	// Count is the most messages shown (0: 100; at most 10,000).
	Count int
}

// BrowseQueue shows a queue's pending messages (or one member's, NAME#I)
// without consuming them or changing any count, as a JMS QueueBrowser:
// member after member, in delivery order within each. The messages cannot
// be acknowledged; one delivered or expiring meanwhile may still show.
func (a *Admin) BrowseQueue(ctx context.Context, name string, o BrowseOptions) ([]*Message, error) {
	if o.Count < 0 {
		return nil, fmt.Errorf("%w: browse count %d is negative", ErrInvalidArgument, o.Count)
	}
	var out []*Message
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.BrowseDestination(ctx, &clientpb.BrowseDestinationRequest{Name: name, Selector: o.Selector, Count: uint32(o.Count)})
		if err != nil {
			return err
		}
		out = make([]*Message, len(resp.Messages))
		for i, d := range resp.Messages {
			out[i] = fromDelivery(d, nil, 0)
		}
		return nil
	})
	return out, err
}

// DeleteQueue deletes a queue and every message in it.
func (a *Admin) DeleteQueue(ctx context.Context, name string) error {
	return a.call(ctx, func(api clientpb.ClientServiceClient) error {
		_, err := api.DeleteDestination(ctx, &clientpb.DeleteDestinationRequest{Name: name})
		return err
	})
}

// ClusterStatus is the cluster as one node sees it; its JSON form is the one
// `cairn cluster status --json` prints.
type ClusterStatus struct {
	AnsweredBy string        `json:"answered_by"`
	Nodes      []NodeStatus  `json:"nodes"`
	Groups     []GroupStatus `json:"groups"`
	// UnderReplicated counts the members with fewer replicas on live nodes
	// than their destination wants; the cluster repairs them as soon as a
	// live node holds none of theirs.
	UnderReplicated int `json:"under_replicated"`
	// Moving counts the members with a replica catching up (it votes once
	// it holds the group's log), or hosted elsewhere than on their
	// preferred host while it is alive (the leadership moves to it).
	Moving int `json:"moving"`
}

// NodeStatus is one node: where it is, whether gossip holds it alive
// (alive, suspect, dead, left), and its role in the meta group.
type NodeStatus struct {
	ID         string `json:"id"`
	ClientAddr string `json:"client_addr"`
	PeerAddr   string `json:"peer_addr"`
	RaftAddr   string `json:"raft_addr"`
	GossipAddr string `json:"gossip_addr"`
	HTTPAddr   string `json:"http_addr"`
	State      string `json:"state"`
	Alive      bool   `json:"alive"`
	MetaRole   string `json:"meta_role"`
	// Decommissioning is true while the node's replicas move to other
	// nodes before it leaves the cluster for good.
	Decommissioning bool `json:"decommissioning"`
}

// GroupStatus is one Raft group (the meta group or a member) as the
// answering node's replica sees it.
type GroupStatus struct {
	Name         string          `json:"name"`
	Leader       string          `json:"leader"`
	CommitIndex  uint64          `json:"commit_index"`
	AppliedIndex uint64          `json:"applied_index"`
	Replicas     []ReplicaStatus `json:"replicas"`
	// Wanted is how many replicas the member's destination wants (0 for
	// the meta group).
	Wanted int `json:"wanted"`
}

// ReplicaStatus is one replica of a group: the last log index it holds and
// how many committed entries it has yet to apply. Reachable is false when
// its node did not answer; the figures are then unknown.
type ReplicaStatus struct {
	Node       string `json:"node"`
	Role       string `json:"role"`
	MatchIndex uint64 `json:"match_index"`
	Lag        uint64 `json:"lag"`
	Reachable  bool   `json:"reachable"`
	// CatchingUp is true while the replica does not vote yet: new, or
	// back from an empty data directory.
	CatchingUp bool `json:"catching_up"`
}

// ClusterStatus asks a node for the cluster's status.
func (a *Admin) ClusterStatus(ctx context.Context) (ClusterStatus, error) {
	var st ClusterStatus
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.ClusterStatus(ctx, &clientpb.ClusterStatusRequest{})
		if err != nil {
			return err
		}
		st = ClusterStatus{AnsweredBy: resp.AnsweredBy, Nodes: []NodeStatus{}, Groups: []GroupStatus{}, UnderReplicated: int(resp.UnderReplicated), Moving: int(resp.Moving)}
		for _, n := range resp.Nodes {
			st.Nodes = append(st.Nodes, NodeStatus{ID: n.Id, ClientAddr: n.ClientAddr, PeerAddr: n.PeerAddr, RaftAddr: n.RaftAddr,
				GossipAddr: n.GossipAddr, HTTPAddr: n.HttpAddr, State: n.State, Alive: n.Alive, MetaRole: n.MetaRole, Decommissioning: n.Decommissioning})
		}
		for _, g := range resp.Groups {
			gs := GroupStatus{Name: g.Name, Leader: g.Leader, CommitIndex: g.CommitIndex, AppliedIndex: g.AppliedIndex, Replicas: []ReplicaStatus{}, Wanted: int(g.Wanted)}
			for _, r := range g.Replicas {
				gs.Replicas = append(gs.Replicas, ReplicaStatus{Node: r.Node, Role: r.Role, MatchIndex: r.MatchIndex, Lag: r.Lag, Reachable: r.Reachable, CatchingUp: r.CatchingUp})
			}
			st.Groups = append(st.Groups, gs)
		}
		return nil
	})
	return st, err
}

// RemoveNode takes a dead node out of the cluster for good: the cluster
// places its replicas on live nodes and drops it from every Raft group.
// A node that is alive is refused: stop it (or LeaveNode) first.
func (a *Admin) RemoveNode(ctx context.Context, id string) error {
	return a.call(ctx, func(api clientpb.ClientServiceClient) error {
		_, err := api.RemoveNode(ctx, &clientpb.RemoveNodeRequest{Id: id})
		return err
	})
}

// LeaveNode asks the first node of the admin's addresses that answers to
// hand its leaderships to other nodes and stop; it returns that node's id.
func (a *Admin) LeaveNode(ctx context.Context) (string, error) {
	var node string
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.LeaveNode(ctx, &clientpb.LeaveNodeRequest{})
		if err == nil {
			node = resp.Node
		}
		return err
	})
	return node, err
}

// DecommissionNode asks the node at the admin's first address (only that
// one: a node that does not answer is not replaced by another) to leave
// the cluster for good (a scale-down): it moves every
// replica it holds to other live nodes, each new one voting before the old
// one leaves its group, then is removed from the cluster and stops. It
// returns that node's id and how many member replicas moved. It waits for
// the moves until ctx ends; they go on after that, and calling it again
// waits for the rest. Refused when some member would have no node to move
// to.
func (a *Admin) DecommissionNode(ctx context.Context) (node string, moved int, err error) {
	resp, err := clientpb.NewClientServiceClient(a.conns[0]).LeaveNode(ctx, &clientpb.LeaveNodeRequest{Decommission: true})
	if err != nil {
		return "", 0, transport.FromStatus(err)
	}
	return resp.Node, int(resp.Moved), nil
}

// Rebalance is what `cairn cluster rebalance` shows or did; its JSON form is
// the one `--json` prints.
type Rebalance struct {
	Moves []PlacementMove `json:"moves"`
	// Applied is true when the moves were made, not only planned.
	Applied bool `json:"applied"`
	// Degraded is true while a registered node is down or a member is
	// short of replicas: no preferred host is moved then.
	Degraded bool `json:"degraded"`
}

// PlacementMove is one move: Action is add-replica, move-replica or
// drop-replica (of Member's replica From, onto To), prefer-host (To
// becomes Member's preferred host, and its group's), or renew-member
// (Member drains into the others and is placed anew to prefer To, hosted
// by From until then).
type PlacementMove struct {
	Member string `json:"member"`
	Action string `json:"action"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
}

// Rebalance plans the moves that repair members short of replicas and
// spread the preferred hosts over the live nodes, and unless dryRun makes
// them.
func (a *Admin) Rebalance(ctx context.Context, dryRun bool) (Rebalance, error) {
	out := Rebalance{Moves: []PlacementMove{}}
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.Rebalance(ctx, &clientpb.RebalanceRequest{DryRun: dryRun})
		if err != nil {
			return err
		}
		out.Applied, out.Degraded = resp.Applied, resp.Degraded
		for _, m := range resp.Moves {
			out.Moves = append(out.Moves, PlacementMove{Member: m.Member, Action: m.Action, From: m.From, To: m.To})
		}
		return nil
	})
	return out, err
}

// ConnectionInfo is one client connection, as `cairn connection list` shows it.
type ConnectionInfo struct {
	ID          string    `json:"id"`
	Node        string    `json:"node"`
	ClientID    string    `json:"client_id"`
	RemoteAddr  string    `json:"remote_addr"`
	Sessions    int       `json:"sessions"`
	Consumers   int       `json:"consumers"`
	ConnectedAt time.Time `json:"connected_at"`
}

// Connections lists the client connections of every live node, and the
// nodes that did not answer.
func (a *Admin) Connections(ctx context.Context) ([]ConnectionInfo, []string, error) {
	out := []ConnectionInfo{}
	var unreachable []string
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.ListConnections(ctx, &clientpb.ListConnectionsRequest{})
		if err != nil {
			return err
		}
		for _, c := range resp.Connections {
			out = append(out, ConnectionInfo{ID: c.Id, Node: c.Node, ClientID: c.ClientId, RemoteAddr: c.RemoteAddr,
				Sessions: int(c.Sessions), Consumers: int(c.Consumers), ConnectedAt: time.UnixMilli(c.ConnectedUnixMs).UTC()})
		}
		unreachable = resp.Unreachable
		return nil
	})
	return out, unreachable, err
}

// DestroyConnection ends a client connection for good, whichever node
// serves it: the client is told so and does not reconnect, and the
// messages its sessions held unacknowledged return to pending, marked
// redelivered.
func (a *Admin) DestroyConnection(ctx context.Context, id string) error {
	return a.call(ctx, func(api clientpb.ClientServiceClient) error {
		_, err := api.DestroyConnection(ctx, &clientpb.DestroyConnectionRequest{Id: id})
		return err
	})
}
