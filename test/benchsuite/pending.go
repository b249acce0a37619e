package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pendingRows fills a queue with n messages and prints each node's resident
// memory with them, the send rate beside 1,000 pending messages and beside
// n, and how long a restarted node takes to serve again.
//
// The rate beside 1,000 is measured on the fresh cluster and again once the
// n are stored, and only the second compares queues in the same machine
// state: on the project's virtual machines the rate drifts with the
// machine's memory, not with the queues. Successive runs into fresh queues
// of a fresh cluster slowed from 52,000 to 21,700 msgs/s, the nodes' CPU per
// message nearly tripling, and came back to 37,000 once 8 GiB of files
// Cairn never touched were deleted (docs/performance.md, "A million
// pending messages"). So the rows after the store run in the order small,
// large, large, small, each pair's rate combined, and a drift through the
// four weighs on both sides alike. Each row sends as many
// messages as the standard async row (200,000, 5–10 s here; rows of 50,000
// swung by a third from one to the next). The row on the fresh cluster and
// the four after the store each come after a warm-up of 50,000 sends into a
// fresh queue, deleted afterwards; the second warm-up is printed, as the
// first sends after a million ran at half the rate of the third. Memory and
// restarts are measured right after the store, with n and 203,000 more
// pending, as the target is stated for n; the rows wait until the nodes are
// quiet again, since a restarted node replays its log after it is ready and
// sends during the replay ran at a third of the rate.
func pendingRows(c *cluster, n int) error {
	// sends are count 1 KiB messages from 4 asynchronous producers into
	// dest, or into a fresh queue deleted afterwards when dest is "".
	sends := func(dest string, count int) (benchJSON, error) {
		args := []string{"--count", strconv.Itoa(count), "--mode", "async", "--window", "500", "--producers", "4", "--consumers", "0"}
		if dest != "" {
			args = append(args, "--dest", dest)
		}
		return cairnBench(c, args)
	}
	const rowSends, warmUpSends, smallPending = 200000, 50000, 1000
	warmUp := func() (benchJSON, error) { return sends("", warmUpSends) }
	smallQueues := []string{"pending-small", "pending-small-after", "pending-small-after-2"}
	for _, q := range smallQueues {
		if _, err := sends(q, smallPending); err != nil {
			return err
		}
	}
	if _, err := warmUp(); err != nil {
		return err
	}
	small, err := sends("pending-small", rowSends)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := sends("pending-large", n); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "benchsuite: %d messages stored in %v\n", n, time.Since(start).Round(time.Second))
	fmt.Printf("Resident memory per node with %d + %d pending 1 KiB messages: %s (the warm-up's %d were in a queue since deleted).\n",
		n, len(smallQueues)*smallPending+rowSends, residentMemories(c), warmUpSends)
	for i := range c.procs {
		d, err := c.restart(i)
		if err != nil {
			return err
		}
		fmt.Printf("Node n%d restarted (SIGTERM, start) and ready to serve after %v.\n", i+1, d.Round(10*time.Millisecond))
	}
	quiet, err := c.waitQuiet(2 * time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("The nodes were quiet again (their log replayed) %v after the last was ready.\n", quiet.Round(100*time.Millisecond))
	firstAfter, err := warmUp()
	if err != nil {
		return err
	}
	rows := []struct{ dest, name string }{
		{smallQueues[1], fmt.Sprintf("async send beside 1,000 pending, with the %d stored (1 of 4)", n)},
		{"pending-large", fmt.Sprintf("async send beside %d pending (2 of 4)", n)},
		{"pending-large", fmt.Sprintf("async send beside %d pending (3 of 4)", n+rowSends)},
		{smallQueues[2], fmt.Sprintf("async send beside 1,000 pending, with the %d stored (4 of 4)", n)},
	}
	after := make([]benchJSON, len(rows))
	for i, r := range rows {
		if after[i], err = sends(r.dest, rowSends); err != nil {
			return err
		}
	}
	printRow := func(name string, count int, res benchJSON) {
		fmt.Printf("| %s | %d | %.0f | %.2f / %.2f |\n", name, count, res.SendRate, res.SendLatency.P50, res.SendLatency.P99)
	}
	fmt.Print("\n| row | messages | Cairn msgs/s | Cairn p50 / p99 ms |\n|---|---|---|---|\n")
	printRow("async send beside 1,000 pending, fresh cluster", rowSends, small)
	printRow(fmt.Sprintf("async send into a fresh queue, the %d stored and the nodes restarted (warm-up, not compared)", n), warmUpSends, firstAfter)
	for i, r := range rows {
		printRow(r.name, rowSends, after[i])
	}
	smallAfter, large := combinedRate(after[0].SendRate, after[3].SendRate), combinedRate(after[1].SendRate, after[2].SendRate)
	fmt.Printf("\nBeside %d pending (rows 2 and 3 of 4: %.0f msgs/s): %.0f %% of the rate beside 1,000 with the %d stored (rows 1 and 4: %.0f msgs/s), %.0f %% of the rate beside 1,000 on the fresh cluster, whose machine state differs.\n",
		n, large, 100*large/smallAfter, n, smallAfter, 100*large/small.SendRate)
	fmt.Printf("Resident memory per node after these rows, with %d + %d pending: %s.\n",
		n, 2*rowSends+len(smallQueues)*(smallPending+rowSends), residentMemories(c))
	return nil
}

// waitQuiet waits until the nodes together spent under 0.3 s of CPU in a
// second, and says how long that took. Three idle nodes spend about 0.1 s a
// second, 0.16 s with a million stored; a replaying node more than a core.
func (c *cluster) waitQuiet(limit time.Duration) (time.Duration, error) {
	start := time.Now()
	before, err := c.cpuSeconds()
	if err != nil {
		return 0, err
	}
	for time.Since(start) < limit {
		time.Sleep(time.Second)
		now, err := c.cpuSeconds()
		if err != nil {
			return 0, err
		}
		if now-before < 0.3 {
			return time.Since(start), nil
		}
		before = now
	}
	return 0, fmt.Errorf("the nodes were still busy %v after their restarts", limit)
}

// cpuSeconds is the CPU time the cluster's processes have used together.
func (c *cluster) cpuSeconds() (float64, error) {
	var total float64
	for _, p := range c.procs {
		cpu, err := cpuSeconds(p.Process.Pid)
		if err != nil {
			return 0, err
		}
		total += cpu
	}
	return total, nil
}

// cpuSeconds is the user and system CPU time a process has used.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name, which ends at the last ')':
	// state is the first, utime and stime the twelfth and thirteenth.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (utime + stime) / clockTicksPerSecond, nil
}

// clockTicksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's times: 100
// on every Linux architecture Go runs on.
const clockTicksPerSecond = 100

// combinedRate is the rate of two runs of the same count taken as one: all
// they sent over all the time they took, the harmonic mean of their rates.
func combinedRate(a, b float64) float64 { return 2 / (1/a + 1/b) }

// residentMemories is each node's resident memory, joined for a sentence.
func residentMemories(c *cluster) string {
	var rss []string
	for _, p := range c.procs {
		rss = append(rss, residentMemory(p.Process.Pid))
	}
	return strings.Join(rss, ", ")
}

// residentMemory is a process's VmRSS, for a sentence.
func residentMemory(pid int) string {
	mib, err := rssMiB(pid)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", mib)
}

// restart stops server i with SIGTERM, starts it again and returns how long
// it took from the start until /readyz said 200 and the node answered a
// queue listing.
func (c *cluster) restart(i int) (time.Duration, error) {
	old := c.procs[i]
	_ = old.Process.Signal(syscall.SIGTERM)
	_ = old.Wait()
	cmd := exec.Command(old.Path, old.Args[1:]...)
	cmd.Stdout, cmd.Stderr = old.Stdout, old.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	c.procs[i] = cmd
	for deadline := start.Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(c.ready[i])
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		if exec.Command(*cairnBin, "--server", c.clients[i], "queue", "show", "pending-large").Run() == nil {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("node %d not serving 2 minutes after its restart", i+1)
}
