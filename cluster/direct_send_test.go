package cluster

import (
	"testing"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A send's answer names the member's host (its client address) only when
// every send to the address goes to that member: a one-member queue, or an
// address naming a member; a queue spread over several names none, so its
// router keeps choosing per send.
func TestSend_NamesTheHostOnlyWhenTheRouteIsFixed(t *testing.T) {
	tc := newMultiNode(t, 3)
	ctx := testCtx(t)
	for name, members := range map[string]int{"one": 1, "spread": 3} {
		if _, err := tc.admin("n1").CreateQueue(ctx, name, client.QueueOptions{Members: members}); err != nil {
			t.Fatal(err)
		}
	}
	oneHost := tc.waitSpread("one", 1)[0]
	spreadHosts := tc.waitSpread("spread", 3)
	for _, c := range []struct{ addr, host string }{
		{"one", oneHost},
		{"one#0", oneHost},
		{"spread#1", spreadHosts[1]},
		{"spread", ""},
	} {
		want := ""
		if c.host != "" {
			want = tc.node(c.host).Addrs().Client
		}
		// Asked of every node: the host names itself, the others the host.
		for _, id := range tc.ids() {
			resp, err := rawClient(t, tc.node(id)).Send(ctx, &clientpb.SendRequest{
				Destination: c.addr, Messages: []*clientpb.Message{{Body: []byte("x")}},
			})
			if err != nil {
				t.Fatalf("send to %s through %s: %v", c.addr, id, err)
			}
			// A host that moved since names another, rightly.
			moved := c.host != "" && tc.hostOf(resp.Results[0].Member) != c.host
			if resp.HostAddr != want && !moved {
				t.Errorf("a send to %s through %s named host %q, want %q", c.addr, id, resp.HostAddr, want)
			}
		}
	}
}

// A client of a node that is not the member's host sends straight to the
// host once a node named it: no node forwards its sends.
func TestCluster_SendsGoStraightToTheHost(t *testing.T) {
	sendThroughAnotherNode(t, false, func(before, after frames, host *Node) {
		if data := after.data - before.data; data > sends/10 {
			t.Errorf("the peer connections carried %d DATA frames during %d sends: the sends were forwarded", data, sends)
		}
		if n := len(host.conns.list()); n != 1 {
			t.Errorf("the host serves %d client connections, want the send link only", n)
		}
	})
}
