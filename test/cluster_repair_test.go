package test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// The operator's repair, as processes: while cairn verify runs through
// the cluster, a node is SIGKILLed for good and removed (cairn node
// remove), and a fresh node joins with --join alone. Within a minute every
// member is back at three voting replicas, on the two survivors and the
// new node, its hosts spread one per node, and verify (its history
// checker) finds nothing lost.
func TestCluster3_ReplacedNodeRepairsTheCluster(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	survivors := c.clientAddrs(0)[:2]
	env := []string{"CAIRN_SERVER=" + strings.Join(survivors, ",")}
	judged := verifyThrough(t, survivors, 20*time.Second)

	victim := c.nodes[2]
	victim.kill()
	waitStatus(t, c, deadDeadline, victim.nodeID+" dead", func(st client.ClusterStatus) string {
		if n, ok := nodeState(st, victim.nodeID); !ok || n.Alive {
			return fmt.Sprintf("%s: %+v", victim.nodeID, n)
		}
		return ""
	})
	if r := cli(t, env, "node", "remove", victim.nodeID); r.code != 0 {
		t.Fatalf("node remove %s: exit %d: %s", victim.nodeID, r.code, r.stderr)
	}

	joined := time.Now()
	fresh := c.join("n4")
	t.Logf("%s ready %v after its start", fresh.nodeID, time.Since(joined).Round(100*time.Millisecond))
	want := []string{"n1", "n2", "n4"}
	waitStatus(t, c, time.Minute, "every member on n1, n2 and n4, voting, hosts one per node", func(st client.ClusterStatus) string {
		if why := settledOn(st, want); why != "" {
			return why
		}
		hosts := map[string]string{}
		for _, g := range st.Groups {
			if g.Name == "meta" {
				continue
			}
			if other, ok := hosts[g.Leader]; ok {
				return fmt.Sprintf("%s hosts %s and %s", g.Leader, other, g.Name)
			}
			hosts[g.Leader] = g.Name
		}
		return ""
	})
	t.Logf("repaired and spread %v after %s started", time.Since(joined).Round(100*time.Millisecond), fresh.nodeID)

	judged()
}

// join starts a node id that joins the cluster through its first two
// nodes (--join alone, a fresh data directory) and waits until it is
// ready.
func (c *processCluster) join(id string) *server {
	s := newServer(c.t)
	s.nodeID = id
	s.extra["bootstrap-expect"] = "0"
	s.extra["join"] = c.nodes[0].addrs.gossip + "," + c.nodes[1].addrs.gossip
	s.start()
	return s
}

// settledOn says why st is not settled with every group (the meta group
// too) on exactly the nodes want, sorted, with a leader, none short of
// replicas nor moving; "" once it is.
func settledOn(st client.ClusterStatus, want []string) string {
	if st.UnderReplicated != 0 || st.Moving != 0 {
		return fmt.Sprintf("%d under-replicated, %d moving", st.UnderReplicated, st.Moving)
	}
	for _, g := range st.Groups {
		var on []string
		for _, r := range g.Replicas {
			on = append(on, r.Node)
		}
		if slices.Sort(on); !slices.Equal(on, want) || g.Leader == "" {
			return fmt.Sprintf("group %s on %v, leader %q", g.Name, on, g.Leader)
		}
	}
	return ""
}

// waitStatus waits up to d until the status from the first node shows what
// missing explains is missing ("" once there).
func waitStatus(t *testing.T, c *processCluster, d time.Duration, what string, missing func(client.ClusterStatus) string) {
	t.Helper()
	why := ""
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := c.statusFrom(0)
		if err != nil {
			why = err.Error()
			continue
		}
		if why = missing(st); why == "" {
			return
		}
	}
	t.Fatalf("after %v, no %s: %s", d, what, why)
}
