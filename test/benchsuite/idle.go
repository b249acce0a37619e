package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cairnmq/cairn/client"
)

// Idle destinations: what n queues cost the Cairn cluster once nobody uses
// them, beside the same cluster without them, and (with --compare) what n
// streams of three replicas cost NATS JetStream. Queues are made as
// `cairn queue create` makes them (one member per node, three replicas
// each), one after another from one client, as an operator's script would.
const (
	// idleSettle is how long the nodes get after the last create before
	// their idle cost is measured, idleWindow how long it is measured.
	idleSettle = 15 * time.Second
	idleWindow = 20 * time.Second
)

// idleCost is what a cluster spends while idle: the CPU of its processes
// together, in percent of one core, and each process's resident memory.
type idleCost struct {
	cpu    float64
	rssMiB []float64
}

func (c idleCost) rss() string {
	s := make([]string, len(c.rssMiB))
	for i, r := range c.rssMiB {
		s[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(s, ", ")
}

// above is each node's resident memory above the same node's in base.
func (c idleCost) above(base idleCost) string {
	s := make([]string, len(c.rssMiB))
	for i, r := range c.rssMiB {
		s[i] = fmt.Sprintf("%+.0f", r-base.rssMiB[i])
	}
	return strings.Join(s, ", ")
}

// measureIdle measures the cluster's CPU over idleWindow and its memory at
// the end.
func (c *cluster) measureIdle() (idleCost, error) {
	before, err := c.cpuSeconds()
	if err != nil {
		return idleCost{}, err
	}
	start := time.Now()
	time.Sleep(idleWindow)
	after, err := c.cpuSeconds()
	if err != nil {
		return idleCost{}, err
	}
	cost := idleCost{cpu: 100 * (after - before) / time.Since(start).Seconds()}
	for _, p := range c.procs {
		mib, err := rssMiB(p.Process.Pid)
		if err != nil {
			return idleCost{}, err
		}
		cost.rssMiB = append(cost.rssMiB, mib)
	}
	return cost, nil
}

// idleRows prints the idle cost of n destinations on each broker.
func idleRows(cairn, nats *cluster, natsBin string, n int) error {
	fmt.Printf("\n| %d idle destinations | created per second, one client | idle CPU, %% of one core, 3 nodes | resident MiB per node | above the empty cluster |\n|---|---|---|---|---|\n", n)
	base, err := cairn.measureIdle()
	if err != nil {
		return err
	}
	fmt.Printf("| Cairn, none | — | %.1f | %s | |\n", base.cpu, base.rss())
	rate, err := createQueues(cairn, n)
	if err != nil {
		return err
	}
	time.Sleep(idleSettle)
	with, err := cairn.measureIdle()
	if err != nil {
		return err
	}
	fmt.Printf("| Cairn, %d queues (%d members) | %.1f | %.1f | %s | %s |\n", n, 3*n, rate, with.cpu, with.rss(), with.above(base))
	if err := deleteQueues(cairn, n); err != nil {
		return err
	}
	if nats == nil {
		return nil
	}
	base, err = nats.measureIdle()
	if err != nil {
		return err
	}
	fmt.Printf("| NATS, none | — | %.1f | %s | |\n", base.cpu, base.rss())
	rate, err = createStreams(nats, natsBin, n)
	if err != nil {
		return err
	}
	time.Sleep(idleSettle)
	with, err = nats.measureIdle()
	if err != nil {
		return err
	}
	fmt.Printf("| NATS, %d R3 file streams | %.1f | %.1f | %s | %s |\n", n, rate, with.cpu, with.rss(), with.above(base))
	return nil
}

// createBeside creates n idle queues (and NATS streams) for the standard
// set to run beside, and waits as long as idleRows does before measuring.
func createBeside(cairn, nats *cluster, natsBin string, n int) error {
	rate, err := createQueues(cairn, n)
	if err != nil {
		return err
	}
	fmt.Printf("Beside %d idle queues (created at %.1f a second)", n, rate)
	if nats != nil {
		if rate, err = createStreams(nats, natsBin, n); err != nil {
			return err
		}
		fmt.Printf(" and %d idle NATS R3 file streams (%.1f a second)", n, rate)
	}
	fmt.Printf(":\n\n")
	time.Sleep(idleSettle)
	return nil
}

// createQueues creates idle-0 .. idle-(n-1) one after another and returns
// the rate.
func createQueues(c *cluster, n int) (float64, error) {
	a, err := client.NewAdmin(c.clients)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	start := time.Now()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := a.CreateQueue(ctx, fmt.Sprintf("idle-%d", i), client.QueueOptions{})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("creating queue %d of %d: %w", i+1, n, err)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func deleteQueues(c *cluster, n int) error {
	a, err := client.NewAdmin(c.clients)
	if err != nil {
		return err
	}
	defer a.Close()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := a.DeleteQueue(ctx, fmt.Sprintf("idle-%d", i))
		cancel()
		if err != nil {
			return fmt.Errorf("deleting queue idle-%d: %w", i, err)
		}
	}
	return nil
}

// createStreams creates n streams of three replicas in files, one after
// another with the nats CLI, and returns the rate.
func createStreams(c *cluster, natsBin string, n int) (float64, error) {
	start := time.Now()
	for i := range n {
		name := "idle-" + strconv.Itoa(i)
		cmd := exec.Command(filepath.Join(natsBin, "nats"), "--server", strings.Join(c.clients, ","), "stream", "add", name,
			"--subjects", "idle."+strconv.Itoa(i), "--replicas", "3", "--storage", "file", "--defaults")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("nats stream add %s: %v\n%s", name, err, out)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// rssMiB is a process's resident memory (VmRSS) in MiB.
func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}
