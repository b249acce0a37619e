package test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// The three-node tests' bounds.
const (
	clusterSize        = 3
	clusterStopTimeout = 10 * time.Second // SIGTERM of all nodes to exit, before SIGKILL
	statusTimeout      = 3 * time.Second  // one cluster status call
	failoverDeadline   = 15 * time.Second // a killed or paused host to a new host
	deadDeadline       = 12 * time.Second // a killed or paused node to alive=false
	clusterPrefetch    = 4                // per consumer: bounds deliveries a consumer may hold unseen
	// loadRequestTimeout bounds the workload's acks: the client's default,
	// well over failure detection (about 5 s) and a new host, so an ack
	// forwarded to a host that stopped answering gets the front-end's
	// answer, not the client's timeout.
	loadRequestTimeout = 30 * time.Second
)

// processCluster is three `cairn server` processes that form one cluster:
// all started with --bootstrap-expect 3 and --join listing the three
// gossip addresses. Their flags and data directories stay the same over
// restarts. (The in-process harness is cluster.TestCluster.)
type processCluster struct {
	t     *testing.T
	nodes []*server
	// paused marks nodes stopped with SIGSTOP, to continue them at the end.
	paused [clusterSize]atomic.Bool
}

// newCluster prepares three nodes n1, n2, n3 with fresh ports and data
// directories; they are stopped when the test ends (SIGCONT, SIGTERM to
// all at once, SIGKILL after clusterStopTimeout).
func newCluster(t *testing.T) *processCluster {
	t.Helper()
	c := &processCluster{t: t}
	var gossip []string
	for i := range clusterSize {
		s := newServer(t)
		s.nodeID = fmt.Sprintf("n%d", i+1)
		c.nodes = append(c.nodes, s)
		gossip = append(gossip, s.addrs.gossip)
	}
	for _, s := range c.nodes {
		s.extra["bootstrap-expect"] = fmt.Sprint(clusterSize)
		s.extra["join"] = strings.Join(gossip, ",")
	}
	// Registered after the servers' own cleanups, so it runs before them:
	// they find the processes gone and only report.
	t.Cleanup(c.stopAll)
	return c
}

// startAll starts every node at the same moment and waits until each
// answers /readyz with 200.
func (c *processCluster) startAll() {
	c.t.Helper()
	start := time.Now()
	for _, s := range c.nodes {
		s.startNoWait()
	}
	for _, s := range c.nodes {
		s.waitReady()
	}
	c.t.Logf("cluster: all %d nodes ready %v after their simultaneous start", len(c.nodes), time.Since(start).Round(time.Millisecond))
}

// waitSettled waits until every node's status shows every node alive,
// every group with a leader and every replica caught up. (A node answering
// /readyz may not yet have applied the registration of the others: see
// TestCluster3_CreateQueueRightAfterReady.)
func (c *processCluster) waitSettled(d time.Duration) {
	c.t.Helper()
	start := time.Now()
	for i := range c.nodes {
		var why string
		for {
			st, err := c.statusFrom(i)
			ok := false
			if err != nil {
				why = err.Error()
			} else if len(st.Nodes) != len(c.nodes) {
				why = fmt.Sprintf("%d nodes", len(st.Nodes))
			} else {
				ok, why = settled(st, len(c.nodes))
			}
			if ok {
				break
			}
			if time.Since(start) > d {
				c.t.Fatalf("cluster: not settled %v after the start as %s sees it: %s", d, c.nodes[i].nodeID, why)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.t.Logf("cluster: settled in %v", time.Since(start).Round(time.Millisecond))
}

// stopAll continues paused nodes, sends SIGTERM to every running node at
// once and SIGKILL to those still running after clusterStopTimeout.
func (c *processCluster) stopAll() {
	var running []*server
	for i, s := range c.nodes {
		if s.proc == nil || s.proc.exited() {
			continue
		}
		if c.paused[i].Load() {
			_ = s.proc.cmd.Process.Signal(syscall.SIGCONT)
		}
		running = append(running, s)
		_ = s.proc.cmd.Process.Signal(syscall.SIGTERM)
	}
	start := time.Now()
	deadline := start.Add(clusterStopTimeout)
	for _, s := range running {
		select {
		case <-s.proc.done:
			continue
		case <-time.After(time.Until(deadline)):
		}
		c.t.Logf("cluster: %s still running %v after SIGTERM; SIGKILL. Its last words:\n%s", s.nodeID, clusterStopTimeout, lastLines(s.log.String(), 40))
		_ = s.proc.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-s.proc.done:
		case <-time.After(killTimeout):
			c.t.Errorf("cluster: %s still running %v after SIGKILL", s.nodeID, killTimeout)
		}
	}
	if len(running) > 0 {
		c.t.Logf("cluster: %d nodes stopped in %v", len(running), time.Since(start).Round(time.Millisecond))
	}
}

// lastLines is the end of out, n lines at most.
func lastLines(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// node returns the node with the given id.
func (c *processCluster) node(id string) (int, *server) {
	for i, s := range c.nodes {
		if s.nodeID == id {
			return i, s
		}
	}
	c.t.Fatalf("cluster: no node %q", id)
	return -1, nil
}

// clientAddrs lists the client addresses, node first's first.
func (c *processCluster) clientAddrs(first int) []string {
	var out []string
	for j := range c.nodes {
		out = append(out, c.nodes[(first+j)%len(c.nodes)].addrs.client)
	}
	return out
}

// dialNode connects the Go client library to node i alone.
func (c *processCluster) dialNode(i int) *client.Connection {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, []string{c.nodes[i].addrs.client}, client.Options{RequestTimeout: loadRequestTimeout})
	if err != nil {
		c.t.Fatalf("dial %s: %v", c.nodes[i].nodeID, err)
	}
	return conn
}

// pause stops node i with SIGSTOP; resume continues it with SIGCONT.
func (c *processCluster) pause(i int) {
	c.t.Helper()
	c.paused[i].Store(true)
	if err := c.nodes[i].proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", c.nodes[i].nodeID, err)
	}
}

func (c *processCluster) resume(i int) {
	c.t.Helper()
	if err := c.nodes[i].proc.cmd.Process.Signal(syscall.SIGCONT); err != nil && !c.nodes[i].proc.exited() {
		c.t.Fatalf("SIGCONT %s: %v", c.nodes[i].nodeID, err)
	}
	c.paused[i].Store(false)
}

// statusFrom asks node i alone for the cluster status, bounded by
// statusTimeout.
func (c *processCluster) statusFrom(i int) (client.ClusterStatus, error) {
	a, err := client.NewAdmin([]string{c.nodes[i].addrs.client})
	if err != nil {
		return client.ClusterStatus{}, err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	return a.ClusterStatus(ctx)
}

// admin runs fn with an admin client of node i, bounded to 10 s.
func (c *processCluster) admin(i int, fn func(context.Context, *client.Admin) error) error {
	a, err := client.NewAdmin([]string{c.nodes[i].addrs.client})
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return fn(ctx, a)
}

// createQueue creates a queue of n members on the cluster and checks that
// each member has its own host, on a different node.
func (c *processCluster) createQueue(name string, members int) client.QueueInfo {
	c.t.Helper()
	var info client.QueueInfo
	err := c.admin(0, func(ctx context.Context, a *client.Admin) error {
		var err error
		info, err = a.CreateQueue(ctx, name, client.QueueOptions{Members: members})
		return err
	})
	if err != nil {
		c.t.Fatalf("create queue %s with %d members: %v", name, members, err)
	}
	if len(info.Members) != members {
		c.t.Fatalf("queue %s has %d members, want %d", name, len(info.Members), members)
	}
	// All three nodes answered /readyz: each member has a replica on each.
	if info.Replicas != clusterSize {
		c.t.Fatalf("queue %s created on a cluster of %d ready nodes has a replication factor of %d, want %d (members %+v)", name, clusterSize, info.Replicas, clusterSize, info.Members)
	}
	// Each member gets its own preferred host: wait until every member has
	// a host and no two share one.
	deadline := time.Now().Add(15 * time.Second)
	for {
		hosts := c.hosts(0)
		seen := map[string]bool{}
		ok := true
		for _, m := range info.Members {
			h := hosts[m.Name]
			if h == "" || seen[h] {
				ok = false
			}
			seen[h] = true
		}
		if ok {
			c.t.Logf("queue %s: hosts %v", name, hosts)
			// As seen then: a later look may find a member between hosts.
			for i := range info.Members {
				info.Members[i].Host = hosts[info.Members[i].Name]
			}
			return info
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("queue %s: members' hosts %v after 15 s; want each on its own node", name, hosts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hosts maps each member group to its leader as node i sees it (nil if
// node i does not answer).
func (c *processCluster) hosts(i int) map[string]string {
	st, err := c.statusFrom(i)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, g := range st.Groups {
		if g.Name != "meta" {
			out[g.Name] = g.Leader
		}
	}
	return out
}

// waitHost polls node from until member has a leader other than old
// (which is dead or paused); it returns the new host and how long it took
// from since.
func (c *processCluster) waitHost(from int, member, old string, since time.Time) (string, time.Duration) {
	c.t.Helper()
	var last map[string]string
	for time.Since(since) < failoverDeadline {
		last = c.hosts(from)
		if h := last[member]; h != "" && h != old {
			return h, time.Since(since)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("%s: no new host %v after its host %s stopped (hosts seen by %s: %v)", member, failoverDeadline, old, c.nodes[from].nodeID, last)
	return "", 0
}

// nodeState is node id's entry in st.
func nodeState(st client.ClusterStatus, id string) (client.NodeStatus, bool) {
	for _, n := range st.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return client.NodeStatus{}, false
}

// settled reports whether st shows every node alive, every group with a
// leader, and every replica reachable with nothing left to apply.
func settled(st client.ClusterStatus, nodes int) (bool, string) {
	alive := 0
	for _, n := range st.Nodes {
		if n.Alive {
			alive++
		}
	}
	if alive != nodes {
		return false, fmt.Sprintf("%d of %d nodes alive", alive, nodes)
	}
	for _, g := range st.Groups {
		if g.Leader == "" {
			return false, g.Name + " has no leader"
		}
		for _, r := range g.Replicas {
			if !r.Reachable || r.Lag != 0 {
				return false, fmt.Sprintf("%s: replica %s reachable=%v lag %d", g.Name, r.Node, r.Reachable, r.Lag)
			}
		}
	}
	return true, ""
}

// waitBalanced waits, without failing, up to d for every member of the
// queue to be led by a different node (each back on its preferred host).
func (c *processCluster) waitBalanced(from int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		hosts := c.hosts(from)
		seen := map[string]bool{}
		for _, h := range hosts {
			if h != "" {
				seen[h] = true
			}
		}
		if len(hosts) > 0 && len(seen) == len(hosts) {
			return true
		}
		if time.Now().After(deadline) {
			c.t.Logf("cluster: members' hosts still %v after %v", hosts, d)
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// --- workload ---------------------------------------------------------

// loadConfig shapes a workload.
type loadConfig struct {
	queue       string
	members     int
	phase       string // prefix of the consumers' phases
	producers   int    // producer sessions per node, sending to the queue's name
	sendsPerPro int    // bound of one producer's sends
	sendPause   time.Duration
	recvPerCons int // bound of one consumer's receipts
	// noEndAcks leaves every held message unacknowledged at the end.
	noEndAcks bool
	// noConsumersOn lists nodes whose connection gets producers only.
	noConsumersOn map[int]bool
}

// load runs producers and consumers on every node of a cluster: on each
// node's connection, cfg.producers producers send to the queue's name (the
// router picks a member, preferring the local one) and one consumer per
// member (NAME#I) receives and acknowledges most of what it gets, so every
// member has a consumer on every front-end, local or remote to its host.
type load struct {
	c   *processCluster
	h   *history.History
	cfg loadConfig

	stop    chan struct{}
	stopped atomic.Bool
	wg      sync.WaitGroup
	nodes   []*nodeLoad
	// budget is the sum of the prefetch windows of the consumers created:
	// a bound of the deliveries the application may never have seen (held
	// in a buffer when the consumer closed or its connection died).
	budget *atomic.Int64

	// ackUnknownUnavailable counts acks whose outcome was unknown (in
	// flight to a host that died) and that failed with ErrUnavailable
	// rather than ErrLostServer.
	ackUnknownUnavailable atomic.Int64

	mu        sync.Mutex
	problems  []string // broken expectations, reported by check
	tolerated []string // failures the faults explain
}

// nodeLoad is the workload's clients on one node's connection.
type nodeLoad struct {
	i    int
	id   string
	conn *client.Connection
	// faulted is set when the node is killed or paused: its clients'
	// failures are expected from then on.
	faulted atomic.Bool
	// faultAt is when that happened (unix nanoseconds).
	sendsOK, sendErrs         atomic.Int64
	received, acks, ackErrs   atomic.Int64
	keptAcks, keptAckFailures atomic.Int64
	maxAck                    atomic.Int64 // longest Ack call, in nanoseconds
}

// timedAck acknowledges m and records how long the call took.
func (nl *nodeLoad) timedAck(m *client.Message) error {
	start := time.Now()
	err := m.Ack()
	d := int64(time.Since(start))
	for {
		old := nl.maxAck.Load()
		if d <= old || nl.maxAck.CompareAndSwap(old, d) {
			return err
		}
	}
}

// startLoad dials one connection per node (client.Dial with all three
// client addresses, the node's own first) and starts the clients.
func startLoad(c *processCluster, h *history.History, budget *atomic.Int64, cfg loadConfig) *load {
	c.t.Helper()
	l := &load{c: c, h: h, cfg: cfg, stop: make(chan struct{}), budget: budget}
	opts := client.Options{Prefetch: clusterPrefetch, RequestTimeout: loadRequestTimeout, DialTimeout: 3 * time.Second}
	for i, s := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := client.Dial(ctx, c.clientAddrs(i), opts)
		cancel()
		if err != nil {
			c.t.Fatalf("dial %v: %v", c.clientAddrs(i), err)
		}
		if conn.Node() != s.nodeID {
			conn.Close()
			c.t.Fatalf("dialled %v: connected to node %s, want %s first", c.clientAddrs(i), conn.Node(), s.nodeID)
		}
		l.nodes = append(l.nodes, &nodeLoad{i: i, id: s.nodeID, conn: conn})
	}
	for _, nl := range l.nodes {
		for p := range cfg.producers {
			sess, err := nl.conn.Session(client.AutoAck)
			if err != nil {
				c.t.Fatal(err)
			}
			pr, err := sess.Producer(cfg.queue)
			if err != nil {
				c.t.Fatal(err)
			}
			l.wg.Add(1)
			go l.produce(nl, pr, p)
		}
		for m := range cfg.members {
			if cfg.noConsumersOn[nl.i] {
				break
			}
			mode := client.IndividualAck
			if (nl.i+m)%3 == 2 {
				mode = client.ClientAck
			}
			sess, err := nl.conn.Session(mode)
			if err != nil {
				c.t.Fatal(err)
			}
			member := fmt.Sprintf("%s#%d", cfg.queue, m)
			budget.Add(clusterPrefetch)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			k, err := sess.Consumer(ctx, member, client.WithPrefetch(clusterPrefetch))
			cancel()
			if err != nil {
				c.t.Fatalf("consumer of %s on %s: %v", member, nl.id, err)
			}
			phase := fmt.Sprintf("%s %s@%s", cfg.phase, member, nl.id)
			l.wg.Add(1)
			if mode == client.ClientAck {
				go l.consumeClientAck(nl, k, phase)
			} else {
				go l.consumeIndividual(nl, k, phase)
			}
		}
	}
	return l
}

func (l *load) problem(format string, args ...any) {
	l.mu.Lock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *load) tolerate(format string, args ...any) {
	l.mu.Lock()
	l.tolerated = append(l.tolerated, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// fault marks node i's clients as facing a fault (kill or pause).
func (l *load) fault(i int) { l.nodes[i].faulted.Store(true) }

func (l *load) stopping() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// produce sends until stopped or its bound is reached. A send that fails
// on a node without fault is a problem unless its outcome is unknown (it
// may have reached a host that died); on a faulted node every failure is
// expected, and the producer ends once its connection is gone.
func (l *load) produce(nl *nodeLoad, pr *client.Producer, p int) {
	defer l.wg.Done()
	for n := range l.cfg.sendsPerPro {
		if l.stopping() {
			return
		}
		m := &client.Message{ID: client.NewMessageID(), Body: fmt.Appendf(nil, "%s producer %s/%d message %d", l.cfg.phase, nl.id, p, n)}
		l.h.Sending(m.ID)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := pr.Send(ctx, m)
		cancel()
		l.h.Sent(m.ID, err)
		switch {
		case err == nil:
			nl.sendsOK.Add(1)
			if r.ID != m.ID || r.Duplicate {
				l.problem("%s: producer %d sent %s, receipt %+v", nl.id, p, m.ID, r)
			}
		case nl.faulted.Load():
			nl.sendErrs.Add(1)
			l.tolerate("%s (faulted): send: %v", nl.id, err)
			if errors.Is(err, client.ErrLostServer) {
				return // the connection is gone
			}
			time.Sleep(50 * time.Millisecond)
		case errors.Is(err, client.ErrDeliveryUnknown):
			nl.sendErrs.Add(1)
			l.tolerate("%s: send: %v", nl.id, err)
		default:
			nl.sendErrs.Add(1)
			l.problem("%s: producer %d: send on a front-end without fault: %v", nl.id, p, err)
			time.Sleep(100 * time.Millisecond)
		}
		if l.cfg.sendPause > 0 {
			time.Sleep(l.cfg.sendPause)
		}
	}
}

// ackFailed classifies a failed acknowledgement.
func (l *load) ackFailed(nl *nodeLoad, phase string, err error) {
	nl.ackErrs.Add(1)
	if nl.faulted.Load() {
		l.tolerate("%s (faulted): ack: %v", phase, err)
		return
	}
	// An ack in flight to a host that died may have reached it: lost
	// server is its only honest answer.
	if errors.Is(err, client.ErrLostServer) {
		l.tolerate("%s: ack: %v", phase, err)
		return
	}
	if errors.Is(err, client.ErrUnavailable) && strings.Contains(err.Error(), "outcome unknown") {
		l.ackUnknownUnavailable.Add(1)
		l.tolerate("%s: ack: %v", phase, err)
		return
	}
	l.problem("%s: ack on a front-end without fault: %v", phase, err)
}

// receive takes the next message; it returns nil, false when the consumer
// should end.
func (l *load) receive(nl *nodeLoad, k *client.Consumer, phase string) (*client.Message, bool) {
	m, err := k.ReceiveTimeout(100 * time.Millisecond)
	if err != nil {
		if nl.faulted.Load() {
			l.tolerate("%s (faulted): receive: %v", phase, err)
		} else if !l.stopping() {
			l.problem("%s: receive on a front-end without fault: %v", phase, err)
		}
		return nil, false
	}
	return m, true
}

// consumeIndividual receives with IndividualAck: two of every three
// messages are acknowledged at once, the third is held and acknowledged
// once five more are held, so held deliveries are acknowledged late,
// across the faults. When stopped, every other held message is
// acknowledged (on a node without fault that must succeed: the sessions of
// a live front-end keep their deliveries through a failover) and the rest
// stay held.
func (l *load) consumeIndividual(nl *nodeLoad, k *client.Consumer, phase string) {
	defer l.wg.Done()
	type heldMsg struct {
		m *client.Message
		r *history.Receipt
	}
	var held []heldMsg
	ack := func(m *client.Message, r *history.Receipt) {
		err := nl.timedAck(m)
		l.h.Acked(r, err)
		if err != nil {
			l.ackFailed(nl, phase, err)
		} else {
			nl.acks.Add(1)
		}
	}
	for n := 1; n <= l.cfg.recvPerCons; {
		if l.stopping() {
			break
		}
		m, ok := l.receive(nl, k, phase)
		if !ok {
			return
		}
		if m == nil {
			continue
		}
		r := l.h.Received(phase, m)
		nl.received.Add(1)
		if n%3 != 0 {
			ack(m, r)
		} else {
			held = append(held, heldMsg{m, r})
			if len(held) > 5 {
				old := held[0]
				held = held[1:]
				ack(old.m, old.r)
			}
		}
		n++
	}
	if nl.faulted.Load() || l.cfg.noEndAcks {
		return
	}
	for j, hm := range held {
		if j%2 == 1 {
			continue
		}
		err := nl.timedAck(hm.m)
		l.h.Acked(hm.r, err)
		if err != nil {
			nl.keptAckFailures.Add(1)
			l.problem("%s: a delivery held through the faults could not be acknowledged at the end: %v", phase, err)
		} else {
			nl.keptAcks.Add(1)
		}
	}
}

// consumeClientAck receives with ClientAck and acknowledges every message
// handed out so far after every fourth; up to three stay held at the end.
func (l *load) consumeClientAck(nl *nodeLoad, k *client.Consumer, phase string) {
	defer l.wg.Done()
	var since []*history.Receipt // handed out since the last ack
	for n := 1; n <= l.cfg.recvPerCons; {
		if l.stopping() {
			return
		}
		m, ok := l.receive(nl, k, phase)
		if !ok {
			return
		}
		if m == nil {
			continue
		}
		since = append(since, l.h.Received(phase, m))
		nl.received.Add(1)
		if n%4 == 0 {
			err := nl.timedAck(m)
			for _, r := range since {
				l.h.Acked(r, err)
			}
			since = since[:0]
			if err != nil {
				l.ackFailed(nl, phase, err)
			} else {
				nl.acks.Add(1)
			}
		}
		n++
	}
}

// totals sums the counters over the nodes not faulted (live) and all.
func (l *load) totals() (sendsOK, received int64) {
	for _, nl := range l.nodes {
		sendsOK += nl.sendsOK.Load()
		received += nl.received.Load()
	}
	return
}

// liveTotals sums the counters of the nodes without fault.
func (l *load) liveTotals() (sendsOK, received, acks int64) {
	for _, nl := range l.nodes {
		if nl.faulted.Load() {
			continue
		}
		sendsOK += nl.sendsOK.Load()
		received += nl.received.Load()
		acks += nl.acks.Load()
	}
	return
}

// waitUntil polls cond every 20 ms until it holds, or fails the test
// after d saying what.
func (l *load) waitUntil(d time.Duration, what string, cond func() bool) time.Duration {
	l.c.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			l.finish()
			l.c.t.Fatalf("%s: not within %v (%s)", what, d, l.summary())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// halt stops the clients and waits for them, leaving the connections
// open: what the consumers hold stays theirs.
func (l *load) halt() {
	l.c.t.Helper()
	if l.stopped.Swap(true) {
		return
	}
	close(l.stop)
	waitDone(l.c.t, &l.wg, 60*time.Second, l.cfg.phase+": producers and consumers")
}

// finish halts the clients and closes the connections of nodes without
// fault (their sessions end: what they held returns to pending, marked
// redelivered).
func (l *load) finish() {
	l.c.t.Helper()
	l.halt()
	for _, nl := range l.nodes {
		if nl.conn == nil {
			continue
		}
		if err := nl.conn.Close(); err != nil && !nl.faulted.Load() {
			l.problem("%s: closing the connection: %v", nl.id, err)
		}
		nl.conn = nil
	}
}

func (l *load) summary() string {
	var b strings.Builder
	for _, nl := range l.nodes {
		fmt.Fprintf(&b, "%s(faulted=%v): %d sends ok, %d failed; %d received, %d acks ok, %d failed (longest %v)",
			nl.id, nl.faulted.Load(), nl.sendsOK.Load(), nl.sendErrs.Load(), nl.received.Load(), nl.acks.Load(), nl.ackErrs.Load(),
			time.Duration(nl.maxAck.Load()).Round(time.Millisecond))
		if k, f := nl.keptAcks.Load(), nl.keptAckFailures.Load(); k+f > 0 {
			fmt.Fprintf(&b, ", %d held deliveries acked at the end (%d failed)", k, f)
		}
		b.WriteString("; ")
	}
	if n := l.ackUnknownUnavailable.Load(); n > 0 {
		fmt.Fprintf(&b, "%d acks in flight to a dying host failed with ErrUnavailable; ", n)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// report fails the test with the problems, and logs the tolerated
// failures (a few).
func (l *load) report() {
	l.c.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c.t.Logf("%s: %s", l.cfg.phase, l.summary())
	if n := len(l.tolerated); n > 0 {
		l.c.t.Logf("%s: %d failures explained by the faults, e.g. %s", l.cfg.phase, n, strings.Join(l.tolerated[:min(n, 3)], " | "))
	}
	for i, p := range l.problems {
		if i == 10 {
			l.c.t.Errorf("... and %d more problems", len(l.problems)-i)
			break
		}
		l.c.t.Errorf("%s: %s", l.cfg.phase, p)
	}
}

// --- drain and checks ----------------------------------------------------

// drainCluster receives every message left in every member of queue, with
// one AutoAck consumer of NAME#I per member on live node from, until none
// has come for drainIdle, and then checks that the queue holds nothing.
func (c *processCluster) drainCluster(h *history.History, queue string, members, from int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn, err := client.Dial(ctx, []string{c.nodes[from].addrs.client}, client.Options{RequestTimeout: 10 * time.Second})
	cancel()
	if err != nil {
		c.t.Fatalf("drain: dial %s: %v", c.nodes[from].nodeID, err)
	}
	start := time.Now()
	limit := h.Attempted() + 100
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		errs  errList
	)
	for m := range members {
		sess, err := conn.Session(client.AutoAck)
		if err != nil {
			c.t.Fatal(err)
		}
		member := fmt.Sprintf("%s#%d", queue, m)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		k, err := sess.Consumer(ctx, member)
		cancel()
		if err != nil {
			c.t.Fatalf("drain: consumer of %s: %v", member, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if total.Load() > int64(limit) {
					errs.add(fmt.Errorf("drain: over %d messages, more than were ever sent", limit))
					return
				}
				if time.Since(start) > drainDeadline {
					errs.add(fmt.Errorf("drain: %s still receiving after %v", member, drainDeadline))
					return
				}
				msg, err := k.ReceiveTimeout(drainIdle)
				if err != nil {
					errs.add(fmt.Errorf("drain: %s: %w", member, err))
					return
				}
				if msg == nil {
					return
				}
				h.Received(history.DrainPhase, msg)
				total.Add(1)
			}
		}()
	}
	waitDone(c.t, &wg, drainDeadline+10*time.Second, "drain")
	if err := conn.Close(); err != nil {
		c.t.Errorf("drain: closing the connection: %v", err)
	}
	for _, err := range errs.list() {
		c.t.Error(err)
	}
	c.t.Logf("drain: %d messages from %d members in %v", total.Load(), members, time.Since(start).Round(time.Millisecond))
	var info client.QueueInfo
	if err := c.admin(from, func(ctx context.Context, a *client.Admin) error {
		var err error
		info, err = a.ShowQueue(ctx, queue)
		return err
	}); err != nil {
		c.t.Fatalf("show queue %s: %v", queue, err)
	}
	if info.Pending != 0 || info.Delivered != 0 {
		c.t.Errorf("after the drain queue %s holds %d pending and %d delivered messages, want none (members %+v)", queue, info.Pending, info.Delivered, info.Members)
	}
}

// heldCameBack counts the messages that consumer sessions on front-end
// node (in phases starting with prefix) held unacknowledged when they
// ended, and how many of those were received again, marked redelivered.
func heldCameBack(h *history.History, prefix, node string) (held, back int) {
	for _, m := range h.Messages() {
		for i, r := range m.Receipts {
			if r.Ack != history.AckNone || !strings.HasPrefix(r.Phase, prefix) || !strings.HasSuffix(r.Phase, "@"+node) {
				continue
			}
			held++
			if i+1 < len(m.Receipts) && m.Receipts[i+1].Redelivered {
				back++
			}
		}
	}
	return held, back
}

// checkDeliveryCounts checks that the delivery counts exceed the
// deliveries seen by no more than the deliveries that were never handed to
// the application: those a consumer held in its prefetch buffer when it
// closed or its connection died. That is at most budget (the sum of the
// consumers' prefetch windows) over the whole history. (That no count is
// below the deliveries seen is history.Check's wrong-count.)
func checkDeliveryCounts(t *testing.T, h *history.History, budget int64) {
	t.Helper()
	var excess int64
	var excessV []string
	msgs := h.Messages()
	ids := make([]string, 0, len(msgs))
	for id := range msgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rs := msgs[id].Receipts
		if n := len(rs); n > 0 && rs[n-1].DeliveryCount > n {
			excess += int64(rs[n-1].DeliveryCount - n)
			var seq []string
			for _, r := range rs {
				seq = append(seq, fmt.Sprintf("%s:%d", r.Phase, r.DeliveryCount))
			}
			excessV = append(excessV, fmt.Sprintf("%s: seen %d times [%s]", id, n, strings.Join(seq, ", ")))
		}
	}
	t.Logf("delivery counts: %d deliveries never seen by the application, at most %d possible (the consumers' prefetch windows)", excess, budget)
	if excess > budget {
		t.Errorf("delivery counts exceed the deliveries seen by %d in all, more than the %d the consumers' prefetch windows explain; e.g.:", excess, budget)
		for i, e := range excessV {
			if i == 10 {
				break
			}
			t.Errorf("  %s", e)
		}
	}
}
