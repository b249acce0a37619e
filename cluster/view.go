package cluster

// What the front-end knows of a destination's members, the view the router
// decides from (Node.candidates): which node hosts each member (host,
// hostCache), and its counts as its host last reported them (memberInfo,
// loads).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// hostCache caches which node hosts each member, for members this node has
// no replica of (with one, the replica knows): what a host last said of
// itself, or a node's answer naming its group's leader.
type hostCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (l *hostCache) get(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[name]
}

func (l *hostCache) set(name, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if node == "" {
		delete(l.m, name)
	} else {
		l.m[name] = node
	}
}

// host says where a member's host is: this node's replica (when it hosts
// the member), or another node's id. Both empty means no host is known now
// (an election or a takeover is under way).
func (n *Node) host(name string) (*member.Replica, string) {
	if r, node, known := n.knownHost(name); known {
		return r, node
	}
	return nil, n.discoverLeader(name)
}

// knownHost is host without asking other nodes: known is false for a member
// whose leader neither this node's replica nor the cache knows.
func (n *Node) knownHost(name string) (r *member.Replica, node string, known bool) {
	if replica, ok := n.groups.replica(name); ok && (replica.Leading() || n.placedOnThisNode(name)) {
		// A replica placed elsewhere since (renewed, moved) and not
		// leading is of a group this node is leaving: what it believes of
		// the leader is stale, and the member's replicas know better.
		if replica.Leading() {
			return replica, "", true
		}
		_, leader := replica.Raft().LeaderWithID()
		if string(leader) == n.cfg.NodeID {
			return nil, "", true // leader here, takeover not finished
		}
		if leader != "" {
			return nil, string(leader), true
		}
		// None known here: an election, or a replica of a group this
		// node has just left, which its leader no longer writes to; the
		// cache or the member's replicas may know.
	}
	node = n.hostCache.get(name)
	if node == n.cfg.NodeID {
		// This node hosted the member once and no longer does (its
		// replica moved away, or no longer leads): only the member's
		// replicas can say who does now. Kept, the entry would send every
		// command back here until the route window ends.
		n.hostCache.set(name, "")
		return nil, "", false
	}
	return nil, node, node != ""
}

// placedOnThisNode reports whether the meta state places a replica of
// member name on this node.
func (n *Node) placedOnThisNode(name string) bool {
	dest, idx, err := fsm.ParseAddress(name)
	if err != nil || idx < 0 {
		return false
	}
	d, ok := n.meta.Destination(dest)
	return ok && idx < len(d.Members) && slices.Contains(d.Members[idx].Replicas, n.cfg.NodeID)
}

// discoverLeader asks the nodes that replicate a member which one leads it.
func (n *Node) discoverLeader(name string) string {
	dest, idx, err := fsm.ParseAddress(name)
	d, ok := n.meta.Destination(dest)
	if err != nil || !ok || idx < 0 || idx >= len(d.Members) {
		return ""
	}
	for _, node := range d.Members[idx].Replicas {
		c, err := n.peers.client(node)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.Member(ctx, &peerpb.MemberRequest{Member: name})
		cancel()
		// A replica naming this node knows of a leadership this node no
		// longer holds (knownHost found no leading replica here).
		if err == nil && resp.Leader != "" && resp.Leader != n.cfg.NodeID {
			n.hostCache.set(name, resp.Leader)
			return resp.Leader
		}
	}
	return ""
}

// memberStats is what a member's host reports about it.
type memberStats struct {
	host                          string
	pending, delivered, bytes     int64
	delayed, moving, deadLettered int64
	prepared                      int64
	consumers                     int
	counters                      fsm.Counters
}

// hostStats is what the host r reports.
func hostStats(host string, r *member.Replica) memberStats {
	var st fsm.Stats
	var counters fsm.Counters
	r.Read(func(m *fsm.Member) { st, counters = m.Stats(), m.Counters() })
	return memberStats{host: host, pending: int64(st.Pending), delivered: int64(st.Delivered), bytes: st.Bytes,
		delayed: int64(st.Delayed), moving: int64(st.Moving), deadLettered: int64(st.DeadLettered), prepared: int64(st.Prepared),
		consumers: r.Consumers(), counters: counters}
}

// askHost asks the member's host on another node (node, as this node
// knows it) and returns its answer; a cached host may have moved on, and
// its answer names the new one. It returns nil when no host answered.
func (n *Node) askHost(ctx context.Context, node string, req *peerpb.MemberRequest) (*peerpb.MemberResponse, string) {
	for try := 0; node != "" && try < 2; try++ {
		c, err := n.peers.client(node)
		if err != nil {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.Member(cctx, req)
		cancel()
		if err != nil {
			n.hostCache.set(req.Member, "")
			break
		}
		if resp.Hosting {
			return resp, node
		}
		if resp.Leader == "" || resp.Leader == node {
			break
		}
		node = resp.Leader
		if _, local := n.groups.replica(req.Member); !local {
			n.hostCache.set(req.Member, node)
		}
	}
	return nil, ""
}

// memberInfo asks the member's host for its counts; without a host it
// reports what this node's replica has applied, and no host.
func (n *Node) memberInfo(ctx context.Context, name string) memberStats {
	r, node := n.host(name)
	if r != nil {
		return hostStats(n.cfg.NodeID, r)
	}
	if resp, node := n.askHost(ctx, node, &peerpb.MemberRequest{Member: name}); resp != nil {
		return memberStats{host: node, pending: int64(resp.Pending), delivered: int64(resp.Delivered), bytes: resp.Bytes,
			delayed: int64(resp.Delayed), moving: int64(resp.Moving), deadLettered: int64(resp.DeadLettered), prepared: int64(resp.Prepared),
			consumers: int(resp.Consumers), counters: fsm.CountersOf(resp.Counters)}
	}
	if r, ok := n.groups.replica(name); ok {
		st := hostStats("", r)
		st.consumers = 0
		return st
	}
	return memberStats{}
}

// waitHost waits until a member has a host, or ctx ends.
func (n *Node) waitHost(ctx context.Context, name string) error {
	for {
		if r, node := n.host(name); r != nil || node != "" {
			return nil
		}
		n.groups.poke()
		if r, ok := n.groups.replica(name); ok {
			if _, leader := r.Raft().LeaderWithID(); string(leader) == n.cfg.NodeID {
				// Its takeover here is under way: its end ends the wait.
				wctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = r.WaitLeading(wctx)
				cancel()
				if err := ctx.Err(); err != nil {
					return err
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// loadTTL is how long a member's load, as its remote host reported it,
// serves the router before it is asked again.
const loadTTL = time.Second

// loads caches the load of members hosted on other nodes, for the router.
// A stale entry is refreshed in the background; the router never waits.
type loads struct {
	mu sync.Mutex
	m  map[string]*loadEntry
}

type loadEntry struct {
	st         memberStats
	at         time.Time
	refreshing bool
}

// candidates describes a destination's members for the router: where
// each is hosted, and its load as its host last reported it.
func (n *Node) candidates(d *fsmpb.Destination) []destination.Candidate {
	out := make([]destination.Candidate, len(d.Members))
	for i := range d.Members {
		name := fsm.MemberName(d.Name, uint32(i))
		r, node := n.host(name)
		c := destination.Candidate{Index: i, Local: r != nil, Draining: d.Members[i].Draining, Available: r != nil || (node != "" && n.gossip.alive(node))}
		switch {
		case c.Draining:
		case r != nil:
			c.Pending, c.Consumers = r.Stats().Pending, r.Consumers()
		case c.Available:
			st := n.loads.get(n, name)
			c.Pending, c.Consumers = int(st.pending), st.consumers
		}
		out[i] = c
	}
	return out
}

func (l *loads) get(n *Node, name string) memberStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[name]
	if e == nil {
		e = &loadEntry{}
		l.m[name] = e
	}
	if time.Since(e.at) > loadTTL && !e.refreshing {
		e.refreshing = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st := n.memberInfo(ctx, name)
			cancel()
			l.mu.Lock()
			e.st, e.at, e.refreshing = st, time.Now(), false
			l.mu.Unlock()
		}()
	}
	return e.st
}

// browse asks the member's host for up to limit of its pending messages
// that sel selects, in delivery order; it changes nothing.
func (n *Node) browse(ctx context.Context, name string, sel *selector.Selector, limit int) ([]fsm.MessageState, error) {
	r, node := n.host(name)
	if r != nil {
		return r.Browse(sel, limit)
	}
	resp, _ := n.askHost(ctx, node, &peerpb.MemberRequest{Member: name, Browse: uint32(limit), Selector: sel.String()})
	if resp == nil {
		return nil, fmt.Errorf("%w: member %s has no host that answers now; try again once it has one (cairn cluster status)", transport.ErrUnavailable, name)
	}
	if e := resp.GetError(); e != nil {
		return nil, fmt.Errorf("%w: browsing member %s: %s", transport.ErrUnavailable, name, e.Message)
	}
	out := make([]fsm.MessageState, len(resp.Browsed))
	for i, d := range resp.Browsed {
		out[i] = fsm.MessageState{Message: d.Message, Pending: true, Redelivered: d.Redelivered, DeliveryCount: d.DeliveryCount}
	}
	return out, nil
}
