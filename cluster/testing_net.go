package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
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
