package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/destination"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A send's answer names the member's host (its client address) only when
// every send to the address goes to that member: a one-member queue, or an
// address naming a member; a queue spread over several names none, so its
// router keeps choosing per send.
func TestSend_NamesTheHostOnlyWhenTheRouteIsFixed(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	hosts := tc.CreateSpread(ctx, map[string]int{"one": 1, "spread": 3})
	oneHost, spreadHosts := hosts["one"][0], hosts["spread"]
	for _, c := range []struct{ addr, host string }{
		{"one", oneHost},
		{"one#0", oneHost},
		{"spread#1", spreadHosts[1]},
		{"spread", ""},
	} {
		want := ""
		if c.host != "" {
			want = tc.Node(c.host).Addrs().Client
		}
		// Asked of every node: the host names itself, the others the host.
		for _, id := range tc.IDs() {
			resp, err := rawClient(t, tc.Node(id)).Send(ctx, &clientpb.SendRequest{
				Destination: c.addr, Messages: []*clientpb.Message{{Body: []byte("x")}},
			})
			if err != nil {
				t.Fatalf("send to %s through %s: %v", c.addr, id, err)
			}
			// A host that moved since names another, rightly.
			moved := c.host != "" && tc.HostOf(resp.Results[0].Member) != c.host
			if resp.HostAddr != want && !moved {
				t.Errorf("a send to %s through %s named host %q, want %q", c.addr, id, resp.HostAddr, want)
			}
		}
	}
}

// A client of a node that is not the member's host sends straight to the
// host once a node named it: no node forwards its sends.
func TestCluster_SendsGoStraightToTheHost(t *testing.T) {
	t.Parallel()
	sendThroughAnotherNode(t, false, func(before, after frames, host *Node) {
		if data := after.data - before.data; data > sends/10 {
			t.Errorf("the peer connections carried %d DATA frames during %d sends: the sends were forwarded", data, sends)
		}
		if n := len(host.conns.List()); n != 1 {
			t.Errorf("the host serves %d client connections, want the send link only", n)
		}
	})
}

// A send marked direct gets one try: a node that knows no host for the
// member answers ErrUnavailable at once, where an ordinary send would wait
// out the routing window (longer than this context) for an election.
func TestSend_DirectSendIsOneTry(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "once", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("once", 1)[0]
	for _, id := range tc.Others(host) {
		tc.Crash(id)
	}
	wait.For(t, 10*time.Second, "the host to step down without its quorum", func() bool { return tc.HostOf("once#0") == "" })
	sctx, cancel := context.WithTimeout(ctx, destination.RouteWindow/2)
	defer cancel()
	_, err := rawClient(t, tc.Node(host)).Send(sctx, &clientpb.SendRequest{
		Destination: "once", Messages: []*clientpb.Message{{Body: []byte("x"), DedupId: "d1"}}, Direct: true,
	})
	if err := transport.FromStatus(err); !errors.Is(err, transport.ErrUnavailable) {
		t.Fatalf("a direct send to a member without a host: %v, want ErrUnavailable", err)
	}
}

// A client can reach a host that its own node cannot. A send straight to a
// host cut off from the other replicas is accepted, then ends when the
// host's leadership lapses: without a dedup id its outcome is unknown
// (naming its member), never a refusal; the next sends go through the
// client's node, which routes them to the new host.
//
// A send at the cut that did not go straight to the host (the client's
// send link not used) goes through the client's node to the new host and
// succeeds: that attempt tested nothing, and the test tries again with
// another queue, a few times at most.
func TestCluster_DirectSendToACutOffHost(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for an election")
	}
	tc := NewTestCluster(t, 3)
	const attempts = 3
	for attempt := 1; attempt <= attempts; attempt++ {
		if directSendAtTheCut(t, tc, fmt.Sprintf("cut%d", attempt)) {
			return
		}
	}
	t.Fatalf("the test did not test that: in %d attempts, no send straight to a cut-off host ended with its outcome unknown", attempts)
}

// directSendAtTheCut cuts off the host of a new one-member queue once a
// client of another node sends to it straight, sends once more, and
// reports whether that send's outcome was unknown (false: it was stored).
// It heals the cut before it returns.
func directSendAtTheCut(t *testing.T, tc *TestCluster, queue string) bool {
	t.Helper()
	ctx := stepCtx(t, 20*time.Second)
	if _, err := tc.Admin("n1").CreateQueue(ctx, queue, client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	x := tc.WaitSpread(queue, 1)[0]
	y := tc.Others(x)[0]
	conn := tc.Dial(y)
	defer conn.Close()
	p := mustProducer(t, mustSession(t, conn, client.AutoAck), queue)
	had := map[string]bool{}
	for _, ci := range tc.Node(x).conns.List() {
		had[ci.Id] = true
	}
	wait.For(t, 10*time.Second, "the client's send link to the host", func() bool {
		sendN(t, ctx, p, "warm-", 1)
		for _, ci := range tc.Node(x).conns.List() {
			if !had[ci.Id] {
				return true
			}
		}
		return false
	})

	tc.Isolate(x)
	defer tc.Rejoin(x)
	member := queue + "#0"
	_, err := p.Send(stepCtx(t, 30*time.Second), &client.Message{Body: []byte("at-the-cut")})
	switch {
	case err == nil:
		t.Logf("%s: the send at the cut was stored: it did not go straight to %s", queue, x)
	case !errors.Is(err, client.ErrDeliveryUnknown) || !strings.Contains(err.Error(), member):
		t.Fatalf("the send straight to the cut-off host: %v; want success or ErrDeliveryUnknown naming %s", err, member)
	default:
		t.Logf("the send straight to the cut-off host: %v", err)
	}
	sendN(t, stepCtx(t, 30*time.Second), p, "after-", 5)
	if err != nil {
		return true
	}
	// Whole again for the next attempt.
	tc.Rejoin(x)
	wait.For(t, 20*time.Second, x+" alive again to every node", func() bool {
		for _, id := range tc.Others(x) {
			if !tc.Node(id).gossip.alive(x) {
				return false
			}
		}
		return true
	})
	return false
}
