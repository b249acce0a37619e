package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/cairnmq/cairn/client"
)

var (
	repair      = flag.Int("repair", 0, "instead of the standard set: fill a queue with this many 1 KiB messages, then restart a node with an empty data directory and measure how long its repair takes and a synchronous producer's latency beside it")
	serverFlags = flag.String("server-flags", "", "more flags for every cairn server, as one string (\"--snapshot-rate-mib -1\")")
)

// repairRows fills queue "repair" (a member per node, three replicas) with
// n messages, then measures a synchronous producer into another queue for
// 20 s on the quiet cluster; SIGKILLs node 3, deletes its data directory
// and starts it again once it is dead to the others and they host its
// members, with the same
// producer sending meanwhile; and reports how long until no member is
// short of caught-up replicas or moving (cairn cluster status). Run it
// with --server-flags to compare settings (--snapshot-rate-mib -1: no
// pacing).
func repairRows(c *cluster, n int) error {
	if _, err := cairnBench(c, []string{"--count", fmt.Sprint(n), "--mode", "async", "--window", "500", "--producers", "4", "--consumers", "0", "--dest", "repair"}); err != nil {
		return fmt.Errorf("filling the queue: %w", err)
	}
	if _, err := c.waitQuiet(2 * time.Minute); err != nil {
		return err
	}
	probe := func(d time.Duration) (benchJSON, error) {
		return cairnBench(c, []string{"--duration", d.String(), "--mode", "sync", "--producers", "1", "--consumers", "0", "--dest", "repair-probe"})
	}
	quiet, err := probe(20 * time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("| sync send, 1 KiB, 1 producer, beside %d pending, quiet | %.0f | %.2f / %.2f |\n", n, quiet.SendRate, quiet.SendLatency.P50, quiet.SendLatency.P99)

	victim := c.procs[2]
	_ = victim.Process.Kill()
	_ = victim.Wait()
	if err := waitStatus(c, time.Minute, func(st client.ClusterStatus) bool { return !nodeAlive(st, "n3") && hostsOnly(st, "n1", "n2") }); err != nil {
		return fmt.Errorf("node 3 not dead, or the others did not take its members: %w", err)
	}
	if err := os.RemoveAll(dataDir(victim)); err != nil {
		return err
	}
	cmd := exec.Command(victim.Path, victim.Args[1:]...)
	cmd.Stdout, cmd.Stderr = victim.Stdout, victim.Stderr
	probed := make(chan error, 1)
	var during benchJSON
	go func() {
		var err error
		during, err = probe(30 * time.Second)
		probed <- err
	}()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	c.procs[2] = cmd
	err = waitStatus(c, 5*time.Minute, func(st client.ClusterStatus) bool {
		return st.UnderReplicated == 0 && st.Moving == 0 && nodeAlive(st, "n3")
	})
	repaired := time.Since(start)
	if perr := <-probed; perr != nil {
		return perr
	}
	if err != nil {
		return fmt.Errorf("node 3 not repaired: %w", err)
	}
	fmt.Printf("| sync send, 1 KiB, 1 producer, beside %d pending, node 3 repairing from empty (first 30 s) | %.0f | %.2f / %.2f |\n", n, during.SendRate, during.SendLatency.P50, during.SendLatency.P99)
	fmt.Printf("\nNode 3 repaired (no member short of caught-up replicas, none moving) %.1f s after its start.\n", repaired.Seconds())
	return nil
}

// dataDir is the --data-dir of a cairn server command.
func dataDir(cmd *exec.Cmd) string {
	for i, a := range cmd.Args {
		if a == "--data-dir" && i+1 < len(cmd.Args) {
			return cmd.Args[i+1]
		}
	}
	return ""
}

// nodeAlive reports whether st holds node id alive.
func nodeAlive(st client.ClusterStatus, id string) bool {
	for _, n := range st.Nodes {
		if n.ID == id {
			return n.Alive
		}
	}
	return false
}

// hostsOnly reports whether every group has a leader among nodes.
func hostsOnly(st client.ClusterStatus, nodes ...string) bool {
	for _, g := range st.Groups {
		if !slices.Contains(nodes, g.Leader) {
			return false
		}
	}
	return true
}

// waitStatus polls node 1's cluster status until ok says it is there.
func waitStatus(c *cluster, limit time.Duration, ok func(client.ClusterStatus) bool) error {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		out, err := exec.Command(*cairnBin, "--server", c.clients[0], "cluster", "status", "--json").Output()
		if err != nil {
			continue
		}
		var st client.ClusterStatus
		if json.Unmarshal(out, &st) == nil && ok(st) {
			return nil
		}
	}
	return fmt.Errorf("not within %v", limit)
}
