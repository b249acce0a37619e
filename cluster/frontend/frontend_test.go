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
	hosts := tc.CreateSpread(ctx, map[string]int{"fe": 1})
	others := tc.Others(hosts["fe"][0])

	s, err := tc.Dial(others[0]).Session(client.ClientAck)
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Consumer(ctx, "fe")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := tc.Dial(others[1]).Session(client.AutoAck)
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
