package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/cairnmq/cairn/client"
)

// faultNet is the network of an in-process cluster: every connection and
// gossip packet between nodes passes through it, so a test can cut the
// link between any two nodes (Raft, peer RPC and gossip alike) and heal it.
type faultNet struct {
	mu    sync.Mutex
	owner map[string]string // "ip:port" -> node id, for every address a node listens on
	cut   map[[2]string]bool
	conns map[[2]string][]net.Conn
}

func newFaultNet() *faultNet {
	return &faultNet{owner: map[string]string{}, cut: map[[2]string]bool{}, conns: map[[2]string][]net.Conn{}}
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

func (f *faultNet) register(c Config) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, addr := range []string{c.PeerAddr, c.RaftAddr, c.GossipAddr, c.ClientAddr} {
		f.owner[addr] = c.NodeID
	}
}

func (f *faultNet) blocked(from, addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	to, ok := f.owner[addr]
	return ok && f.cut[pair(from, to)]
}

// dialer is node from's way to open connections to other nodes.
func (f *faultNet) dialer(from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if f.blocked(from, addr) {
			return nil, fmt.Errorf("faultnet: link %s -> %s is cut", from, addr)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		if to, ok := f.owner[addr]; ok {
			p := pair(from, to)
			f.conns[p] = append(f.conns[p], c)
		}
		f.mu.Unlock()
		return c, nil
	}
}

// cutLink stops all traffic between nodes a and b, existing connections
// included.
func (f *faultNet) cutLink(a, b string) {
	f.mu.Lock()
	p := pair(a, b)
	f.cut[p] = true
	conns := f.conns[p]
	delete(f.conns, p)
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (f *faultNet) heal(a, b string) {
	f.mu.Lock()
	delete(f.cut, pair(a, b))
	f.mu.Unlock()
}

// gossip wraps node from's memberlist transport so cut links drop packets
// and refuse streams.
func (f *faultNet) gossip(from string) func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
	return func(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
		g := &faultGossip{NodeAwareTransport: t, f: f, from: from, packets: make(chan *memberlist.Packet, 256)}
		go g.filter()
		return g
	}
}

type faultGossip struct {
	memberlist.NodeAwareTransport
	f       *faultNet
	from    string
	packets chan *memberlist.Packet
}

func (g *faultGossip) filter() {
	for p := range g.NodeAwareTransport.PacketCh() {
		if !g.f.blocked(g.from, p.From.String()) {
			g.packets <- p
		}
	}
	close(g.packets)
}

func (g *faultGossip) PacketCh() <-chan *memberlist.Packet { return g.packets }

func (g *faultGossip) WriteTo(b []byte, addr string) (time.Time, error) {
	if g.f.blocked(g.from, addr) {
		return time.Now(), nil
	}
	return g.NodeAwareTransport.WriteTo(b, addr)
}

func (g *faultGossip) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if g.f.blocked(g.from, a.Addr) {
		return time.Now(), nil
	}
	return g.NodeAwareTransport.WriteToAddress(b, a)
}

func (g *faultGossip) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if g.f.blocked(g.from, addr) {
		return nil, errors.New("faultnet: gossip link cut")
	}
	return g.NodeAwareTransport.DialTimeout(addr, timeout)
}

func (g *faultGossip) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if g.f.blocked(g.from, a.Addr) {
		return nil, errors.New("faultnet: gossip link cut")
	}
	return g.NodeAwareTransport.DialAddressTimeout(a, timeout)
}

// testCluster is N nodes in this process on loopback ports, with real gRPC,
// real Raft and real stores in temporary directories.
type testCluster struct {
	t     *testing.T
	net   *faultNet
	cfgs  []Config
	nodes []*Node // nil while a node is stopped
}

// newCluster starts n nodes that form a cluster with --bootstrap-expect n,
// all at the same moment. Each node keeps its ports across restarts.
func newCluster(t *testing.T, n int, opts ...func(*Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, net: newFaultNet(), nodes: make([]*Node, n)}
	var join []string
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		ports := fixedPorts(t)
		cfg := testConfig(t, t.TempDir(), func(c *Config) {
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
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc.nodes[i], errs[i] = Start(tc.cfgs[i])
		}()
	}
	wg.Wait()
	t.Cleanup(tc.stopAll)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	tc.waitReady()
	return tc
}

var (
	portsMu   sync.Mutex
	portsNext = 20000 + int(time.Now().UnixNano()%5000)
)

// fixedPorts picks five free loopback ports below the kernel's ephemeral
// range, so that nothing binding port 0 takes one while its node is down.
func fixedPorts(t *testing.T) []string {
	portsMu.Lock()
	defer portsMu.Unlock()
	var out []string
	for len(out) < 5 {
		if portsNext >= 32000 {
			portsNext = 20000
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

func (tc *testCluster) stopAll() {
	var wg sync.WaitGroup
	for _, nd := range tc.nodes {
		if nd != nil {
			wg.Add(1)
			go func() { defer wg.Done(); nd.Stop() }()
		}
	}
	wg.Wait()
}

// waitReady waits until every running node is ready.
func (tc *testCluster) waitReady() {
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

// node returns the running node with id.
func (tc *testCluster) node(id string) *Node {
	for _, nd := range tc.nodes {
		if nd != nil && nd.ID() == id {
			return nd
		}
	}
	tc.t.Fatalf("node %s is not running", id)
	return nil
}

func (tc *testCluster) index(id string) int {
	for i, c := range tc.cfgs {
		if c.NodeID == id {
			return i
		}
	}
	tc.t.Fatalf("no node %s", id)
	return -1
}

// stop stops a node gracefully (its data stays).
func (tc *testCluster) stop(id string) {
	i := tc.index(id)
	nd := tc.nodes[i]
	tc.nodes[i] = nil
	nd.Stop()
}

// crash stops a node as a kill would, as far as the others can tell: no
// leadership handed over, no session released, no goodbye (its data stays).
func (tc *testCluster) crash(id string) {
	i := tc.index(id)
	nd := tc.nodes[i]
	tc.nodes[i] = nil
	nd.Crash()
}

// start starts a stopped node again with its data, and waits until it is
// ready.
func (tc *testCluster) start(id string) *Node {
	tc.t.Helper()
	i := tc.index(id)
	nd, err := Start(tc.cfgs[i])
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.nodes[i] = nd
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nd.WaitReady(ctx); err != nil {
		tc.t.Fatal(err)
	}
	return nd
}

// isolate cuts every link of node id.
func (tc *testCluster) isolate(id string) {
	for _, c := range tc.cfgs {
		if c.NodeID != id {
			tc.net.cutLink(id, c.NodeID)
		}
	}
}

// rejoin heals every link of node id.
func (tc *testCluster) rejoin(id string) {
	for _, c := range tc.cfgs {
		if c.NodeID != id {
			tc.net.heal(id, c.NodeID)
		}
	}
}

// hostOf is the node that hosts a member, as that node sees itself.
func (tc *testCluster) hostOf(name string) string {
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

// waitHost waits until some running node hosts the member and returns it.
func (tc *testCluster) waitHost(name string) string {
	tc.t.Helper()
	var h string
	eventually(tc.t, "a host for "+name, func() bool { h = tc.hostOf(name); return h != "" })
	return h
}

func (tc *testCluster) dial(id string, opts ...func(*client.Options)) *client.Connection {
	return dial(tc.t, tc.node(id), opts...)
}

func (tc *testCluster) admin(id string) *client.Admin {
	return admin(tc.t, tc.node(id))
}
