package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A temporary queue lives as long as its connection: it goes when the
// connection dies abruptly, its node staying up, as it does when the
// connection closes. The client reaches the node through a proxy that then
// cuts the connection without a Goodbye or a close: silently (the bytes
// stop both ways and the TCP connection stays up, as in a network
// partition; the node notices through its keepalive) or with a reset (the
// TCP connection torn down under both ends, as when the client's host
// dies). Within 15 s the node no longer lists the connection and the queue
// is unknown.
func TestTemporaryQueue_GoesWhenItsConnectionDiesAbruptly(t *testing.T) {
	t.Parallel()
	for name, cut := range map[string]func(*testing.T, *clientProxy){
		"silent": func(t *testing.T, p *clientProxy) { p.cut(t) },
		"reset": func(t *testing.T, p *clientProxy) {
			for _, dir := range []string{"upstream", "downstream"} {
				spec := fmt.Sprintf(`{"name":"reset-%s","type":"reset_peer","stream":"%s","attributes":{"timeout":0}}`, dir, dir)
				if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
					t.Fatal(err)
				}
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			temporaryQueueOfACutConnection(t, cut)
		})
	}
}

func temporaryQueueOfACutConnection(t *testing.T, cut func(*testing.T, *clientProxy)) {
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	proxy := newClientProxy(t, n.Addrs().Client)
	conn := dialVia(t, []string{proxy.addr()}, client.Options{})
	lost := listen(conn)
	s := mustSession(t, conn, client.AutoAck)
	name, err := s.CreateTemporaryQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// It exists and takes messages; the node serves the connection.
	send(t, ctx, mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), name), "reply")
	checkQueue(t, a, name, 1, 0)
	id := conn.ID()
	listed := func() bool {
		return slices.ContainsFunc(n.conns.List(), func(ci *clientpb.ConnectionInfo) bool { return ci.Id == id })
	}
	if !listed() {
		t.Fatalf("the node does not list the client's connection %s", id)
	}

	cut(t, proxy)
	// The fault landed: the client lost its node without closing (the
	// test never closes the connection, and a close tells no exception
	// listener), and the node ended its side.
	wait.For(untested{t}, 15*time.Second, "the client losing its node", func() bool {
		return slices.ContainsFunc(lost.list(), func(err error) bool { return errors.Is(err, client.ErrLostServer) })
	})
	wait.For(t, 15*time.Second, "the node ending the cut connection "+id, func() bool { return !listed() })
	wait.Until(t, 15*time.Second, "the temporary queue of a cut connection deleted", func() string {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q, err := a.ShowQueue(sctx, name)
		switch {
		case errors.Is(err, client.ErrUnknownDestination):
			return ""
		case err != nil:
			return err.Error()
		}
		return fmt.Sprintf("it holds %d pending, %d delivered", q.Pending, q.Delivered)
	})
	if names := queueNames(t, a); slices.Contains(names, name) {
		t.Fatalf("the queues listed include %s: %v", name, names)
	}
	// The node stayed up throughout, and serves on.
	select {
	case <-n.stopped:
		t.Fatal("the node stopped")
	default:
	}
	assertServes(t, n, "alive")
}
