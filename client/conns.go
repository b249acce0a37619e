package client

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// Links to one node share one gRPC connection: one TCP connection and
// HTTP/2 session per node address in the process, each link a stream on it.
// Many connections of one process to one node, such as 16 producers on 16
// connections, then cost the node one socket to read and write instead of
// 16: its HTTP/2 reader takes the frames of several streams in one read,
// and its writer answers several in one write. With 16 synchronous
// producers on one host it carried more in ten pairs of ten, and consuming
// a backlog with 4 consumers 81,615 and 94,828 against 55,920 and 69,136
// msgs/s (docs/performance.md, "Straight to the host, one connection per
// node"). Streams stay independent: a link that ends ends its stream only.
//
// A connection a link found broken (its stream failed in the transport, or
// the node said nothing for the silence limit) is shared no more, nor one
// gRPC reports failing or shut down: the next link to that node dials a new
// one, rather than opening its stream on a dead socket or waiting out gRPC's
// reconnect backoff. The links still on the old one end as their own reads
// or watchdogs find it dead, and the last of them closes it.
var nodeConns = connPool{byAddr: make(map[string]*pooledConn)}

type connPool struct {
	mu     sync.Mutex
	byAddr map[string]*pooledConn // the connections new links share
}

// pooledConn is one shared connection; refs and broken are under the
// pool's mu.
type pooledConn struct {
	addr   string
	cc     *grpc.ClientConn
	refs   int
	broken bool
}

// acquire returns a connection to addr for one more link, made now if no
// sound one is shared (grpc.NewClient connects lazily, on the first
// stream).
func (p *connPool) acquire(addr string) (*pooledConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.byAddr[addr]; pc != nil {
		switch pc.cc.GetState() {
		case connectivity.TransientFailure, connectivity.Shutdown:
			pc.broken = true
		}
		if !pc.broken {
			pc.refs++
			return pc, nil
		}
		delete(p.byAddr, addr)
	}
	cc, err := grpcDial(addr)
	if err != nil {
		return nil, err
	}
	pc := &pooledConn{addr: addr, cc: cc, refs: 1}
	p.byAddr[addr] = pc
	return pc, nil
}

// broke stops sharing pc with links made from now on.
func (p *connPool) broke(pc *pooledConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.broken = true
	if p.byAddr[pc.addr] == pc {
		delete(p.byAddr, pc.addr)
	}
}

// release gives back one link's hold on pc; the last closes it.
func (p *connPool) release(pc *pooledConn) {
	p.mu.Lock()
	pc.refs--
	last := pc.refs == 0
	if last && p.byAddr[pc.addr] == pc {
		delete(p.byAddr, pc.addr)
	}
	p.mu.Unlock()
	if last {
		pc.cc.Close()
	}
}
