package cluster

import (
	"testing"

	"github.com/cairnmq/cairn/client"
)

// A node whose host cache names itself for a member it no longer hosts
// (its replica moved away while a peer still named it the leader) asks the
// member's replicas instead, and its clients' sends reach the real host:
// kept, the entry sent every command back to the node itself until the
// route window ended, and a renewal's move stalled on it for minutes.
func TestHost_CacheNamingThisNodeIsAskedAgain(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "elsewhere", client.QueueOptions{Members: 1, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	host := tc.WaitHost("elsewhere#0")
	other := tc.Others(host)[0]
	n := tc.Node(other)
	n.hostCache.set("elsewhere#0", other)
	if r, node := n.host("elsewhere#0"); r != nil || node != host {
		t.Fatalf("%s's host of elsewhere#0 with itself cached: replica %v, node %q; want %s", other, r != nil, node, host)
	}
	n.hostCache.set("elsewhere#0", other)
	send(t, ctx, mustProducer(t, mustSession(t, tc.Dial(other), client.AutoAck), "elsewhere#0"), "through a stale cache")
}
