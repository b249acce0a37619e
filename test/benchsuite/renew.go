package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os/exec"
	"time"

	"github.com/cairnmq/cairn/client"
)

var renew = flag.Int("renew", 0, "instead of the standard set: fill a queue with this many 1 KiB messages, then change its replication factor 3 -> 1 -> 3 and measure how long each renewal of its members takes and a synchronous producer's latency beside the first")

// renewRows creates queue "renew" (a member per node, three replicas),
// fills it with n messages, then runs `cairn queue update renew
// --replicas R` for R = 1 and then 3, each time reporting how long until
// every member is placed with R replicas, none renewing, and the n
// messages are all still pending; a synchronous producer into another
// queue runs for 20 s before, and beside the first renewal.
func renewRows(c *cluster, n int) error {
	if out, err := exec.Command(*cairnBin, "--server", c.clients[0], "queue", "create", "renew").CombinedOutput(); err != nil {
		return fmt.Errorf("queue create renew: %v: %s", err, out)
	}
	if _, err := cairnBench(c, []string{"--count", fmt.Sprint(n), "--mode", "async", "--window", "500", "--producers", "4", "--consumers", "0", "--dest", "renew"}); err != nil {
		return fmt.Errorf("filling the queue: %w", err)
	}
	if _, err := c.waitQuiet(2 * time.Minute); err != nil {
		return err
	}
	probe := func() (benchJSON, error) {
		return cairnBench(c, []string{"--duration", "20s", "--mode", "sync", "--producers", "1", "--consumers", "0", "--dest", "renew-probe"})
	}
	quiet, err := probe()
	if err != nil {
		return err
	}
	fmt.Printf("| sync send, 1 KiB, 1 producer, beside %d pending, quiet (20 s) | %.0f | %.2f / %.2f |\n", n, quiet.SendRate, quiet.SendLatency.P50, quiet.SendLatency.P99)
	for i, r := range []int{1, 3} {
		probed := make(chan error, 1)
		var during benchJSON
		if i == 0 {
			go func() {
				var err error
				during, err = probe()
				probed <- err
			}()
		}
		start := time.Now()
		if out, err := exec.Command(*cairnBin, "--server", c.clients[0], "queue", "update", "renew", "--replicas", fmt.Sprint(r)).CombinedOutput(); err != nil {
			return fmt.Errorf("queue update --replicas %d: %v: %s", r, err, out)
		}
		err := waitQueue(c, 10*time.Minute, func(q client.QueueInfo) bool {
			if q.Pending != uint64(n) {
				return false
			}
			for _, m := range q.Members {
				if m.Draining || len(m.Replicas) != r {
					return false
				}
			}
			return true
		})
		took := time.Since(start)
		if err != nil {
			return fmt.Errorf("renewing to %d replicas: %w", r, err)
		}
		if i == 0 {
			if err := <-probed; err != nil {
				return err
			}
			fmt.Printf("| sync send, 1 KiB, 1 producer, beside %d pending renewed 3 -> 1 replicas (20 s) | %.0f | %.2f / %.2f |\n", n, during.SendRate, during.SendLatency.P50, during.SendLatency.P99)
		}
		fmt.Printf("\nQueue of %d pending renewed to %d replicas in %.1f s.\n", n, r, took.Seconds())
	}
	return nil
}

// waitQueue polls node 1's view of queue renew until ok says it is there.
func waitQueue(c *cluster, limit time.Duration, ok func(client.QueueInfo) bool) error {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		out, err := exec.Command(*cairnBin, "--server", c.clients[0], "queue", "show", "renew", "--json").Output()
		if err != nil {
			continue
		}
		var q client.QueueInfo
		if json.Unmarshal(out, &q) == nil && ok(q) {
			return nil
		}
	}
	return fmt.Errorf("not within %v", limit)
}
