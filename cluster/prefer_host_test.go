package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

func preferHostOf(dest string) func(*client.Options) {
	return func(o *client.Options) { o.PreferHostOf = dest }
}

// A connection that prefers a destination's host connects to that host
// whichever node it dials, when every consumer of the address is served by
// one member: a one-member queue, or a member's address. A queue spread
// over several members, or one that does not exist, leaves it on the node
// it dialled. Its consumer is then served by the host itself.
func TestCluster_PreferHostOfConnectsToTheHost(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	hosts := tc.CreateSpread(ctx, map[string]int{"near": 1, "spread": 3})
	nearHost, spreadHosts := hosts["near"][0], hosts["spread"]
	// member is the member whose host is wanted: a host that moved since
	// is found at the next connect, rightly.
	for _, c := range []struct{ prefer, member, dialled, want string }{
		{"near", "near#0", tc.Others(nearHost)[0], nearHost},
		{"near#0", "near#0", tc.Others(nearHost)[1], nearHost},
		{"spread#2", "spread#2", tc.Others(spreadHosts[2])[0], spreadHosts[2]},
		{"spread", "", tc.Others(spreadHosts[0])[0], tc.Others(spreadHosts[0])[0]},
		{"missing", "", nearHost, nearHost},
	} {
		conn := tc.Dial(c.dialled, preferHostOf(c.prefer))
		if got := conn.Node(); got != c.want && (c.member == "" || tc.HostOf(c.member) == c.want) {
			t.Errorf("dialled %s preferring the host of %s: connected to %s, want %s", c.dialled, c.prefer, got, c.want)
		}
		_ = conn.Close()
	}

	conn := tc.Dial(tc.Others(nearHost)[0], preferHostOf("near"))
	s := mustSession(t, conn, client.AutoAck)
	k := mustConsumer(t, ctx, s, "near")
	send(t, ctx, mustProducer(t, s, "near"), "hello")
	if got := string(recv(t, k).Body); got != "hello" {
		t.Fatalf("received %q, want hello", got)
	}
	if served := len(tc.Node(nearHost).conns.List()); served != 1 || conn.Node() != nearHost {
		t.Errorf("the host %s serves %d client connections and the consumer is on %s: want the consumer's own, on the host", nearHost, served, conn.Node())
	}
}

// A connection that loses the host it preferred does not wait for it: it
// reconnects to a live node (the new host when one is named by then) and
// its consumer goes on.
func TestCluster_PreferHostOfReconnectsWithoutTheLostHost(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "near", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitSpread("near", 1)[0]
	conn := tc.Dial(tc.Others(host)[0], preferHostOf("near"), func(o *client.Options) { o.ReconnectPolicy = client.ReconnectAll })
	if conn.Node() != host {
		t.Fatalf("connected to %s, not to the host %s", conn.Node(), host)
	}
	k := mustConsumer(t, ctx, mustSession(t, conn, client.AutoAck), "near")
	before := conn.ID()
	tc.Crash(host)
	newHost := tc.WaitHost("near#0")
	wait.For(t, 30*time.Second, "the connection reconnected", func() bool { return conn.ID() != before })
	if conn.Node() == host {
		t.Fatalf("reconnected to the lost host %s", host)
	}
	p := mustProducer(t, mustSession(t, tc.Dial(newHost), client.AutoAck), "near")
	send(t, ctx, p, "after")
	if got := string(recv(t, k).Body); got != "after" {
		t.Fatalf("received %q after the host was lost, want after", got)
	}
}

// A malformed name is refused at Dial with ErrInvalidName, rather than
// leaving the connection on whatever node it reached.
func TestCluster_PreferHostOfRefusesAMalformedName(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	_, err := client.Dial(ctx, []string{tc.Node("n1").Addrs().Client}, client.Options{PreferHostOf: "no spaces here"})
	if !errors.Is(err, client.ErrInvalidName) {
		t.Fatalf("Dial preferring the host of a malformed name: %v, want ErrInvalidName", err)
	}
}
