// Package raftmux lets every Raft group of a node share one TCP port. A
// dialer writes a short header naming the group first on every connection;
// the listener reads it and hands the connection to that group's stream
// layer, which hashicorp/raft's NetworkTransport uses as its network.
package raftmux

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// magic opens every connection, so a stray client is told apart from a peer.
var magic = [4]byte{'C', 'R', 'F', '1'}

// maxGroupLen bounds the group id in the header.
const maxGroupLen = 1024

// headerTimeout bounds how long an accepted connection may take to say
// which group it is for.
const headerTimeout = 10 * time.Second

// ErrClosed is returned by a closed mux or layer.
var ErrClosed = errors.New("raftmux: closed")

// Dialer opens connections to peers; tests replace it to cut links.
type Dialer func(address string, timeout time.Duration) (net.Conn, error)

// Mux accepts connections on one listener and routes them by group.
type Mux struct {
	ln net.Listener
	// advertise is the address peers dial to reach ln.
	advertise net.Addr
	log       *slog.Logger
	dial      Dialer
	mu        sync.Mutex
	groups    map[string]*Layer
	closed    bool
	done      chan struct{}
}

// New starts routing the connections accepted on ln. advertise is the
// address peers dial (ln's own address when nil); dial may be nil for plain
// TCP, and log nil for silence.
func New(ln net.Listener, advertise net.Addr, dial Dialer, log *slog.Logger) *Mux {
	if advertise == nil {
		advertise = ln.Addr()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if dial == nil {
		dial = func(address string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", address, timeout)
		}
	}
	m := &Mux{ln: ln, advertise: advertise, log: log, dial: dial, groups: make(map[string]*Layer), done: make(chan struct{})}
	go m.serve()
	return m
}

// Addr is the address peers dial to reach the mux.
func (m *Mux) Addr() net.Addr { return m.advertise }

func (m *Mux) serve() {
	defer close(m.done)
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if closed {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.log.Error("raft listener failed; no more peer connections will be accepted", "err", err)
			return
		}
		go m.route(conn)
	}
}

func (m *Mux) route(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(headerTimeout))
	group, err := readHeader(conn)
	if err != nil {
		m.log.Warn("dropping raft connection with a bad header", "remote", conn.RemoteAddr(), "err", err)
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	m.mu.Lock()
	l := m.groups[group]
	m.mu.Unlock()
	if l == nil {
		// The group may not have started here yet; the peer retries.
		m.log.Debug("dropping raft connection for a group not running here", "group", group, "remote", conn.RemoteAddr())
		conn.Close()
		return
	}
	select {
	case l.conns <- conn:
	case <-l.closed:
		conn.Close()
	}
}

func readHeader(r io.Reader) (string, error) {
	var h [6]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	if [4]byte(h[:4]) != magic {
		return "", fmt.Errorf("not a cairn raft connection (magic %q)", h[:4])
	}
	n := binary.BigEndian.Uint16(h[4:])
	if n == 0 || n > maxGroupLen {
		return "", fmt.Errorf("group id of %d bytes", n)
	}
	g := make([]byte, n)
	if _, err := io.ReadFull(r, g); err != nil {
		return "", err
	}
	return string(g), nil
}

func writeHeader(w io.Writer, group string) error {
	b := make([]byte, 0, 6+len(group))
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	_, err := w.Write(b)
	return err
}

// Layer returns the stream layer of a group, registering it.
func (m *Mux) Layer(group string) (*Layer, error) {
	if len(group) == 0 || len(group) > maxGroupLen {
		return nil, fmt.Errorf("raftmux: group id of %d bytes", len(group))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.groups[group]; ok {
		return nil, fmt.Errorf("raftmux: group %q already has a layer", group)
	}
	l := &Layer{mux: m, group: group, conns: make(chan net.Conn), closed: make(chan struct{}), open: make(map[*layerConn]struct{})}
	m.groups[group] = l
	return l, nil
}

// Close stops accepting and closes every layer.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	layers := make([]*Layer, 0, len(m.groups))
	for _, l := range m.groups {
		layers = append(layers, l)
	}
	m.mu.Unlock()
	err := m.ln.Close()
	for _, l := range layers {
		l.Close()
	}
	<-m.done
	return err
}

// Layer is one group's view of the mux; it implements raft.StreamLayer.
//
// The layer owns every connection it hands out, accepted or dialed, and
// closes those still open when it closes. hashicorp/raft's NetworkTransport
// does not: its Close leaves the connections it pooled for its RPCs open,
// and the goroutine serving each connection it accepted blocked in a read.
// Without the layer's help, every deleted group would keep its connections
// and their goroutines on both ends of each link until the process ended,
// and temporary queues, created and deleted all day, would run a node out
// of file descriptors.
type Layer struct {
	mux       *Mux
	group     string
	conns     chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}

	mu   sync.Mutex
	open map[*layerConn]struct{} // nil once the layer is closed
}

var _ raft.StreamLayer = (*Layer)(nil)

// Accept waits for the next connection routed to this group.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return l.own(c)
	case <-l.closed:
		return nil, ErrClosed
	}
}

// Close unregisters the group and closes the connections it handed out
// that are still open; the shared listener stays open.
func (l *Layer) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.mux.mu.Lock()
		if l.mux.groups[l.group] == l {
			delete(l.mux.groups, l.group)
		}
		l.mux.mu.Unlock()
		l.mu.Lock()
		open := l.open
		l.open = nil
		l.mu.Unlock()
		for c := range open {
			c.closedByLayer.Store(true)
			c.Conn.Close()
		}
	})
	return nil
}

// own wraps conn so that the layer closes it with itself.
func (l *Layer) own(conn net.Conn) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		conn.Close()
		return nil, ErrClosed
	}
	c := &layerConn{Conn: conn, layer: l}
	l.open[c] = struct{}{}
	return c, nil
}

func (l *Layer) forget(c *layerConn) {
	l.mu.Lock()
	delete(l.open, c)
	l.mu.Unlock()
}

// openConns counts the connections the layer would close (tests).
func (l *Layer) openConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// layerConn is a connection a layer handed out.
type layerConn struct {
	net.Conn
	layer *Layer
	// closedByLayer: reads end as the stream's end (io.EOF) once the layer
	// closed the connection, which is how its user, a NetworkTransport
	// serving it, stops without logging a decoding error for each.
	closedByLayer atomic.Bool
}

func (c *layerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.closedByLayer.Load() {
		err = io.EOF
	}
	return n, err
}

func (c *layerConn) Close() error {
	c.layer.forget(c)
	return c.Conn.Close()
}

// Addr is the shared listener's advertised address; Raft records it as
// this server's address.
func (l *Layer) Addr() net.Addr { return l.mux.advertise }

// Dial opens a connection to the same group on the node at address; a
// closed layer returns ErrClosed.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, ErrClosed
	default:
	}
	conn, err := l.mux.dial(string(address), timeout)
	if err != nil {
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	if err := writeHeader(conn, l.group); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return l.own(conn)
}

// TLSState is the TLS state of a connection a layer handed out (or of
// conn itself), false if it is not a TLS connection.
func TLSState(conn net.Conn) (tls.ConnectionState, bool) {
	if c, ok := conn.(*layerConn); ok {
		conn = c.Conn
	}
	if c, ok := conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return c.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}
