package client

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// Links to one node share one gRPC connection: one TCP connection and
// HTTP/2 session per node address in the process, each link a stream on it.
// Many connections of one process to one node, such as 16 producers on 16
// connections, then cost the node one socket to read and write instead of
// 16: its HTTP/2 reader takes the frames of several streams in one read,
// and its writer answers several in one write. With 16 synchronous
// producers the nodes made 3.8 read and write system calls per message
// instead of 6.2 and carried 5,855 and 5,810 msgs/s against 4,584 and 5,307
// (measured with the benchsuite). Streams stay
// independent: a link that ends ends its stream only.
//
// A connection a link found broken (its stream failed in the transport, not
// by the node's word, or its stream or Hello went unanswered) is shared no
// more, nor one gRPC reports failing or shut down: the next link to that
// node dials a new one, rather than opening its stream on a dead socket or
// waiting out gRPC's reconnect backoff. The links still on the old one end
// as their own reads or watchdogs find it dead, and the last of them closes
// it.
//
// A link whose watchdog finds the whole connection silent (no frame on any
// of its links for the silence limit: the node sends each a heartbeat every
// second) abandons it: it is closed at once, as a link's own connection was
// before they were shared, and every link on it ends with the silence as
// its cause rather than with gRPC's "the client connection is closing".
// Kept open, a connection to a node cut off from the network held every
// link's frames (stream resets included) until the cut was lifted, and the
// links dialled meanwhile waited on it. A link silent on a connection that
// others still hear from ends alone.
var nodeConns = connPool{byAddr: make(map[string]*pooledConn)}

type connPool struct {
	mu     sync.Mutex
	byAddr map[string]*pooledConn // the connections new links share
}

// pooledConn is one shared connection; refs, broken and abandoned are
// under the pool's mu.
type pooledConn struct {
	addr   string
	key    string // in byAddr: addr, and the TLS configuration's identity
	cc     *grpc.ClientConn
	refs   int
	broken bool
	// abandoned is why the connection was closed under its links, if it was.
	abandoned error
	// lastHeard is when a frame last came on any of its links, unix nanos.
	lastHeard atomic.Int64
	closeOnce sync.Once
}

// heard notes a frame from the node.
func (pc *pooledConn) heard() { pc.lastHeard.Store(time.Now().UnixNano()) }

// quiet is how long no link on pc has heard from the node.
func (pc *pooledConn) quiet() time.Duration { return time.Since(time.Unix(0, pc.lastHeard.Load())) }

// close closes the gRPC connection once. gRPC's Close may wait seconds to
// write its GOAWAY on a socket the node no longer reads.
func (pc *pooledConn) close() { pc.closeOnce.Do(func() { pc.cc.Close() }) }

// acquire returns a connection to addr for one more link, made now if no
// sound one is shared (grpc.NewClient connects lazily, on the first
// stream).
// Connections made with other credentials (another TLS configuration,
// user or password) are not shared.
func (p *connPool) acquire(addr string, o *Options) (*pooledConn, error) {
	key := addr
	if o.TLS != nil || o.User != "" {
		key = fmt.Sprintf("%s tls %p user %q password %x", addr, o.TLS, o.User, sha256.Sum256([]byte(o.Password)))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.byAddr[key]; pc != nil {
		switch pc.cc.GetState() {
		case connectivity.TransientFailure, connectivity.Shutdown:
			pc.broken = true
		}
		if !pc.broken {
			pc.refs++
			return pc, nil
		}
		p.unshareLocked(pc)
	}
	cc, err := grpcDial(addr, o)
	if err != nil {
		return nil, err
	}
	pc := &pooledConn{addr: addr, key: key, cc: cc, refs: 1}
	pc.heard() // its silence counts from now
	p.byAddr[key] = pc
	return pc, nil
}

// unshareLocked keeps pc from the links made from now on.
func (p *connPool) unshareLocked(pc *pooledConn) {
	pc.broken = true
	if p.byAddr[pc.key] == pc {
		delete(p.byAddr, pc.key)
	}
}

// broke stops sharing pc with links made from now on.
func (p *connPool) broke(pc *pooledConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unshareLocked(pc)
}

// abandon closes pc under its links, which end with cause. The close runs
// on its own, so that the link that found the silence reports it at once.
func (p *connPool) abandon(pc *pooledConn, cause error) {
	p.mu.Lock()
	p.unshareLocked(pc)
	if pc.abandoned == nil {
		pc.abandoned = cause
	}
	p.mu.Unlock()
	go pc.close()
}

// abandonedFor is why pc was closed under its links, or nil.
func (p *connPool) abandonedFor(pc *pooledConn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return pc.abandoned
}

// release gives back one link's hold on pc; the last closes it.
func (p *connPool) release(pc *pooledConn) {
	p.mu.Lock()
	pc.refs--
	last := pc.refs == 0
	if last {
		p.unshareLocked(pc)
	}
	p.mu.Unlock()
	if last {
		pc.close()
	}
}
