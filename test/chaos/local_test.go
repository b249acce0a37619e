package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/test/wait"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// localCluster is three `cairn server` processes on this machine. Node i
// listens on 127.0.1.(i+1) and advertises 127.0.0.(i+1), where a toxiproxy
// in front of each of its client, peer, Raft and HTTP ports forwards to the
// listener: every other node and every client reaches it through its
// proxies, so cutting them cuts the node off. Gossip (UDP and TCP, which
// toxiproxy does not carry) listens on the advertised address itself: a cut
// node stays alive to gossip, the case `cluster status` shows as suspect.
//
// An isolation cuts what reaches the node, both ways on those connections.
// Connections the isolated node opens itself go through the other nodes'
// proxies, which every node shares, and stay up: a Raft leader there keeps
// sending. That is an asymmetric partition (the compose target has the
// symmetric one); it is the harder case for a leader that cannot hear back
// from clients and from the followers that dial it.
type localCluster struct {
	t     *testing.T
	nodes [3]*localNode
	join  string
}

type localNode struct {
	id      string
	dir     string
	logPath string
	listen  string // 127.0.1.x: the listeners
	adv     string // 127.0.0.x: the proxies and gossip
	ports   map[string]int
	proxies []*toxiproxy.Proxy
	cmd     *exec.Cmd
	done    chan struct{}
}

// proxiedAddrs are the listeners that get a proxy in front.
var proxiedAddrs = []string{"client", "peer", "raft", "http"}

func newLocalCluster(t *testing.T) *localCluster {
	t.Helper()
	c := &localCluster{t: t}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var gossip []string
	for i := range c.nodes {
		n := &localNode{
			id:     fmt.Sprintf("cairn-%d", i),
			dir:    t.TempDir(),
			listen: fmt.Sprintf("127.0.1.%d", i+1),
			adv:    fmt.Sprintf("127.0.0.%d", i+1),
		}
		n.logPath = filepath.Join(n.dir, "server.log")
		if dir := keptDir(); dir != "" {
			n.logPath = filepath.Join(dir, n.id+".log") // outlives the run
		}
		// A port reserved and let go was once bound by something else
		// before the proxy bound it: the node's ports are picked again.
		for attempt := 1; ; attempt++ {
			n.ports = reservePorts(t, append(proxiedAddrs, "gossip"), n.listen, n.adv)
			err := n.startProxies(srv)
			if err == nil {
				break
			}
			for _, p := range n.proxies {
				p.Stop()
			}
			n.proxies = nil
			if attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatal(err)
			}
			t.Logf("%v; picking %s's ports again", err, n.id)
		}
		t.Cleanup(func() {
			for _, p := range n.proxies {
				p.Stop()
			}
		})
		gossip = append(gossip, n.addr(n.adv, "gossip"))
		c.nodes[i] = n
	}
	c.join = strings.Join(gossip, ",")
	t.Cleanup(c.stopAll)
	for i := range c.nodes {
		c.startNoWait(i)
	}
	c.waitReady()
	return c
}

// startProxies starts a proxy in front of each of the node's proxied
// listeners.
func (n *localNode) startProxies(srv *toxiproxy.ApiServer) error {
	for _, a := range proxiedAddrs {
		p := toxiproxy.NewProxy(srv, n.id+"-"+a, n.addr(n.adv, a), n.addr(n.listen, a))
		if err := p.Start(); err != nil {
			return fmt.Errorf("toxiproxy in front of %s's %s address: %w", n.id, a, err)
		}
		n.proxies = append(n.proxies, p)
	}
	return nil
}

func (n *localNode) addr(host, what string) string {
	return net.JoinHostPort(host, fmt.Sprint(n.ports[what]))
}

// reservePorts gives each name a port free on every one of hosts, and no
// two names the same one. The proxies bind on the advertised host the port
// numbers the node binds on its listen host, so a port must be free on both;
// and each is held until all are picked, because a port let go at once may
// be handed out again (a node once got one port for its client and its HTTP
// proxies: "address already in use"). They are let go when this returns;
// the node and its proxies bind them a moment later.
func reservePorts(t *testing.T, names []string, hosts ...string) map[string]int {
	t.Helper()
	ports := make(map[string]int, len(names))
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for _, name := range names {
		for attempt := 0; ; attempt++ {
			if attempt == 100 {
				t.Fatalf("no port free on all of %v after 100 tries (is all of 127.0.0.0/8 on the loopback device?)", hosts)
			}
			// Below Linux's ephemeral range (32768 up), which a port the
			// kernel picks for anything else on the machine comes from:
			// one picked there and let go was once taken by another
			// process before a proxy bound it ("address already in use").
			port := 20000 + rand.IntN(12000)
			first, err := net.Listen("tcp", net.JoinHostPort(hosts[0], fmt.Sprint(port)))
			if err != nil {
				continue
			}
			taken := []net.Listener{first}
			for _, h := range hosts[1:] {
				ln, err := net.Listen("tcp", net.JoinHostPort(h, fmt.Sprint(port)))
				if err != nil {
					break
				}
				taken = append(taken, ln)
			}
			held = append(held, taken...)
			if len(taken) == len(hosts) {
				ports[name] = port
				break
			}
		}
	}
	return ports
}

// logStore is the nodes' --log-store: CAIRN_CHAOS_LOG_STORE, or the
// server's default (wal for a new data directory).
func logStore() string { return os.Getenv("CAIRN_CHAOS_LOG_STORE") }

// bodyMemory is the nodes' --body-memory-mib: CAIRN_CHAOS_BODY_MEMORY_MIB,
// default 0, so that every waiting body goes through the member's body files
// while nodes die (the compose suite runs the nodes' default).
func bodyMemory() string {
	if v := os.Getenv("CAIRN_CHAOS_BODY_MEMORY_MIB"); v != "" {
		return v
	}
	return "0"
}

func (c *localCluster) running(i int) bool {
	n := c.nodes[i]
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

func (c *localCluster) startNoWait(i int) {
	t, n := c.t, c.nodes[i]
	if c.running(i) {
		return
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(cairnBin, "server", "--node-id", n.id, "--data-dir", n.dir,
		"--bootstrap-expect", "3", "--join", c.join, "--advertise", n.adv,
		"--client-addr", n.addr(n.listen, "client"), "--peer-addr", n.addr(n.listen, "peer"),
		"--raft-addr", n.addr(n.listen, "raft"), "--http-addr", n.addr(n.listen, "http"),
		"--gossip-addr", n.addr(n.adv, "gossip"), "--log-store", logStore(), "--body-memory-mib", bodyMemory(), "--auto-create")
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", n.id, err)
	}
	n.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}(n.cmd, n.done)
}

// waitReady waits until every node answers /readyz with 200, asked on
// its own listener so a cut proxy does not hide a ready node.
func (c *localCluster) waitReady() {
	c.t.Helper()
	hc := &http.Client{Timeout: time.Second}
	for i, n := range c.nodes {
		wait.For(c.t, 90*time.Second, n.id+" ready", func() bool {
			if !c.running(i) {
				c.t.Fatalf("%s exited: %s", n.id, lastLines(c.log(i), 20))
			}
			resp, err := hc.Get("http://" + n.addr(n.listen, "http") + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
}

func (c *localCluster) log(i int) string {
	b, _ := os.ReadFile(c.nodes[i].logPath)
	return string(b)
}

func (c *localCluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	if !c.running(i) {
		c.t.Fatalf("%v to %s: it is not running", sig, c.nodes[i].id)
	}
	if err := c.nodes[i].cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("%v to %s: %v", sig, c.nodes[i].id, err)
	}
}

// stop sends sig and waits for the exit; SIGKILL after grace.
func (c *localCluster) stop(i int, sig syscall.Signal, grace time.Duration) {
	if !c.running(i) {
		return
	}
	n := c.nodes[i]
	_ = n.cmd.Process.Signal(syscall.SIGCONT)
	_ = n.cmd.Process.Signal(sig)
	select {
	case <-n.done:
		return
	case <-time.After(grace):
	}
	c.t.Logf("%s still running %v after %v: SIGKILL", n.id, grace, sig)
	_ = n.cmd.Process.Kill()
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		c.t.Errorf("%s still running 10 s after SIGKILL", n.id)
	}
}

func (c *localCluster) stopAll() {
	for i := range c.nodes {
		c.stop(i, syscall.SIGTERM, 10*time.Second)
	}
}

// credentials: the local processes run open, as make run's do.
func (c *localCluster) credentials(*testing.T) ([]string, client.Options) {
	return nil, client.Options{}
}

func (c *localCluster) clientAddrs() string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr(n.adv, "client"))
	}
	return strings.Join(out, ",")
}

func (c *localCluster) describe(i int) string { return "local process " + c.nodes[i].id }

func (c *localCluster) kill(t *testing.T, i int)  { c.stop(i, syscall.SIGKILL, 10*time.Second) }
func (c *localCluster) start(t *testing.T, i int) { c.startNoWait(i) }

// startEmpty empties the node's data directory (but for its log) first.
func (c *localCluster) startEmpty(t *testing.T, i int) {
	n := c.nodes[i]
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if p := filepath.Join(n.dir, e.Name()); p != n.logPath {
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.startNoWait(i)
}
func (c *localCluster) pause(t *testing.T, i int) { c.signal(i, syscall.SIGSTOP) }
func (c *localCluster) resume(t *testing.T, i int) {
	c.signal(i, syscall.SIGCONT)
}

// isolate holds every byte through node i's proxies, both ways, without
// closing a connection, as a partition does to TCP: what was sent arrives
// after the heal (holdToxic), unless a keepalive gave up on the connection
// first. (A timeout toxic would drop bytes from the middle of a stream,
// which TCP never does, and corrupt every connection it held.)
func (c *localCluster) isolate(t *testing.T, i int) {
	t.Helper()
	for _, p := range c.nodes[i].proxies {
		for _, dir := range []string{"upstream", "downstream"} {
			spec := fmt.Sprintf(`{"name":"cut-%s","type":"hold","stream":"%s"}`, dir, dir)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
				t.Fatalf("cut %s: %v", p.Name, err)
			}
		}
	}
}

// reconnect lifts the cut, on each proxy at once, so that one slow proxy
// does not keep the node's others cut. A slow one is logged: a live link
// takes what was held at once, a dead one is dropped after holdPatience.
func (c *localCluster) reconnect(t *testing.T, i int) {
	var wg sync.WaitGroup
	for _, p := range c.nodes[i].proxies {
		wg.Go(func() {
			start := time.Now()
			p.Toxics.ResetToxics(context.Background())
			if took := time.Since(start); took > time.Second {
				t.Logf("nemesis: lifting the cut on %s took %v", p.Name, took.Round(time.Millisecond))
			}
		})
	}
	wg.Wait()
}

func (c *localCluster) restart(t *testing.T, i int) {
	c.stop(i, syscall.SIGTERM, 30*time.Second)
	c.startNoWait(i)
	c.waitReady()
}

func (c *localCluster) restartAll(t *testing.T) {
	// All at once, as a power cut's restart; stopAll then waits for each.
	for i := range c.nodes {
		_ = c.nodes[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	c.stopAll()
	for i := range c.nodes {
		c.startNoWait(i)
	}
	c.waitReady()
}

func (c *localCluster) heal(t *testing.T) {
	for i, n := range c.nodes {
		c.reconnect(t, i)
		if c.running(i) {
			_ = n.cmd.Process.Signal(syscall.SIGCONT)
		} else {
			c.startNoWait(i)
		}
	}
	c.waitReady()
}

func (c *localCluster) lastWords(t *testing.T) {
	for i, n := range c.nodes {
		t.Logf("last lines of %s:\n%s", n.id, lastLines(c.log(i), 40))
	}
}

// Every scenario against three local processes.
func TestChaos_Local(t *testing.T) {
	t.Parallel() // beside TestChaos_Compose: see runScenarios
	if !enabled() {
		t.Skip("the chaos suite runs with CAIRN_CHAOS=1 (make chaos)")
	}
	runScenarios(t, newLocalCluster(t))
}
