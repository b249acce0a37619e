package cluster

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// nodeMeta is what a node gossips about itself: the run it is (boot) and
// where to reach it. It must stay under memberlist's 512-byte limit.
type nodeMeta struct {
	Boot   string `json:"b"`
	Client string `json:"c"`
	Peer   string `json:"p"`
	Raft   string `json:"r"`
	HTTP   string `json:"h"`
	// Leaving is set by a node handing its leaderships away before it stops.
	Leaving bool `json:"l,omitempty"`
	// CatchingUp is set while the node's meta replica or a member replica
	// on it is not open yet or has not applied its log (Node.catchingUp),
	// so that no leadership is handed to it
	// meanwhile (cluster/DESIGN.md, "Preferred hosts"). A node of an
	// earlier version never sets it, and is handed leaderships as before.
	CatchingUp bool `json:"u,omitempty"`
	// Incarnation names the node's data directory (claimIncarnation).
	Incarnation string `json:"i,omitempty"`
	// Serving is set while the node is ready (Node.Ready): it is in a
	// formed cluster, which a node back empty joins rather than forming one.
	Serving bool `json:"s,omitempty"`
}

// gossip is the node's membership: memberlist's view of which nodes are
// alive. It is a hint for routing and for releasing the sessions of dead
// front-ends, never a decision to change a Raft configuration.
type gossip struct {
	n      *Node
	ml     *memberlist.Memberlist
	metaMu sync.Mutex
	meta   []byte
	// metaChanged wakes broadcastLoop.
	metaChanged chan struct{}

	// nodes is gossip's view, copied from memberlist's events as they
	// happen: the nodes memberlist hands out are its own, which it keeps
	// changing, so they are never read outside its callbacks.
	mu    sync.Mutex
	nodes map[string]gossipMember
	stop  chan struct{}
	done  chan struct{}
}

func privateIP() (string, error) {
	ip, err := sockaddr.GetPrivateIP()
	if err != nil {
		return "", fmt.Errorf("finding this machine's private IP to advertise: %w (set --advertise)", err)
	}
	if ip == "" {
		return "127.0.0.1", nil
	}
	return ip, nil
}

func startGossip(n *Node, advertiseHost string) (*gossip, error) {
	g := &gossip{n: n, nodes: make(map[string]gossipMember), stop: make(chan struct{}), done: make(chan struct{}), metaChanged: make(chan struct{}, 1)}
	meta, err := json.Marshal(nodeMeta{Boot: n.boot, Client: n.addrs.Client, Peer: n.addrs.Peer, Raft: n.addrs.Raft, HTTP: n.addrs.HTTP, CatchingUp: true, Incarnation: n.incarnation})
	if err != nil {
		return nil, err
	}
	if len(meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: node addresses too long to gossip (%d bytes, at most %d)", ErrConfig, len(meta), memberlist.MetaMaxSize)
	}
	g.meta = meta

	host, portStr, err := net.SplitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("--gossip-addr %q: %w", n.cfg.GossipAddr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--gossip-addr %q: bad port", n.cfg.GossipAddr)
	}
	advIP, err := resolveIP(advertiseHost)
	if err != nil {
		return nil, err
	}
	conf := memberlist.DefaultLANConfig()
	conf.Name = n.cfg.NodeID
	if host == "" {
		host = "0.0.0.0"
	}
	conf.BindAddr, conf.BindPort = host, port
	conf.AdvertiseAddr, conf.AdvertisePort = advIP, port
	conf.Delegate = g
	conf.Events = g
	conf.SecretKey = n.cfg.GossipKey
	if len(n.cfg.OldGossipKeys) > 0 {
		// Encrypt with the current key; read with it and the old ones.
		if conf.Keyring, err = memberlist.NewKeyring(n.cfg.OldGossipKeys, n.cfg.GossipKey); err != nil {
			return nil, fmt.Errorf("%w: gossip keys: %v", ErrConfig, err)
		}
	}
	if wrap := n.cfg.GossipTransport; wrap != nil || n.tls != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: conf.Logger})
		if err != nil {
			return nil, fmt.Errorf("--gossip-addr %s: %w", n.cfg.GossipAddr, err)
		}
		var t memberlist.NodeAwareTransport = nt
		if n.tls != nil {
			t = newTLSGossip(t, n.tls)
		}
		if wrap != nil {
			t = wrap(t)
		}
		conf.Transport = t
		conf.AdvertisePort = nt.GetAutoBindPort()
	}
	conf.Logger = slog.NewLogLogger(n.log.With("lib", "memberlist").Handler(), slog.LevelDebug)
	tuneGossip(conf)
	ml, err := memberlist.Create(conf)
	if err != nil {
		return nil, fmt.Errorf("--gossip-addr %s: %w", n.cfg.GossipAddr, err)
	}
	g.ml = ml
	go g.joinLoop(n.cfg.Join)
	go g.reconnectLoop()
	go g.broadcastLoop()
	return g, nil
}

// tuneGossip sets failure detection for a LAN: a node is probed every
// second with a 500 ms timeout; one that fails a probe (and the indirect
// probes through other nodes) is suspected, and declared dead when it has
// not refuted the suspicion within SuspicionMult x max(1, log10(nodes)) x
// ProbeInterval = 3 s (up to 10 nodes). SuspicionMaxTimeoutMult 1 keeps that
// timeout fixed: memberlist would otherwise start it 4 times longer and
// shorten it only as other nodes confirm the suspicion, which a 3-node
// cluster has too few nodes to do. A killed node is therefore dead in about
// 5 s (up to 1 s to the next probe, 1 s of probes, 3 s), and a node paused
// for 2 s hears the suspicion as it resumes and refutes it in time.
// memberlist's awareness stretches the timeouts of a node whose own probes
// fail, as they do on an overloaded machine.
func tuneGossip(conf *memberlist.Config) {
	conf.ProbeInterval = time.Second
	conf.ProbeTimeout = 500 * time.Millisecond
	conf.SuspicionMult = 3
	conf.SuspicionMaxTimeoutMult = 1
	conf.GossipInterval = 200 * time.Millisecond
}

func resolveIP(host string) (string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("--advertise %q does not resolve to an IP: %v", host, err)
	}
	return ips[0].String(), nil
}

// joinLoop joins the listed nodes (addresses or DNS names, resolved again on
// every try), retrying until this node knows as many nodes as it needs: the
// --bootstrap-expect count for a new node, or one other node. Stopping at the first answer
// would not do: in a StatefulSet the first pod may resolve only its own name
// and "join" itself, and two pods doing so would stay apart.
func (g *gossip) joinLoop(addrs []string) {
	defer close(g.done)
	if len(addrs) == 0 {
		return
	}
	want := 2
	if !g.n.hadState {
		want = max(g.n.cfg.BootstrapExpect, 2)
	}
	for attempt := 0; ; attempt++ {
		_, err := g.ml.Join(addrs)
		if known := g.ml.NumMembers(); known >= want {
			g.n.log.Info("joined the gossip pool", "nodes", known)
			return
		}
		if attempt%10 == 0 {
			g.n.log.Info("waiting for the other nodes to join", "join", addrs, "known", g.ml.NumMembers(), "want", want, "err", err)
		}
		select {
		case <-g.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// reconnectInterval is how often this node tries to reach the nodes it
// holds dead.
const reconnectInterval = 5 * time.Second

// reconnectLoop tries, every few seconds, to join again the nodes gossip
// holds dead. memberlist stops talking to a dead node after a while, so two
// sides of a partition that lasted longer than failure detection would
// otherwise never find each other again when it heals (Serf does the same).
func (g *gossip) reconnectLoop() {
	t := time.NewTicker(reconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		var dead []string
		g.mu.Lock()
		for _, m := range g.nodes {
			if m.State == "dead" {
				dead = append(dead, m.Addr)
			}
		}
		g.mu.Unlock()
		if len(dead) > 0 {
			if n, err := g.ml.Join(dead); err == nil && n > 0 {
				g.n.log.Info("reached nodes held dead again", "nodes", n)
			}
		}
	}
}

func (g *gossip) addr() string {
	a := g.ml.LocalNode()
	return net.JoinHostPort(a.Addr.String(), strconv.Itoa(int(a.Port)))
}

// member is a gossip member as the status shows it.
type gossipMember struct {
	ID    string
	State string
	Meta  nodeMeta
	Addr  string
}

// members lists every node gossip knows of, with its state: alive, dead
// (failed), or left (said goodbye). memberlist tells no event when it
// suspects a node, so a suspected node shows alive here until declared
// dead; the status calls it suspect when it does not answer
// (Node.clusterStatus).
func (g *gossip) members() []gossipMember {
	g.mu.Lock()
	out := make([]gossipMember, 0, len(g.nodes))
	for _, m := range g.nodes {
		out = append(out, m)
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// raftAddr is the Raft address node id announced, if gossip knows it.
// Raft asks for an address up to three times per AppendEntries, so this
// looks the node up rather than listing every member.
func (g *gossip) raftAddr(id string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.nodes[id]
	return m.Meta.Raft, ok && m.Meta.Raft != ""
}

// clientAddr is the client address node id announced, if gossip holds it
// alive.
func (g *gossip) clientAddr(id string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.nodes[id]
	return m.Meta.Client, ok && m.State == "alive" && m.Meta.Client != ""
}

// alive is false for a node gossip holds dead or gone.
func (g *gossip) alive(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nodes[id].State == "alive"
}

func (g *gossip) aliveWithBoot(id, boot string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.nodes[id]
	return ok && m.State == "alive" && m.Meta.Boot == boot
}

// setLeaving tells the others that this node is handing its leaderships
// away, so none is handed back to it.
func (g *gossip) setLeaving() {
	g.updateMeta("telling the others this node is leaving", func(m *nodeMeta) { m.Leaving = true })
}

// setCatchingUp tells the others whether a member replica here is still
// opening or applying its log, setServing whether this node is ready.
// They do not wait for the news to go out (broadcastLoop sends it): their
// caller is the readiness watch, which a node cut off from the others
// would otherwise hold up.
func (g *gossip) setCatchingUp(catchingUp bool) {
	g.tell(func(m *nodeMeta) { m.CatchingUp = catchingUp })
}

func (g *gossip) setServing(serving bool) { g.tell(func(m *nodeMeta) { m.Serving = serving }) }

func (g *gossip) tell(change func(m *nodeMeta)) {
	g.changeMeta(change)
	select {
	case g.metaChanged <- struct{}{}:
	default:
	}
}

// broadcastLoop gossips this node's metadata each time setCatchingUp
// changed it; a broadcast carries the newest.
func (g *gossip) broadcastLoop() {
	for {
		select {
		case <-g.stop:
			return
		case <-g.metaChanged:
		}
		if err := g.ml.UpdateNode(2 * time.Second); err != nil {
			g.n.log.Debug("telling the others whether this node is catching up", "err", err)
		}
	}
}

// updateMeta changes what this node gossips about itself and waits (up to
// 2 s) until the change went out to another node.
func (g *gossip) updateMeta(what string, change func(m *nodeMeta)) {
	g.changeMeta(change)
	if err := g.ml.UpdateNode(2 * time.Second); err != nil {
		g.n.log.Warn(what, "err", err)
	}
}

func (g *gossip) changeMeta(change func(m *nodeMeta)) {
	var meta nodeMeta
	g.metaMu.Lock()
	defer g.metaMu.Unlock()
	_ = json.Unmarshal(g.meta, &meta)
	change(&meta)
	g.meta, _ = json.Marshal(meta)
}

func (g *gossip) leave(timeout time.Duration) {
	if err := g.ml.Leave(timeout); err != nil {
		g.n.log.Warn("leaving the gossip pool", "err", err)
	}
}

func (g *gossip) shutdown() {
	close(g.stop)
	<-g.done
	_ = g.ml.Shutdown()
}

// memberlist.Delegate

func (g *gossip) NodeMeta(limit int) []byte {
	g.metaMu.Lock()
	defer g.metaMu.Unlock()
	return g.meta
}
func (g *gossip) NotifyMsg([]byte)                           {}
func (g *gossip) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (g *gossip) LocalState(join bool) []byte                { return nil }
func (g *gossip) MergeRemoteState(buf []byte, join bool)     {}

// memberlist.EventDelegate

func (g *gossip) NotifyJoin(m *memberlist.Node)   { g.record(m, "alive") }
func (g *gossip) NotifyUpdate(m *memberlist.Node) { g.record(m, "alive") }
func (g *gossip) NotifyLeave(m *memberlist.Node) {
	state := "dead"
	if m.State == memberlist.StateLeft {
		state = "left"
	}
	g.record(m, state)
}

// record copies a node out of memberlist's event (it calls with its state
// locked, so the copy is consistent).
func (g *gossip) record(m *memberlist.Node, state string) {
	gm := gossipMember{ID: m.Name, State: state, Addr: net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))}
	_ = json.Unmarshal(m.Meta, &gm.Meta)
	g.mu.Lock()
	g.nodes[m.Name] = gm
	g.mu.Unlock()
	g.n.membershipChanged()
}
