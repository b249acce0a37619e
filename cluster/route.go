package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// routeWindow bounds how long a command keeps looking for its member's host
// through an election: a host failure is detected, a new leader elected and
// its takeover done well within it.
const routeWindow = 10 * time.Second

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
// this node has no replica of and no leader cached for.
func (n *Node) knownHost(name string) (r *member.Replica, node string, known bool) {
	if replica, ok := n.groups.replica(name); ok {
		if replica.Leading() {
			return replica, "", true
		}
		_, leader := replica.Raft().LeaderWithID()
		if string(leader) == n.cfg.NodeID {
			return nil, "", true // leader here, takeover not finished
		}
		return nil, string(leader), true
	}
	node = n.hostCache.get(name)
	return nil, node, node != ""
}

// discoverLeader asks the nodes that replicate a member which one leads it.
func (n *Node) discoverLeader(name string) string {
	dest, idx, err := fsm.ParseAddress(name)
	d, ok := n.meta.destination(dest)
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
		if err == nil && resp.Leader != "" {
			n.hostCache.set(name, resp.Leader)
			return resp.Leader
		}
	}
	return ""
}

// submitAsync runs a member command on the member's host, wherever it is.
// Commands submitted for one member from one goroutine reach the host in
// order. A command that did not reach the host's log (no host yet, not the
// leader any more) is sent again, to the new host, until routeWindow passes;
// one that may have reached it and got no answer is not: done gets an error
// wrapping member.ErrOutcomeUnknown. done must not block.
func (n *Node) submitAsync(name string, body proto.Message, done func(fsm.Result, error)) {
	n.attempt(name, body, time.Now().Add(routeWindow), done)
}

// submitRepeatable is submitAsync for a command that its member applies
// once however often it comes (a Recover naming its attempt): one that got
// no answer, because its leader stepped down under it, is sent again too,
// until routeWindow passes, so a failover costs the client a slower answer
// rather than an error it cannot act on. If the window ends after such a
// try, the error still says the outcome is unknown.
func (n *Node) submitRepeatable(name string, body proto.Message, done func(fsm.Result, error)) {
	deadline := time.Now().Add(routeWindow)
	unanswered := false // tries run one after another: no lock needed
	var try func()
	try = func() {
		n.attempt(name, body, deadline, func(res fsm.Result, err error) {
			if !errors.Is(err, member.ErrOutcomeUnknown) {
				if err != nil && unanswered {
					err = fmt.Errorf("%w: an earlier try got no answer, then: %v", member.ErrOutcomeUnknown, err)
				}
				done(res, err)
				return
			}
			unanswered = true
			if !time.Now().Before(deadline) {
				done(res, err)
				return
			}
			// Off the caller's goroutine: it may be a proposer's or a stream's.
			go func() {
				select {
				case <-time.After(50 * time.Millisecond):
					try()
				case <-n.stopped:
					done(res, err)
				}
			}()
		})
	}
	try()
}

func (n *Node) attempt(name string, body proto.Message, deadline time.Time, done func(fsm.Result, error)) {
	retry := func(err error) {
		if !time.Now().Before(deadline) {
			done(fsm.Result{}, fmt.Errorf("%w: member %s has no reachable host (is a majority of its replicas up and connected to this node?): %v", transport.ErrUnavailable, name, err))
			return
		}
		// Off the caller's goroutine: it may be a proposer's or a stream's.
		go func() {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-n.stopped:
				done(fsm.Result{}, fmt.Errorf("%w: node %s is stopping", transport.ErrNodeStopping, n.cfg.NodeID))
				return
			}
			n.attempt(name, body, deadline, done)
		}()
	}
	r, node := n.host(name)
	switch {
	case r != nil:
		r.Submit(body, func(res fsm.Result, err error) {
			switch {
			case errors.Is(err, member.ErrNotLeader), errors.Is(err, member.ErrBusy):
				retry(err)
			default:
				done(res, err)
			}
		})
	case node != "" && node != n.cfg.NodeID:
		n.peers.propose(node, name, body, func(resp *peerpb.ProposeResponse, err error) {
			if err == nil && resp.Error != nil {
				err = fromPeerError(node, resp.Error)
			}
			var pe *peerError
			switch {
			case err == nil:
				done(toResult(resp.Result), nil)
			case errors.As(err, &pe) && errors.Is(err, errNotSent):
				n.hostCache.set(name, pe.leader)
				retry(err)
			case errors.Is(err, errNoAnswer):
				n.hostCache.set(name, "")
				done(fsm.Result{}, fmt.Errorf("%w: %v", member.ErrOutcomeUnknown, err))
			default:
				done(fsm.Result{}, err)
			}
		})
	default:
		retry(fmt.Errorf("no leader known for member %s", name))
	}
}

// submit runs a member command on its host and waits for the result; a
// rejection is returned as the error, as well as in the result.
func (n *Node) submit(ctx context.Context, name string, body proto.Message) (fsm.Result, error) {
	return n.submitBy(ctx, name, body, time.Now().Add(routeWindow))
}

// submitBy is submit that stops looking for the member's host at deadline.
func (n *Node) submitBy(ctx context.Context, name string, body proto.Message, deadline time.Time) (fsm.Result, error) {
	return await(ctx, func(done func(fsm.Result, error)) { n.attempt(name, body, deadline, done) })
}

// submitRepeatableWait is submitRepeatable that waits for the answer; a
// rejection is returned as the error, as well as in the result.
func (n *Node) submitRepeatableWait(ctx context.Context, name string, body proto.Message) (fsm.Result, error) {
	return await(ctx, func(done func(fsm.Result, error)) { n.submitRepeatable(name, body, done) })
}

// await runs an asynchronous submit and waits for its answer or ctx.
func await(ctx context.Context, submit func(done func(fsm.Result, error))) (fsm.Result, error) {
	type outcome struct {
		r   fsm.Result
		err error
	}
	ch := make(chan outcome, 1)
	submit(func(r fsm.Result, err error) { ch <- outcome{r, err} })
	select {
	case o := <-ch:
		if o.err == nil {
			o.err = o.r.Err
		}
		return o.r, o.err
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	}
}

// memberStats is what a member's host reports about it.
type memberStats struct {
	host                          string
	pending, delivered, bytes     int64
	delayed, moving, deadLettered int64
	prepared                      int64
	consumers                     int
}

// hostStats is what the host r reports.
func hostStats(host string, r *member.Replica) memberStats {
	st := r.Stats()
	return memberStats{host: host, pending: int64(st.Pending), delivered: int64(st.Delivered), bytes: st.Bytes,
		delayed: int64(st.Delayed), moving: int64(st.Moving), deadLettered: int64(st.DeadLettered), prepared: int64(st.Prepared), consumers: r.Consumers()}
}

// memberInfo asks the member's host for its counts; without a host it
// reports what this node's replica has applied, and no host.
func (n *Node) memberInfo(ctx context.Context, name string) memberStats {
	r, node := n.host(name)
	if r != nil {
		return hostStats(n.cfg.NodeID, r)
	}
	// A cached host may have moved on: its answer names the new one.
	for try := 0; node != "" && try < 2; try++ {
		c, err := n.peers.client(node)
		if err != nil {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.Member(cctx, &peerpb.MemberRequest{Member: name})
		cancel()
		if err != nil {
			n.hostCache.set(name, "")
			break
		}
		if resp.Hosting {
			return memberStats{host: node, pending: int64(resp.Pending), delivered: int64(resp.Delivered), bytes: resp.Bytes,
				delayed: int64(resp.Delayed), moving: int64(resp.Moving), deadLettered: int64(resp.DeadLettered), prepared: int64(resp.Prepared),
				consumers: int(resp.Consumers)}
		}
		if resp.Leader == "" || resp.Leader == node {
			break
		}
		node = resp.Leader
		if _, local := n.groups.replica(name); !local {
			n.hostCache.set(name, node)
		}
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
