package client

import (
	"sync"

	"google.golang.org/grpc"
)

// Links to one node share one gRPC connection: one TCP connection and
// HTTP/2 session per node address in the process, each link a stream on it
// (gRPC's advice for a ClientConn). Many connections of one process to one
// node, such as 16 producers on 16 connections, then cost the node one
// socket to read and write instead of 16: its HTTP/2 reader takes the
// frames of several streams in one read, and its writer answers several in
// one write. With 16 synchronous producers on one host it carried more in
// ten pairs of ten, and consuming a backlog with 4 consumers 81,615 and
// 94,828 against 55,920 and 69,136 msgs/s (docs/performance.md, "Straight
// to the host, one connection per node"). Streams stay independent: a
// link that ends ends
// its stream; a lost node ends them all, as it would have ended their own
// connections. The last link to let go of a connection closes it, so a
// node dialled again after a failure gets a fresh one.
var nodeConns = connPool{byAddr: make(map[string]*pooledConn)}

type connPool struct {
	mu     sync.Mutex
	byAddr map[string]*pooledConn
}

type pooledConn struct {
	cc   *grpc.ClientConn
	refs int
}

// acquire returns the connection to addr, made now if no link holds one
// (grpc.NewClient connects lazily, on the first stream).
func (p *connPool) acquire(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.byAddr[addr]; pc != nil {
		pc.refs++
		return pc.cc, nil
	}
	cc, err := grpcDial(addr)
	if err != nil {
		return nil, err
	}
	p.byAddr[addr] = &pooledConn{cc: cc, refs: 1}
	return cc, nil
}

// release gives back one hold on addr's connection cc; the last closes it.
func (p *connPool) release(addr string, cc *grpc.ClientConn) {
	p.mu.Lock()
	pc := p.byAddr[addr]
	last := pc != nil && pc.cc == cc && pc.refs == 1
	switch {
	case last:
		delete(p.byAddr, addr)
	case pc != nil && pc.cc == cc:
		pc.refs--
	}
	p.mu.Unlock()
	if last {
		cc.Close()
	}
}
