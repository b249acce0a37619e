package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/cluster/placement"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// createDestination places a new destination's members on the registered,
// live nodes and commits it in the meta group.
func (n *Node) createDestination(ctx context.Context, req *clientpb.CreateDestinationRequest) (*fsmpb.Destination, error) {
	return n.createDestinationOf(ctx, req, "")
}

// createDestinationOf is createDestination for a temporary queue when
// temporary names its connection (fsmpb.Destination.temporary).
func (n *Node) createDestinationOf(ctx context.Context, req *clientpb.CreateDestinationRequest, temporary string) (*fsmpb.Destination, error) {
	kind, poison, err := checkCreate(req, temporary)
	if err != nil {
		return nil, err
	}
	nodes := n.placementNodes(ctx)
	if req.Replicas == 0 {
		// The default replication factor is taken from the live nodes:
		// give one that is restarting a moment, or the destination keeps
		// fewer replicas for good.
		nodes = n.waitRestarting(ctx, nodes)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no registered node is alive to place members on", transport.ErrUnavailable)
	}
	members := int(req.Members)
	if members == 0 {
		members = len(nodes)
	}
	if members > fsm.MaxMembers {
		return nil, fmt.Errorf("%w: %d members; a destination has at most %d", transport.ErrInvalidArgument, members, fsm.MaxMembers)
	}
	replicas := int(req.Replicas)
	if replicas == 0 {
		replicas = min(DefaultReplicas, len(nodes))
	}
	if replicas > len(nodes) {
		return nil, fmt.Errorf("%w: a replication factor of %d needs %d live nodes; the cluster has %d", transport.ErrInvalidArgument, replicas, replicas, len(nodes))
	}
	var offset int
	n.meta.Read(func(m *fsm.Meta) { offset = len(m.Destinations()) })
	d := &fsmpb.Destination{
		Name: req.Name, Kind: kind, Replicas: uint32(replicas),
		TtlNs: req.TtlMs * int64(time.Millisecond), MaxBytes: req.MaxBytes, MaxMessages: req.MaxMessages, CreatedAt: n.cfg.Clock().UnixNano(), Uid: newID(8),
	}
	poison(d)
	d.Temporary = temporary
	// Preferred hosts go round the nodes, starting at a different node for
	// each destination, so hosts spread over the cluster. A shared group's
	// replicas may change between the placement and the create (spreading
	// moved its preferred host), which the meta group refuses: the
	// members are placed again on the groups as they now stand.
	for attempt := 1; ; attempt++ {
		d.Members = nil
		for i := range members {
			p := n.placeMember(uint32(i), nodes, offset+i, replicas, false)
			if kind == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC && p.Group == "" {
				// Its subscriptions' members live in its members' groups.
				n.meta.Read(func(m *fsm.Meta) { placement.JoinSharedGroup(m, p, false, newID(4)) })
			}
			d.Members = append(d.Members, p)
		}
		_, err := n.meta.Apply(ctx, &fsmpb.CreateDestination{Destination: d})
		if err == nil {
			break
		}
		if attempt == 3 || !errors.Is(err, fsm.ErrInvalidSettings) {
			return nil, frontend.WireError(err)
		}
	}
	n.groups.poke()
	n.log.Info("destination created", "name", d.Name, "members", members, "replicas", replicas)
	// Wait for every member to have a host, so the first send need not.
	for _, p := range d.Members {
		name := fsm.MemberName(d.Name, p.Index)
		if err := n.waitHost(ctx, name); err != nil {
			n.log.Warn("new member has no host yet", "member", name, "err", err)
		}
	}
	return d, nil
}

// checkCreate refuses a create request that breaks a rule, and returns
// the kind it makes and what sets its poison-message settings.
func checkCreate(req *clientpb.CreateDestinationRequest, temporary string) (fsmpb.DestinationKind, func(*fsmpb.Destination), error) {
	if strings.HasPrefix(req.Name, temporaryPrefix) && temporary == "" {
		// Not even on first use: a consumer of a temporary queue that
		// went would make an ordinary one in its place.
		return 0, nil, fmt.Errorf("%w: %q: names starting with %q are kept for temporary queues (Session.CreateTemporaryQueue)", transport.ErrInvalidName, req.Name, temporaryPrefix)
	}
	if err := fsm.ValidateName(req.Name); err != nil {
		return 0, nil, frontend.WireError(err)
	}
	kind, err := createdKind(req)
	switch {
	case err != nil:
		return 0, nil, err
	case req.TtlMs < 0 || req.MaxBytes < 0:
		return 0, nil, fmt.Errorf("%w: --ttl and --max-size must not be negative", transport.ErrInvalidArgument)
	case req.TtlMs > maxTTLMillis:
		return 0, nil, fmt.Errorf("%w: --ttl is over 100 years", transport.ErrInvalidArgument)
	}
	poison, err := poisonSettings(req)
	return kind, poison, err
}

// createdKind is the kind of destination req makes: a queue or a topic;
// subscriptions are made by subscribing.
func createdKind(req *clientpb.CreateDestinationRequest) (fsmpb.DestinationKind, error) {
	if fsm.TopicOf(req.Name) != "" {
		return 0, fmt.Errorf("%w: %q: names with %q are a topic's subscriptions'", transport.ErrInvalidName, req.Name, fsm.SubscriptionSep)
	}
	switch req.Kind {
	case clientpb.DestinationKind_DESTINATION_KIND_QUEUE, clientpb.DestinationKind_DESTINATION_KIND_UNKNOWN:
		return fsmpb.DestinationKind_DESTINATION_KIND_QUEUE, nil
	case clientpb.DestinationKind_DESTINATION_KIND_TOPIC:
		return fsmpb.DestinationKind_DESTINATION_KIND_TOPIC, nil
	}
	return 0, fmt.Errorf("%w: create queues and topics; a subscription is made by subscribing", transport.ErrInvalidArgument)
}

// forwardDelay is how long d's stranded messages wait before they move; 0
// never. A destination records 0 for the default, negative for never.
func forwardDelay(d *fsmpb.Destination) time.Duration {
	switch {
	case d.ForwardDelayNs < 0:
		return 0
	case d.ForwardDelayNs == 0:
		return DefaultForwardDelay
	}
	return time.Duration(d.ForwardDelayNs)
}

// placeMember places member index on replicas nodes, the preferred host
// first: nodes[first] and the ones after it, round the list; in the
// shared group named after those replicas in that order (placement.SharedGroupID),
// unless the node gives each member a group of its own. Repair, spreading
// and preferred hosts change a group's replicas after its birth: a group
// of that name still on those nodes is joined as it now stands (with
// sameHost, only if it still prefers nodes[first]: a member renewed onto a
// node must be hosted there); otherwise a group on exactly those replicas
// is joined instead, or a new one named with a suffix.
func (n *Node) placeMember(index uint32, nodes []string, first, replicas int, sameHost bool) *fsmpb.MemberPlacement {
	p := &fsmpb.MemberPlacement{Index: index}
	for j := range replicas {
		p.Replicas = append(p.Replicas, nodes[(first+j)%len(nodes)])
	}
	p.Initial = slices.Clone(p.Replicas)
	if !n.cfg.GroupPerMember {
		n.meta.Read(func(m *fsm.Meta) { placement.JoinSharedGroup(m, p, sameHost, newID(4)) })
	}
	return p
}

// updateDestination changes a destination's replication factor, then its
// number of members. A new factor is carried out by the meta leader, which
// renews the members one at a time (renewMembers). Growing first takes
// back members still draining from an earlier shrink, then adds new ones,
// each preferring the live node that is preferred host of the fewest
// active members; the router sends to them at once. Shrinking drains the
// highest members: they take no new sends or consumers, move their
// messages to the others, and are removed once empty.
func (n *Node) updateDestination(ctx context.Context, req *clientpb.UpdateDestinationRequest) (*fsmpb.Destination, error) {
	d, ok := n.meta.Destination(req.Name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", transport.ErrUnknownDestination, req.Name)
	}
	want, replicas := int(req.Members), int(d.Replicas)
	if want > fsm.MaxMembers {
		return nil, fmt.Errorf("%w: %d members; a destination has at most %d", transport.ErrInvalidArgument, want, fsm.MaxMembers)
	}
	var nodes []string
	if want > len(d.Members) || req.Replicas > 0 && req.Replicas != d.Replicas {
		nodes = n.placementNodes(ctx)
	}
	if req.Replicas > 0 && req.Replicas != d.Replicas {
		replicas = int(req.Replicas)
		if replicas > len(nodes) {
			return nil, fmt.Errorf("%w: a replication factor of %d needs %d live nodes; the cluster has %d", transport.ErrInvalidArgument, replicas, replicas, len(nodes))
		}
		if _, err := n.meta.Apply(ctx, &fsmpb.SetReplicas{Name: d.Name, Replicas: req.Replicas}); err != nil {
			return nil, frontend.WireError(err)
		}
		n.log.Info("destination's replication factor changed; its members are renewed to it", "name", d.Name, "replicas", replicas)
	}
	if want > 0 {
		if err := n.resizeDestination(ctx, d, want, replicas, nodes); err != nil {
			return nil, err
		}
	}
	// The commands were applied by the meta leader; answer with this
	// node's view once it has applied them too.
	for deadline := time.Now().Add(2 * time.Second); ; {
		nd, ok := n.meta.Destination(req.Name)
		if !ok {
			return nil, fmt.Errorf("%w: %q was deleted during the update", transport.ErrUnknownDestination, req.Name)
		}
		active := 0
		for _, p := range nd.Members {
			if !p.Draining || p.Renewing {
				active++
			}
		}
		if (want == 0 || active == want) && int(nd.Replicas) == replicas || !time.Now().Before(deadline) || ctx.Err() != nil {
			return nd, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// resizeDestination gives d want active members, new ones placed on
// replicas of nodes.
func (n *Node) resizeDestination(ctx context.Context, d *fsmpb.Destination, want, replicas int, nodes []string) error {
	cmd := &fsmpb.ResizeDestination{Name: d.Name, Active: uint32(want)}
	if add := want - len(d.Members); add > 0 {
		if len(nodes) < replicas {
			return fmt.Errorf("%w: new members need %d live nodes for their replicas; %d are alive", transport.ErrUnavailable, replicas, len(nodes))
		}
		grown := proto.Clone(d).(*fsmpb.Destination)
		for i := range add {
			p := n.placeMember(uint32(len(d.Members)+i), nodes, placement.LeastHosting(grown, nodes), replicas, false)
			p.Uid = newID(8)
			cmd.Add = append(cmd.Add, p)
			grown.Members = append(grown.Members, p)
		}
	}
	if _, err := n.meta.Apply(ctx, cmd); err != nil {
		if len(cmd.Add) > 0 && errors.Is(err, fsm.ErrInvalidSettings) {
			err = fmt.Errorf("%w (%s changed while this update was placed; run it again)", err, d.Name)
		}
		return frontend.WireError(err)
	}
	n.groups.poke()
	n.log.Info("destination resized", "name", d.Name, "members", want, "added", len(cmd.Add))
	for _, p := range cmd.Add {
		name := fsm.MemberName(d.Name, p.Index)
		if err := n.waitHost(ctx, name); err != nil {
			n.log.Warn("new member has no host yet", "member", name, "err", err)
		}
	}
	return nil
}

// Defaults and bounds of the poison-message, forwarding and dedup settings.
const (
	DefaultForwardDelay       = 5 * time.Second
	defaultRedeliveryMaxDelay = time.Hour
	maxRedeliveryBackoff      = 100
	maxDelayMillis            = 7 * 24 * 3600 * 1000
	// maxDedupIDs bounds a member's dedup window: each id costs about 100
	// bytes on every replica and in every snapshot. The minimums keep the
	// window well over destination.RouteWindow and a move's retries.
	maxDedupIDs    = 10_000_000
	minDedupIDs    = 1000
	minDedupWindow = 30 * time.Second
)

// poisonSettings checks a creation's poison-message, forwarding and dedup
// settings and returns what sets them on the destination.
func poisonSettings(req *clientpb.CreateDestinationRequest) (func(*fsmpb.Destination), error) {
	switch {
	case req.RedeliveryDelayMs < 0 || req.RedeliveryMaxDelayMs < 0:
		return nil, fmt.Errorf("%w: --redelivery-delay and --redelivery-max-delay must not be negative", transport.ErrInvalidArgument)
	case req.RedeliveryDelayMs > maxDelayMillis || req.RedeliveryMaxDelayMs > maxDelayMillis || req.ForwardDelayMs > maxDelayMillis:
		return nil, fmt.Errorf("%w: redelivery and forward delays are at most 7 days", transport.ErrInvalidArgument)
	case req.RedeliveryBackoff > maxRedeliveryBackoff:
		return nil, fmt.Errorf("%w: --redelivery-backoff %d is over %d", transport.ErrInvalidArgument, req.RedeliveryBackoff, maxRedeliveryBackoff)
	case req.DedupWindowMs != 0 && (req.DedupWindowMs < minDedupWindow.Milliseconds() || req.DedupWindowMs > maxDelayMillis):
		return nil, fmt.Errorf("%w: --dedup-window must be between %v and 7 days: idempotent resends and moves between members rely on it", transport.ErrInvalidArgument, minDedupWindow)
	case req.DedupMaxIds != 0 && (req.DedupMaxIds < minDedupIDs || req.DedupMaxIds > maxDedupIDs):
		return nil, fmt.Errorf("%w: --dedup-max-ids must be between %d and %d", transport.ErrInvalidArgument, minDedupIDs, maxDedupIDs)
	}
	// The dead-letter queue's name matters only when messages can die.
	if req.DeadLetterQueue != "" || req.MaxDeliveries > 0 {
		dlq := deadLetterQueue(&fsmpb.Destination{Name: req.Name, DeadLetterQueue: req.DeadLetterQueue})
		if err := fsm.ValidateName(dlq); err != nil {
			return nil, fmt.Errorf("%w: dead-letter queue %q: %v (give a shorter one with --dlq)", transport.ErrInvalidName, dlq, err)
		}
		if dlq == req.Name {
			return nil, fmt.Errorf("%w: --dlq %s is the queue itself", transport.ErrInvalidArgument, dlq)
		}
	}
	return func(d *fsmpb.Destination) {
		d.MaxDeliveries, d.DeadLetterQueue = req.MaxDeliveries, req.DeadLetterQueue
		d.RedeliveryDelayNs = req.RedeliveryDelayMs * int64(time.Millisecond)
		d.RedeliveryBackoff = max(req.RedeliveryBackoff, 1)
		d.RedeliveryMaxDelayNs = req.RedeliveryMaxDelayMs * int64(time.Millisecond)
		if d.RedeliveryMaxDelayNs == 0 {
			d.RedeliveryMaxDelayNs = int64(defaultRedeliveryMaxDelay)
		}
		d.DedupWindowNs, d.DedupMaxIds = req.DedupWindowMs*int64(time.Millisecond), req.DedupMaxIds
		d.ForwardDelayNs = req.ForwardDelayMs * int64(time.Millisecond)
		if req.ForwardDelayMs < 0 {
			d.ForwardDelayNs = -1
		}
	}, nil
}

// registrationWait bounds how long a placement waits for nodes that gossip
// knows alive to be registered: the meta leader registers a node as soon as
// it hears of it, so this is only ever a moment after a node joins.
const registrationWait = 5 * time.Second

// placementNodes lists the registered nodes that gossip holds alive (and not
// leaving), first waiting, briefly, for every such node to be registered, so
// that a queue created just after a node joined is spread over it too.
// restartWait bounds how long a destination created with the default
// replication factor waits for a registered node that is not alive (one
// restarting, or not yet seen alive again by this node's gossip) before it
// places its members on the live nodes alone; a var for tests.
var restartWait = 3 * time.Second

// waitRestarting is nodes, or the placement nodes once as many are alive as
// are registered (up to DefaultReplicas), within restartWait.
func (n *Node) waitRestarting(ctx context.Context, nodes []string) []string {
	deadline := time.Now().Add(restartWait)
	for {
		var registered int
		n.meta.Read(func(m *fsm.Meta) {
			for _, nd := range m.Nodes() {
				if !m.Decommissioning(nd.Id) {
					registered++
				}
			}
		})
		if len(nodes) >= min(DefaultReplicas, registered) || !time.Now().Before(deadline) {
			return nodes
		}
		select {
		case <-ctx.Done():
			return nodes
		case <-time.After(50 * time.Millisecond):
		}
		nodes = n.placementNodes(ctx)
	}
}

func (n *Node) placementNodes(ctx context.Context) []string {
	deadline := time.Now().Add(registrationWait)
	for {
		alive := map[string]bool{}
		for _, m := range n.gossip.members() {
			alive[m.ID] = m.State == "alive" && !m.Meta.Leaving && m.Meta.Raft != ""
		}
		var out []string
		unregistered := 0
		n.meta.Read(func(m *fsm.Meta) {
			for id, ok := range alive {
				if _, registered := m.Node(id); ok && !registered && !m.Removed(id) {
					unregistered++
				}
			}
			for _, nd := range m.Nodes() {
				if alive[nd.Id] && !m.Decommissioning(nd.Id) {
					out = append(out, nd.Id)
				}
			}
		})
		if unregistered == 0 || time.Now().After(deadline) {
			return out
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// destinationInfo reports a destination's counts, per member (as its host
// reports them) and in total.
func (n *Node) destinationInfo(ctx context.Context, d *fsmpb.Destination) *clientpb.DestinationInfo {
	info := &clientpb.DestinationInfo{
		Name: d.Name, Kind: clientpb.DestinationKind(d.Kind), Replicas: d.Replicas,
		TtlMs: d.TtlNs / int64(time.Millisecond), MaxBytes: d.MaxBytes, MaxMessages: d.MaxMessages,
		MaxDeliveries: d.MaxDeliveries, DeadLetterQueue: deadLetterQueue(d), RedeliveryDelayMs: d.RedeliveryDelayNs / int64(time.Millisecond),
		RedeliveryBackoff: d.RedeliveryBackoff, RedeliveryMaxDelayMs: d.RedeliveryMaxDelayNs / int64(time.Millisecond),
		ForwardDelayMs: forwardDelay(d).Milliseconds(),
	}
	st := memberSettings(d)
	info.DedupWindowMs, info.DedupMaxIds = st.DedupWindowNs/int64(time.Millisecond), st.DedupMaxIds
	var total fsm.Counters
	for _, p := range d.Members {
		mi := &clientpb.MemberInfo{Name: fsm.MemberName(d.Name, p.Index), Replicas: p.Replicas}
		st := n.memberInfo(ctx, mi.Name)
		mi.Host, mi.Pending, mi.Delivered, mi.Bytes, mi.Consumers = st.host, uint64(st.pending), uint64(st.delivered), st.bytes, uint32(st.consumers)
		mi.HostAddr = n.clientAddrOf(st.host)
		mi.Delayed, mi.Moving, mi.DeadLettered, mi.Draining, mi.Renewing = uint64(st.delayed), uint64(st.moving), uint64(st.deadLettered), p.Draining, p.Renewing
		mi.Prepared = uint64(st.prepared)
		mi.Counters = messageCounters(st.counters)
		total = total.Plus(st.counters)
		info.Pending += mi.Pending
		info.Delivered += mi.Delivered
		info.Delayed += mi.Delayed
		info.DeadLettered += mi.DeadLettered
		info.Prepared += mi.Prepared
		info.Consumers += mi.Consumers
		info.Members = append(info.Members, mi)
	}
	info.Counters = messageCounters(total)
	if s := d.Subscription; s != nil {
		info.Subscription = &clientpb.SubscriptionInfo{Topic: s.Topic, Name: s.Name, ClientId: s.ClientId, Durable: s.Durable, Shared: s.Shared, Selector: s.Selector}
	}
	if d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC {
		for _, sd := range n.destinations() {
			if sd.Subscription.GetTopic() == d.Name {
				info.Subscriptions = append(info.Subscriptions, n.destinationInfo(ctx, sd))
			}
		}
	}
	return info
}

// messageCounters is c as the client API carries it.
func messageCounters(c fsm.Counters) *clientpb.MessageCounters {
	return &clientpb.MessageCounters{Sent: c.Sent, Delivered: c.Delivered, Redelivered: c.Redelivered,
		Acknowledged: c.Acknowledged, Expired: c.Expired, Moved: c.Moved}
}

func (n *Node) purge(ctx context.Context, addr string) (uint64, error) {
	d, idx, err := n.memberOf(ctx, addr, false)
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, p := range d.Members {
		if idx >= 0 && int(p.Index) != idx {
			continue
		}
		res, err := n.submit(ctx, fsm.MemberName(d.Name, p.Index), &fsmpb.Purge{})
		if err != nil {
			return total, frontend.WireError(err)
		}
		total += uint64(res.Removed)
	}
	return total, nil
}

func (n *Node) deleteDestination(ctx context.Context, name string) error {
	if err := fsm.ValidateName(name); err != nil {
		return frontend.WireError(err)
	}
	if _, err := n.meta.Apply(ctx, &fsmpb.DeleteDestination{Name: name}); err != nil {
		return frontend.WireError(err)
	}
	n.groups.poke()
	n.log.Info("destination deleted", "name", name)
	return nil
}
