package cluster

import (
	"fmt"
	"testing"

	"github.com/cairnmq/cairn/client"
)

func TestNode_SendReceiveAck(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	c := dial(t, n)
	s, err := c.Session(client.ClientAck)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := p.Send(ctx, &client.Message{Body: []byte(fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := s.Consumer(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Body) != fmt.Sprint("m", i) || m.Redelivered || m.DeliveryCount != 1 {
			t.Fatalf("message %d: body %q redelivered %v count %d", i, m.Body, m.Redelivered, m.DeliveryCount)
		}
		if i == 4 {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, err := admin(t, n).ShowQueue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if info.Pending != 0 || info.Delivered != 0 {
		t.Fatalf("after ack: %+v", info)
	}
}
