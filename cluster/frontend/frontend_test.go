package frontend_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/cluster"
)

// Through the client API of a three-node cluster, started by the harness
// package cluster ships (cluster.TestCluster): a consumer on a node that
// does not host the queue's member gets, over a remote link to the host
// (Node.AttachRemote), what a producer on a third node sent.
func TestFrontend_AConsumerElsewhereGetsWhatAnotherNodeSent(t *testing.T) {
	tc := cluster.NewTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := client.NewAdmin([]string{tc.Node("n1").Addrs().Client})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateQueue(ctx, "fe", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	others := tc.Others(tc.WaitSpread("fe", 1)[0])

	s, err := dial(t, tc, others[0]).Session(client.ClientAck)
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Consumer(ctx, "fe")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := dial(t, tc, others[1]).Session(client.AutoAck)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ps.Producer("fe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &client.Message{ID: "m1", Body: []byte("across three nodes")}); err != nil {
		t.Fatal(err)
	}
	m, err := k.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "m1" || string(m.Body) != "across three nodes" || m.Redelivered {
		t.Fatalf("received %q (%q, redelivered %v), want m1 as sent", m.ID, m.Body, m.Redelivered)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
}

// dial connects a client to node id of tc, closed when the test ends.
func dial(t *testing.T, tc *cluster.TestCluster, id string) *client.Connection {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{tc.Node(id).Addrs().Client}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
