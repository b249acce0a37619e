package test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// Scale 3 → 5 → 3, as processes, while cairn verify runs through the
// first two nodes. Two nodes join with --join alone and take replicas by
// themselves (no rebalance run); then each leaves for good with `cairn
// node leave --decommission`, no member short of replicas at any moment,
// and its process stops by itself. At the end every member is on the
// first three nodes, voting, and verify finds nothing lost.
func TestCluster3_ScaleToFiveAndBack(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	judged := verifyThrough(t, c.clientAddrs(0)[:2], 40*time.Second)

	var joined []*server
	for _, id := range []string{"n4", "n5"} {
		joined = append(joined, c.join(id))
	}
	start := time.Now()
	waitStatus(t, c, time.Minute, "replicas on n4 and n5, nothing moving", func(st client.ClusterStatus) string {
		if st.UnderReplicated != 0 || st.Moving != 0 {
			return fmt.Sprintf("%d under-replicated, %d moving", st.UnderReplicated, st.Moving)
		}
		held := map[string]int{}
		for _, g := range st.Groups {
			for _, r := range g.Replicas {
				if g.Name != "meta" && !r.CatchingUp {
					held[r.Node]++
				}
			}
		}
		if held["n4"] == 0 || held["n5"] == 0 {
			return fmt.Sprintf("member replicas held: %v", held)
		}
		return ""
	})
	t.Logf("replicas spread onto n4 and n5 %v after they started", time.Since(start).Round(100*time.Millisecond))

	for _, s := range slices.Backward(joined) {
		stop := make(chan struct{})
		short := make(chan string, 1)
		go func() {
			for {
				if st, err := c.statusFrom(0); err == nil && st.UnderReplicated != 0 {
					short <- fmt.Sprintf("%d members under-replicated", st.UnderReplicated)
					return
				}
				select {
				case <-stop:
					short <- ""
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		start := time.Now()
		r := s.ok("node", "leave", "--decommission")
		close(stop)
		if why := <-short; why != "" {
			t.Errorf("while %s left: %s", s.nodeID, why)
		}
		t.Logf("%s: %s (%v)", s.nodeID, strings.TrimSpace(r.stdout), time.Since(start).Round(100*time.Millisecond))
		select {
		case <-s.proc.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still running 30 s after its decommission", s.nodeID)
		}
	}
	want := []string{"n1", "n2", "n3"}
	waitStatus(t, c, 30*time.Second, "every member on n1, n2 and n3, voting", func(st client.ClusterStatus) string {
		return settledOn(st, want)
	})

	judged()
}
