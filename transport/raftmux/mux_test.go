package raftmux

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func newMux(t *testing.T) *Mux {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, nil, nil, nil)
	t.Cleanup(func() { m.Close() })
	return m
}

func TestMux_RoutesConnectionsByGroup(t *testing.T) {
	m := newMux(t)
	a, err := m.Layer("orders#0@a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Layer("meta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Layer("meta"); err == nil {
		t.Fatal("a second layer for one group was allowed")
	}
	for _, tc := range []struct {
		from, to *Layer
		payload  string
	}{{a, a, "to orders"}, {b, b, "to meta"}} {
		conn, err := tc.from.Dial("127.0.0.1:0", time.Second)
		if err == nil {
			conn.Close()
			t.Fatal("dialing port 0 succeeded")
		}
		conn, err = tc.from.Dial(raft.ServerAddress(m.Addr().String()), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte(tc.payload)); err != nil {
			t.Fatal(err)
		}
		in, err := tc.to.Accept()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(tc.payload))
		if _, err := io.ReadFull(in, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, []byte(tc.payload)) {
			t.Fatalf("group %s got %q, want %q", tc.to.group, got, tc.payload)
		}
		in.Close()
		conn.Close()
	}
}

// A connection for a group that is not running here, or that does not
// speak the protocol, is closed; the listener keeps serving.
func TestMux_DropsUnknownGroupsAndStrangers(t *testing.T) {
	m := newMux(t)
	known, err := m.Layer("known")
	if err != nil {
		t.Fatal(err)
	}
	addr := raft.ServerAddress(m.Addr().String())
	stranger, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	stranger.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	stranger.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := stranger.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection with a bad header was not closed")
	}
	// A group closed here, dialed by its layer on another node.
	closed, err := m.Layer("other")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	other, err := newMux(t).Layer("other")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := other.Dial(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection for a closed group was not closed")
	}
	c2, err := known.Dial(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	in, err := known.Accept()
	if err != nil {
		t.Fatal("the mux stopped routing after dropping strangers:", err)
	}
	in.Close()
}

func TestMux_CloseEndsAccept(t *testing.T) {
	m := newMux(t)
	l, err := m.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	m.Close()
	select {
	case err := <-done:
		if err != ErrClosed {
			t.Fatalf("Accept after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after the mux closed")
	}
	if _, err := m.Layer("h"); err != ErrClosed {
		t.Fatalf("Layer on a closed mux = %v, want ErrClosed", err)
	}
}

// A layer closes with itself the connections it accepted and dialed, on
// both ends of each link, and their reads end as io.EOF; a connection its
// user closed is forgotten.
func TestLayer_CloseClosesItsConnections(t *testing.T) {
	m1, m2 := newMux(t), newMux(t)
	a, err := m1.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	b, err := m2.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	link := func(from, to *Layer, toMux *Mux) (out, in net.Conn) {
		t.Helper()
		out, err := from.Dial(raft.ServerAddress(toMux.Addr().String()), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if in, err = to.Accept(); err != nil {
			t.Fatal(err)
		}
		return out, in
	}
	aToB, bFromA := link(a, b, m2)
	bToA, aFromB := link(b, a, m1)
	spent, spentIn := link(a, b, m2)
	spent.Close()
	spentIn.Close()
	if got := a.openConns(); got != 2 {
		t.Fatalf("layer a holds %d connections, want 2 (one dialed, one accepted; the closed one forgotten)", got)
	}

	a.Close()
	for name, c := range map[string]net.Conn{
		"dialed by the closed layer":         aToB,
		"accepted by the closed layer":       aFromB,
		"the peer's end of the dialed one":   bFromA,
		"the peer's end of the accepted one": bToA,
	} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("read on the connection %s = %v, want io.EOF", name, err)
		}
	}
	if _, err := a.Dial(raft.ServerAddress(m2.Addr().String()), time.Second); err != ErrClosed {
		t.Errorf("Dial on a closed layer = %v, want ErrClosed", err)
	}
	// A connection routed to the layer as it closed is closed, not handed
	// out.
	late, lateEnd := net.Pipe()
	if c, err := a.own(late); err != ErrClosed || c != nil {
		t.Errorf("own on a closed layer = %v, %v; want nil, ErrClosed", c, err)
	}
	lateEnd.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := lateEnd.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a connection refused by a closed layer was left open: read = %v", err)
	}
}
