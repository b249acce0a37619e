package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/raftgroup"
	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// CutLink cuts the link between nodes a and b: Raft, peer calls and
// gossip alike, both ways; Heal mends it.
func (tc *TestCluster) CutLink(a, b string) { tc.net.cutLink(a, b) }

// Heal mends the link between a and b that CutLink cut.
func (tc *TestCluster) Heal(a, b string) { tc.net.heal(a, b) }

// TestCluster is N nodes in this process on loopback ports, with real
// gRPC, real Raft and real stores in temporary directories, on a network
// a test can cut (CutLink, Isolate). It is the in-process harness of
// every test that needs a cluster, in this package or another, as
// hashicorp/raft ships its own (testing.go).
type TestCluster struct {
	t     *testing.T
	net   *faultNet
	cfgs  []Config
	nodes []*Node // nil while a node is stopped
}

// PlanTestCluster configures n nodes with --bootstrap-expect n, each joining
// all, on a fault-injecting network, and starts none of them.
func PlanTestCluster(t *testing.T, n int, opts ...func(*Config)) *TestCluster {
	t.Helper()
	tc := &TestCluster{t: t, net: newFaultNet(), nodes: make([]*Node, n)}
	var join []string
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		ports := fixedPorts(t)
		cfg := TestConfig(t, t.TempDir(), func(c *Config) {
			c.NodeID = id
			c.BootstrapExpect = n
			c.ClientAddr, c.PeerAddr, c.RaftAddr, c.GossipAddr, c.HTTPAddr = ports[0], ports[1], ports[2], ports[3], ports[4]
			c.Dial = tc.net.dialer(id)
			c.GossipTransport = tc.net.gossip(id)
		})
		for _, o := range opts {
			o(&cfg)
		}
		join = append(join, cfg.GossipAddr)
		tc.cfgs = append(tc.cfgs, cfg)
		tc.net.register(cfg)
	}
	for i := range tc.cfgs {
		tc.cfgs[i].Join = join
	}
	t.Cleanup(tc.stopAll)
	return tc
}

// The harness's ports: [portsLow, portsHigh), below the kernel's
// ephemeral range so that nothing binding port 0 takes one while its node
// is down, and below test/'s range (test/server_test.go takes 26000 up),
// whose processes run beside this package's under make test.
const portsLow, portsHigh = 20000, 26000

var (
	portsMu   sync.Mutex
	portsNext = portsLow + int(time.Now().UnixNano()%(portsHigh-portsLow))
)

// fixedPorts picks five free loopback ports in the harness's range.
func fixedPorts(t *testing.T) []string {
	portsMu.Lock()
	defer portsMu.Unlock()
	var out []string
	for len(out) < 5 {
		if portsNext >= portsHigh {
			portsNext = portsLow
		}
		addr := fmt.Sprintf("127.0.0.1:%d", portsNext)
		portsNext++
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			ln.Close()
			continue
		}
		ln.Close()
		pc.Close()
		out = append(out, addr)
	}
	return out
}

func (tc *TestCluster) stopAll() {
	var wg sync.WaitGroup
	for _, nd := range tc.nodes {
		if nd != nil {
			wg.Add(1)
			go func() { defer wg.Done(); nd.Stop() }()
		}
	}
	wg.Wait()
}

// WaitReady waits until every running node is ready.
func (tc *TestCluster) WaitReady() {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, nd := range tc.nodes {
		if nd == nil {
			continue
		}
		if err := nd.WaitReady(ctx); err != nil {
			tc.t.Fatal(err)
		}
	}
}

// Node returns the running node with id.
func (tc *TestCluster) Node(id string) *Node {
	for _, nd := range tc.nodes {
		if nd != nil && nd.ID() == id {
			return nd
		}
	}
	tc.t.Fatalf("node %s is not running", id)
	return nil
}

func (tc *TestCluster) index(id string) int {
	for i, c := range tc.cfgs {
		if c.NodeID == id {
			return i
		}
	}
	tc.t.Fatalf("no node %s", id)
	return -1
}

// Start starts a stopped node again with its data, and waits until it is
// ready.
func (tc *TestCluster) Start(id string) *Node {
	tc.t.Helper()
	nd := tc.launch(id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nd.WaitReady(ctx); err != nil {
		tc.t.Fatal(err)
	}
	return nd
}

// Isolate cuts every link of node id.
func (tc *TestCluster) Isolate(id string) {
	for _, c := range tc.cfgs {
		if c.NodeID != id {
			tc.CutLink(id, c.NodeID)
		}
	}
}

// Rejoin heals every link of node id.
func (tc *TestCluster) Rejoin(id string) {
	for _, c := range tc.cfgs {
		if c.NodeID != id {
			tc.Heal(id, c.NodeID)
		}
	}
}

// HostOf is the node that hosts a member, as that node sees itself.
func (tc *TestCluster) HostOf(name string) string {
	for _, nd := range tc.nodes {
		if nd == nil {
			continue
		}
		if r, ok := nd.groups.replica(name); ok && r.Leading() {
			return nd.ID()
		}
	}
	return ""
}

// WaitHost waits until some running node hosts the member and returns it.
// Right after a member is created its first host may hand it to its
// preferred host a moment later: a test that picks nodes by their role
// waits with waitSpread instead.
func (tc *TestCluster) WaitHost(name string) string {
	tc.t.Helper()
	var h string
	wait.For(tc.t, 10*time.Second, "a host for "+name, func() bool { h = tc.HostOf(name); return h != "" })
	return h
}

// Helpers of the multi-node tests (multinode_*_test.go).

// IDs lists the cluster's node ids, running or not.
func (tc *TestCluster) IDs() []string {
	out := make([]string, len(tc.cfgs))
	for i, c := range tc.cfgs {
		out[i] = c.NodeID
	}
	return out
}

// Others lists the node ids other than the given ones.
func (tc *TestCluster) Others(not ...string) []string {
	var out []string
	for _, id := range tc.IDs() {
		if !slices.Contains(not, id) {
			out = append(out, id)
		}
	}
	return out
}

// MetaLeader is the running node that leads the meta group, as it sees
// itself ("" during an election).
func (tc *TestCluster) MetaLeader() string {
	for _, nd := range tc.nodes {
		if nd != nil && nd.meta.Raft().State() == raft.Leader {
			return nd.ID()
		}
	}
	return ""
}

// WaitSpread waits until each of a destination's members is hosted by its
// preferred host (its first replica), each on a different node, and
// returns the hosts by member index: after that no leadership moves by
// itself.
func (tc *TestCluster) WaitSpread(dest string, members int) []string {
	tc.t.Helper()
	hosts := make([]string, members)
	wait.For(tc.t, 20*time.Second, "the members of "+dest+" hosted one per node by their preferred hosts", func() bool {
		var d *fsmpb.Destination
		for _, nd := range tc.nodes {
			if nd != nil {
				d, _ = nd.meta.Destination(dest)
				break
			}
		}
		if d == nil || len(d.Members) != members {
			return false
		}
		seen := map[string]bool{}
		for i := range members {
			hosts[i] = tc.HostOf(fmt.Sprintf("%s#%d", dest, i))
			if hosts[i] == "" || seen[hosts[i]] || hosts[i] != d.Members[i].Replicas[0] {
				return false
			}
			seen[hosts[i]] = true
		}
		return true
	})
	return hosts
}

// StartAll starts every stopped node at once, and waits until all are
// ready: after a full stop no node can be ready (its meta group has no
// leader) until a majority is back, so they cannot be started one by one.
func (tc *TestCluster) StartAll() {
	tc.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(tc.nodes))
	for i, nd := range tc.nodes {
		if nd != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc.nodes[i], errs[i] = Start(tc.cfgs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			tc.t.Fatalf("starting %s: %v", tc.cfgs[i].NodeID, err)
		}
	}
	tc.WaitReady()
}

// launch starts a stopped node again with its data, without waiting until
// it is ready.
func (tc *TestCluster) launch(id string) *Node {
	tc.t.Helper()
	i := tc.index(id)
	nd, err := Start(tc.cfgs[i])
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.nodes[i] = nd
	return nd
}

// AddNode starts a new node that joins the running cluster as an operator
// would add one: a fresh data directory, BootstrapExpect 0, Join listing
// the others' gossip addresses, on the cluster's fault-injecting network.
// It waits until the node is ready (registered and serving).
func (tc *TestCluster) AddNode(opts ...func(*Config)) *Node {
	tc.t.Helper()
	id := fmt.Sprintf("n%d", len(tc.cfgs)+1)
	var join []string
	for _, c := range tc.cfgs {
		join = append(join, c.GossipAddr)
	}
	ports := fixedPorts(tc.t)
	cfg := TestConfig(tc.t, tc.t.TempDir(), func(c *Config) {
		c.NodeID = id
		c.BootstrapExpect = 0
		c.ClientAddr, c.PeerAddr, c.RaftAddr, c.GossipAddr, c.HTTPAddr = ports[0], ports[1], ports[2], ports[3], ports[4]
		c.Dial = tc.net.dialer(id)
		c.GossipTransport = tc.net.gossip(id)
		c.Join = join
	})
	for _, o := range opts {
		o(&cfg)
	}
	tc.net.register(cfg)
	tc.cfgs = append(tc.cfgs, cfg)
	tc.nodes = append(tc.nodes, nil)
	nd, err := Start(cfg)
	if err != nil {
		tc.t.Fatalf("starting %s: %v", id, err)
	}
	tc.nodes[len(tc.nodes)-1] = nd
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nd.WaitReady(ctx); err != nil {
		tc.t.Fatal(err)
	}
	return nd
}

// withLogs sends the nodes' logs to the test log when CAIRN_TEST_LOGS is
// set (CAIRN_TEST_LOGS=debug: debug lines too), for debugging a failing
// multi-node test.
func withLogs(t *testing.T) func(*Config) {
	return func(c *Config) {
		level := slog.LevelInfo
		switch os.Getenv("CAIRN_TEST_LOGS") {
		case "":
			return
		case "debug":
			level = slog.LevelDebug
		}
		c.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// NewTestCluster starts n nodes that form a cluster with
// --bootstrap-expect n, all at the same moment (PlanTestCluster, then
// StartAll), each keeping its ports across restarts. Its nodes are stopped at the end within a bound: a stop that
// hangs fails the test.
func NewTestCluster(t *testing.T, n int, opts ...func(*Config)) *TestCluster {
	t.Helper()
	tc := PlanTestCluster(t, n, append([]func(*Config){withLogs(t)}, opts...)...)
	tc.StartAll()
	// Registered after PlanTestCluster's, so it runs first and leaves nothing
	// for stopAll.
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for i, nd := range tc.nodes {
			if nd == nil {
				continue
			}
			tc.nodes[i] = nil
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !haltNode(nd, true, 20*time.Second) {
					t.Errorf("stopping %s did not finish within 20 s; where stops wait:\n%s", nd.ID(), stopStacks())
				}
			}()
		}
		wg.Wait()
	})
	return tc
}

// stopStacks are the goroutines of the process that are stopping a node
// or a Raft group: where a stop that hangs waits.
func stopStacks() string {
	buf := make([]byte, 64<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "cluster.(*Node).halt") || strings.Contains(g, "raft.(*Raft).Shutdown") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// haltNode stops (graceful) or crashes a node and reports whether it
// finished within d: a stop that hangs is a bug (Raft.Shutdown waiting on
// a parked replication goroutine was one) that would otherwise hang the
// whole package.
func haltNode(nd *Node, graceful bool, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if graceful {
			nd.Stop()
		} else {
			nd.Crash()
		}
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Crash stops a node as a kill would, as far as the others can tell: no
// leadership handed over, no session released, no goodbye (its data
// stays). A crash that does not finish within 20 s fails the test.
func (tc *TestCluster) Crash(id string) {
	tc.t.Helper()
	tc.Halt(id, false)
}

// Stop stops a node gracefully (its data stays), bounded as crash.
func (tc *TestCluster) Stop(id string) {
	tc.t.Helper()
	tc.Halt(id, true)
}

// Halt stops node id, gracefully or as a crash, failing the test if it
// does not finish within 20 s.
func (tc *TestCluster) Halt(id string, graceful bool) {
	tc.t.Helper()
	i := tc.index(id)
	nd := tc.nodes[i]
	tc.nodes[i] = nil
	if !haltNode(nd, graceful, 20*time.Second) {
		tc.t.Fatalf("stopping %s did not finish within 20 s; where stops wait:\n%s", id, stopStacks())
	}
}

// fastTiming makes elections quicker than a production node's, yet leaves a
// leader 300 ms to hear from a majority and followers learning commits
// every 100 ms: with 150 ms and 5 ms, tests running side by side under
// -race on two cores stepped down now and then on their own (an ack then
// failed as "leadership lost"), and an idle three-node cluster took 19 % of
// a core (7 % with these).
var fastTiming = raftgroup.Timing{Heartbeat: 400 * time.Millisecond, Election: 400 * time.Millisecond, LeaderLease: 300 * time.Millisecond, Commit: 100 * time.Millisecond}

// TestConfig is a single durable node on loopback ports in dir.
func TestConfig(t *testing.T, dir string, opts ...func(*Config)) Config {
	cfg := Config{
		NodeID: "n1", DataDir: dir, BootstrapExpect: 1,
		ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
		GossipAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Timing: fastTiming, ExpiryInterval: 20 * time.Millisecond, SnapshotInterval: 100 * time.Millisecond,
		AutoCreate: true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.OnFatal == nil {
		// As a node's: the process stops, here the test binary, saying
		// which test and why (a node's logs are off in tests).
		id, name := cfg.NodeID, t.Name()
		cfg.OnFatal = func(err error) {
			fmt.Fprintf(os.Stderr, "FATAL in %s: node %s stopped the process: %v\n", name, id, err)
			os.Exit(70)
		}
	}
	return cfg
}
