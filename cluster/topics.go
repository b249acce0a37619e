package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// A topic's subscription is a destination of its own (TOPIC::ID) whose
// member I lives in the shared group of the topic's member I: a publish
// there is stored by it (fsm.Group), and from then on it is a queue's
// member in every way: consumers, acknowledgements, recover, redelivery,
// dead letters, forwarding to the member its consumers use. cluster/DESIGN.md
// says why.

// maxClientID bounds a client id and a subscription's name.
const maxClientID = 256

// subscriptionForwardDelay is how long a subscription's member without a
// consumer keeps what was published to it before it moves it to a member
// with one, unless its topic says otherwise: a subscriber is pinned to one
// member, and waits for what is published to the others no longer than
// this and a move.
const subscriptionForwardDelay = 100 * time.Millisecond

// resolveKind is resolve for an address that must be a destination of
// kind k, created with the defaults (auto-create allowing) when missing.
func (n *Node) resolveKind(ctx context.Context, name string, k fsmpb.DestinationKind) (*fsmpb.Destination, error) {
	if _, ok := n.meta.Destination(name); !ok {
		if !n.cfg.AutoCreate {
			return nil, fmt.Errorf("%w: %q does not exist: create it with 'cairn %s create %s' (nodes create destinations on first use only with --auto-create)", transport.ErrUnknownDestination, name, kindWord(k), name)
		}
		// Made on first use only for a caller that may make it.
		if err := (clientAPI{n}).Authorize(ctx, fsm.ActionManage, name); err != nil {
			return nil, fmt.Errorf("%w (%s does not exist, and a first use makes it only for a user permitted manage on it)", err, name)
		}
	}
	d, err := n.ensureKind(ctx, name, k)
	if err != nil {
		return nil, err
	}
	if d.Kind != k {
		return nil, wrongKind(d, k)
	}
	return d, nil
}

func kindWord(k fsmpb.DestinationKind) string {
	switch k {
	case fsmpb.DestinationKind_DESTINATION_KIND_TOPIC:
		return "topic"
	case fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION:
		return "subscription"
	}
	return "queue"
}

// wrongKind is the error for d used as a destination of kind k.
func wrongKind(d *fsmpb.Destination, k fsmpb.DestinationKind) error {
	hint := map[fsmpb.DestinationKind]string{
		fsmpb.DestinationKind_DESTINATION_KIND_QUEUE:        "send to it and receive from it",
		fsmpb.DestinationKind_DESTINATION_KIND_TOPIC:        "publish to it and subscribe to it",
		fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION: "receive from it; publish to its topic",
	}[d.Kind]
	return fmt.Errorf("%w: %s is a %s, not a %s: %s", transport.ErrDestinationKind, d.Name, kindWord(d.Kind), kindWord(k), hint)
}

// subscribe finds the subscription a consumer asks for, or makes it, and
// returns it once each of its members is hosted and takes the topic's
// publishes: a consumer made then misses nothing published after.
func (n *Node) subscribe(ctx context.Context, topic string, sub *clientpb.Subscribe, clientID, sel string) (*fsmpb.Destination, error) {
	named := sub.Durable || sub.Shared
	switch {
	case named && sub.Name == "":
		return nil, fmt.Errorf("%w: a durable or shared subscription needs a name", transport.ErrInvalidArgument)
	case !named && sub.Name != "":
		return nil, fmt.Errorf("%w: subscription %q is neither durable nor shared: only those have names", transport.ErrInvalidArgument, sub.Name)
	case sub.Durable && !sub.Shared && clientID == "":
		return nil, fmt.Errorf("%w: an unshared durable subscription is its client's: set a client id on the connection (client.Options.ClientID, cairn subscribe --client-id)", transport.ErrInvalidArgument)
	case len(sub.Name) > maxClientID || len(clientID) > maxClientID:
		return nil, fmt.Errorf("%w: a subscription's name and a client id have at most %d bytes", transport.ErrInvalidArgument, maxClientID)
	}
	if !sub.Shared && !sub.Durable {
		clientID = "" // a non-durable unshared subscription is nobody's to find again
	}
	for attempt := 1; ; attempt++ {
		t, err := n.resolveKind(ctx, topic, fsmpb.DestinationKind_DESTINATION_KIND_TOPIC)
		if err != nil {
			return nil, err
		}
		var d *fsmpb.Destination
		if named {
			n.meta.Read(func(m *fsm.Meta) { d = m.Subscription(t.Name, sub.Name, clientID) })
		}
		if d != nil {
			if err := sameSubscription(d, sub, sel); err != nil {
				return nil, err
			}
			if sub.Durable && !sub.Shared {
				if k := n.consumersOf(ctx, d); k > 0 {
					return nil, fmt.Errorf("%w: the durable subscription %q of %s for client id %q has a consumer already; an unshared subscription has one at a time", transport.ErrSubscriptionInUse, sub.Name, t.Name, clientID)
				}
			}
			return d, n.waitSubscribed(ctx, d)
		}
		d = newSubscription(t, sub, clientID, sel, n.cfg.Clock())
		if err = n.createSubscription(ctx, d); err == nil {
			n.groups.poke()
			n.log.Info("subscription created", "subscription", d.Name, "topic", t.Name, "name", sub.Name, "client_id", clientID, "durable", sub.Durable, "shared", sub.Shared)
			return d, n.waitSubscribed(ctx, d)
		}
		// Made meanwhile by another consumer, or the topic's groups moved
		// between the read and the create: read again.
		if attempt == 3 || !errors.Is(err, fsm.ErrDestinationExists) && !errors.Is(err, fsm.ErrInvalidSettings) {
			return nil, frontend.WireError(err)
		}
	}
}

// createSubscription commits d in the meta group, trying again while the
// meta group has no leader to answer (its leader's node died): a try that
// was applied though its answer was lost shows as d itself existing.
func (n *Node) createSubscription(ctx context.Context, d *fsmpb.Destination) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := n.meta.Apply(ctx, &fsmpb.CreateDestination{Destination: d})
		if errors.Is(err, fsm.ErrDestinationExists) {
			if got, ok := n.meta.Destination(d.Name); ok && got.Uid == d.Uid {
				return nil
			}
		}
		if err == nil || !errors.Is(err, transport.ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sameSubscription checks that an existing subscription is the one asked
// for, as JMS has it: a subscription's kind and selector are its own.
func sameSubscription(d *fsmpb.Destination, sub *clientpb.Subscribe, sel string) error {
	s := d.Subscription
	switch {
	case s.Durable != sub.Durable || s.Shared != sub.Shared:
		return fmt.Errorf("%w: subscription %q of %s exists as %s; delete it first (cairn subscription delete)", transport.ErrInvalidArgument, s.Name, s.Topic, describe(s))
	case s.Selector != sel:
		return fmt.Errorf("%w: subscription %q of %s exists with selector %q; delete it first to change it (cairn subscription delete)", transport.ErrInvalidArgument, s.Name, s.Topic, s.Selector)
	}
	return nil
}

func describe(s *fsmpb.Subscription) string {
	switch {
	case s.Durable && s.Shared:
		return "a shared durable subscription"
	case s.Durable:
		return "an unshared durable subscription"
	case s.Shared:
		return "a shared non-durable subscription"
	}
	return "a non-durable subscription"
}

// newSubscription is a subscription of topic t: its members placed with
// the topic's, its messages' settings the topic's.
func newSubscription(t *fsmpb.Destination, sub *clientpb.Subscribe, clientID, sel string, now time.Time) *fsmpb.Destination {
	id := newID(8)
	d := &fsmpb.Destination{
		Name: t.Name + fsm.SubscriptionSep + id, Kind: fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION, Replicas: t.Replicas,
		TtlNs: t.TtlNs, MaxBytes: t.MaxBytes, MaxMessages: t.MaxMessages, CreatedAt: now.UnixNano(), Uid: id,
		MaxDeliveries: t.MaxDeliveries, RedeliveryDelayNs: t.RedeliveryDelayNs, RedeliveryBackoff: t.RedeliveryBackoff,
		RedeliveryMaxDelayNs: t.RedeliveryMaxDelayNs, DeadLetterQueue: deadLetterQueue(t), ForwardDelayNs: cmp.Or(t.ForwardDelayNs, int64(subscriptionForwardDelay)),
		DedupWindowNs: t.DedupWindowNs, DedupMaxIds: t.DedupMaxIds,
		Subscription: &fsmpb.Subscription{Topic: t.Name, TopicUid: t.Uid, Name: sub.Name, ClientId: clientID,
			Durable: sub.Durable, Shared: sub.Shared, Selector: sel},
	}
	for _, p := range t.Members {
		d.Members = append(d.Members, &fsmpb.MemberPlacement{Index: p.Index, Replicas: p.Replicas, Initial: p.Initial, Group: p.Group})
	}
	return d
}

// subscribedKey is the key, in its shared group, of the topic member a
// subscription's member index stores the publishes of.
func subscribedKey(s *fsmpb.Subscription, index uint32) string {
	return fsm.MemberName(s.Topic, index) + "@" + s.TopicUid
}

// waitSubscribed waits until every member of subscription d is hosted:
// its host added it to its group and configured what it subscribes to.
func (n *Node) waitSubscribed(ctx context.Context, d *fsmpb.Destination) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, p := range d.Members {
		name := fsm.MemberName(d.Name, p.Index)
		for !n.hosted(ctx, name) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: subscription member %s has no host yet (is a majority of its replicas up?)", transport.ErrUnavailable, name)
			case <-time.After(20 * time.Millisecond):
				n.groups.poke()
			}
		}
	}
	return nil
}

// hosted reports whether a member's host has taken it over.
func (n *Node) hosted(ctx context.Context, name string) bool {
	r, node := n.host(name)
	if r != nil {
		return true
	}
	if node == "" {
		node = n.discoverLeader(name)
	}
	resp, _ := n.askHost(ctx, node, &peerpb.MemberRequest{Member: name})
	return resp != nil
}

// deleteSubscription deletes a durable or shared subscription, refused
// while a consumer uses it.
func (n *Node) deleteSubscription(ctx context.Context, topic, name, clientID string) error {
	var d *fsmpb.Destination
	n.meta.Read(func(m *fsm.Meta) { d = m.Subscription(topic, name, clientID) })
	if d == nil {
		who := ""
		if clientID != "" {
			who = " for client id " + clientID
		}
		return fmt.Errorf("%w: topic %s has no subscription %q%s", transport.ErrUnknownDestination, topic, name, who)
	}
	if k := n.consumersOf(ctx, d); k > 0 {
		return fmt.Errorf("%w: subscription %q of %s has %d consumers; close them first", transport.ErrSubscriptionInUse, name, topic, k)
	}
	return n.deleteDestination(ctx, d.Name)
}

// consumersOf counts the consumers of d's members, as their hosts say.
func (n *Node) consumersOf(ctx context.Context, d *fsmpb.Destination) int {
	k := 0
	for _, p := range d.Members {
		k += n.memberInfo(ctx, fsm.MemberName(d.Name, p.Index)).consumers
	}
	return k
}

// dropDestination deletes, in the background, a non-durable subscription
// whose consumer closed or a temporary queue whose connection ended; if it
// cannot within a minute (no meta leader), the meta leader's sweeps do
// once this node run is gone, or, for a subscription, has been idle.
func (n *Node) dropDestination(name string) {
	n.retryInBackground(func(ctx context.Context) error {
		if err := n.deleteDestination(ctx, name); !errors.Is(err, transport.ErrUnknownDestination) {
			return err
		}
		return nil
	}, nil, "deleting a destination whose consumer or connection ended", "destination", name)
}

// retryInBackground runs try on a goroutine of the node's, every 500 ms
// for up to a minute, until it succeeds or the node stops; first, if not
// nil, gets the first try's outcome. A try that never succeeded is logged
// as what, with attrs.
func (n *Node) retryInBackground(try func(context.Context) error, first func(error), what string, attrs ...any) {
	n.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for tries := 0; ; tries++ {
			err := try(ctx)
			if tries == 0 && first != nil {
				first(err)
			}
			if err == nil {
				return
			}
			select {
			case <-ctx.Done():
				n.log.Warn(what, append(attrs, "err", err)...)
				return
			case <-n.stopped:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
}

// subscriptionIdle is how long a non-durable subscription lives without a
// consumer: one whose consumer's node died, or a shared one whose last
// consumer closed. A consumer re-created after a reconnect makes a new one.
const subscriptionIdle = 30 * time.Second

// leaderSweeps is the meta leader's memory of idle non-durable
// subscriptions and of temporary queues whose node run looks gone.
type leaderSweeps struct {
	mu   sync.Mutex
	last time.Time
	idle map[string]time.Time // since when each has had no consumer
	// The temporary queues and the client ids whose connection's node run
	// looks gone.
	temporary, clientIDs orphans
}

// orphans remembers since when things owned by a connection
// (NODE/BOOT/CONNECTION) have looked to outlive its node run; they go once
// they have for orphanGrace (a meta leader new in its term may not have
// heard of every node yet). One sweep is begin, gone for each, end.
type orphans struct {
	since map[string]time.Time
	seen  map[string]bool
}

const orphanGrace = 10 * time.Second

func (o *orphans) begin() {
	if o.since == nil {
		o.since = make(map[string]time.Time)
	}
	o.seen = make(map[string]bool)
}

// gone reports whether key's owner's node run has looked gone for
// orphanGrace.
func (o *orphans) gone(n *Node, key, owner string) bool {
	node, rest, _ := strings.Cut(owner, "/")
	boot, _, _ := strings.Cut(rest, "/")
	if n.ownerLive(node + "/" + boot) {
		return false
	}
	o.seen[key] = true
	since, ok := o.since[key]
	if !ok {
		o.since[key] = time.Now()
	}
	return ok && time.Since(since) >= orphanGrace
}

// end forgets what this sweep did not see gone.
func (o *orphans) end() {
	for key := range o.since {
		if !o.seen[key] {
			delete(o.since, key)
		}
	}
}

// sweepSubscriptions deletes, on the meta leader, the non-durable
// subscriptions that have had no consumer for subscriptionIdle. It looks
// every few seconds.
func (n *Node) sweepSubscriptions(ctx context.Context) {
	sw := &n.sweeps
	sw.mu.Lock()
	defer sw.mu.Unlock()
	now := time.Now()
	if now.Sub(sw.last) < subscriptionIdle/10 {
		return
	}
	sw.last = now
	if sw.idle == nil {
		sw.idle = make(map[string]time.Time)
	}
	seen := make(map[string]bool)
	for _, d := range n.destinations() {
		s := d.Subscription
		if s == nil || s.Durable || time.Since(time.Unix(0, d.CreatedAt)) < subscriptionIdle {
			continue
		}
		seen[d.Name] = true
		if n.consumersOf(ctx, d) > 0 {
			delete(sw.idle, d.Name)
			continue
		}
		since, ok := sw.idle[d.Name]
		if !ok {
			sw.idle[d.Name] = now
			continue
		}
		if now.Sub(since) >= subscriptionIdle {
			if err := n.deleteDestination(ctx, d.Name); err != nil {
				n.log.Warn("deleting an idle non-durable subscription", "subscription", d.Name, "err", err)
				continue
			}
			n.log.Info("deleted a non-durable subscription without a consumer", "subscription", d.Name, "idle", now.Sub(since).Round(time.Second))
		}
	}
	for name := range sw.idle {
		if !seen[name] {
			delete(sw.idle, name)
		}
	}
}

// temporaryPrefix starts every temporary queue's name, and no other's.
const temporaryPrefix = "tmp."

// createTemporaryQueue makes a queue of one member for the connection conn
// of this node's front-end; it goes when the connection ends (the
// front-end deletes it) or this run of the node is gone (the meta leader's
// sweep).
func (n *Node) createTemporaryQueue(ctx context.Context, conn string) (string, error) {
	name := temporaryPrefix + conn + "." + newID(4)
	if _, err := n.createDestinationOf(ctx, &clientpb.CreateDestinationRequest{Name: name, Members: 1}, n.owner()+"/"+conn); err != nil {
		return "", err
	}
	return name, nil
}

// temporaryOwner is the connection (NODE/BOOT/CONNECTION) a temporary
// queue lives as long as, "" for any other destination.
func (n *Node) temporaryOwner(addr string) string {
	name, _, _ := strings.Cut(addr, "#")
	if d, ok := n.meta.Destination(name); ok {
		return d.Temporary
	}
	return ""
}

// sweepTemporaryQueues deletes, on the meta leader, the temporary queues
// of node runs that are gone.
func (n *Node) sweepTemporaryQueues(ctx context.Context) {
	sw := &n.sweeps
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.temporary.begin()
	defer sw.temporary.end()
	for _, d := range n.destinations() {
		if d.Temporary == "" || !sw.temporary.gone(n, d.Name, d.Temporary) {
			continue
		}
		if err := n.deleteDestination(ctx, d.Name); err != nil {
			n.log.Warn("deleting a temporary queue of a node run that is gone", "queue", d.Name, "err", err)
			continue
		}
		n.log.Info("deleted a temporary queue: its connection's node run is gone", "queue", d.Name, "owner", d.Temporary)
	}
}
