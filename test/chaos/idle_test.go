package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// Idle queues beside the busy one. A queue's members share Raft groups
// with every other queue placed on the same nodes (cluster/DESIGN.md), so
// verify's busy queue fails over, moves and snapshots together with every
// idle one, and an idle queue's message must survive what the busy one's
// do. Each idle queue gets one message (dedup id "idle") before the faults;
// after them every member must have a host again and each queue must still
// hold its one message.

// idleQueues is how many idle queues a target holds beside verify's:
// CAIRN_CHAOS_IDLE_QUEUES, default 100.
func idleQueues(t *testing.T) int {
	return envInt(t, "CAIRN_CHAOS_IDLE_QUEUES", 100)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number of queues", name, v)
	}
	return n
}

func idleName(i int) string { return fmt.Sprintf("idle-%d", i) }

func admin(t *testing.T, tg target) *client.Admin {
	t.Helper()
	_, o := tg.credentials(t)
	a, err := client.NewAdmin(strings.Split(tg.clientAddrs(), ","), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// createIdle creates idle-0 .. idle-(n-1) one after another, as an
// operator's script would, and returns how many a second.
func createIdle(t *testing.T, tg target, n int) float64 {
	t.Helper()
	a := admin(t, tg)
	start := time.Now()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := a.CreateQueue(ctx, idleName(i), client.QueueOptions{})
		cancel()
		if err != nil {
			t.Fatalf("creating queue %d of %d: %v", i+1, n, err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// sendIdle sends each of the addresses one message with dedup id "idle",
// from workers sessions, retrying each until it is stored or the deadline
// passes, and returns when each one was stored. A retried send whose first
// try was stored is dropped by the member's duplicate detection.
func sendIdle(t *testing.T, tg target, addrs []string, workers int, deadline time.Time) []time.Time {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Forwarded by the node the connection is on, so that a send waits for
	// the member's new host and not for the client to find it.
	_, o := tg.credentials(t)
	o.NoDirectSends = true
	conn, err := client.Dial(ctx, strings.Split(tg.clientAddrs(), ","), o)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stored := make([]time.Time, len(addrs))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	for range workers {
		wg.Go(func() {
			s, err := conn.Session(client.AutoAck)
			if err != nil {
				mu.Lock()
				failed = append(failed, err.Error())
				mu.Unlock()
				return
			}
			for i := range next {
				p, err := s.Producer(addrs[i])
				for err == nil {
					sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
					_, err = p.Send(sctx, &client.Message{Body: []byte(addrs[i]), DedupID: "idle"})
					scancel()
					if err == nil {
						stored[i] = time.Now()
						break
					}
					if ctx.Err() != nil {
						break
					}
					err = nil
					time.Sleep(20 * time.Millisecond)
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s: %v", addrs[i], err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range addrs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d sends to idle queues not stored by %v: %s", len(failed), deadline.Format(time.TimeOnly), strings.Join(failed[:min(5, len(failed))], "; "))
	}
	return stored
}

// checkIdle waits until every member of the queues in want has a host and
// each queue holds want[name] messages.
func checkIdle(t *testing.T, tg target, want map[string]uint64, d time.Duration) {
	t.Helper()
	a := admin(t, tg)
	deadline := time.Now().Add(d)
	for {
		problem := idleProblem(a, want)
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle queues after %v: %s", d, problem)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// idleProblem is what is wrong with the idle queues, or "".
func idleProblem(a *client.Admin, want map[string]uint64) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	qs, err := a.ListQueues(ctx)
	if err != nil {
		return err.Error()
	}
	seen := 0
	for _, q := range qs {
		w, ok := want[q.Name]
		if !ok {
			continue
		}
		seen++
		for _, m := range q.Members {
			if m.Host == "" {
				return m.Name + " has no host"
			}
		}
		if q.Pending != w {
			return fmt.Sprintf("%s holds %d messages, want %d", q.Name, q.Pending, w)
		}
	}
	if seen != len(want) {
		return fmt.Sprintf("%d of %d idle queues listed", seen, len(want))
	}
	return ""
}

// A node SIGKILLed while it hosts a third of a thousand queues' members:
// every member it hosted takes a send through another node again, and
// nothing verify sent through the kill is lost. The distribution of the
// times from the kill to each member's first stored send is logged (and
// kept in docs/performance.md, "Idle destinations"); the test fails only
// if a member is not served again within a minute. The node then starts
// again with an empty data directory, and the time until every member has
// its replicas back (caught up) is logged too.
// CAIRN_CHAOS_KILL_QUEUES sets the number of queues (default 1000).
func TestChaos_KillWithAThousandQueues(t *testing.T) {
	if !enabled() {
		t.Skip("the chaos suite runs with CAIRN_CHAOS=1 (make chaos)")
	}
	n := envInt(t, "CAIRN_CHAOS_KILL_QUEUES", 1000)
	c := newLocalCluster(t)
	t.Logf("%d queues created, %.1f a second", n, createIdle(t, c, n))

	d := scenarioDuration(t)
	verify := startVerify(t, c, d, "--dedup")
	sleepUntil(d/3, time.Now().Add(d))

	// The victim is the host of verify's queue, so verify goes through
	// the kill too; it hosts a third of the idle members.
	victim := victim(t, c, false)
	st, err := admin(t, c).ClusterStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var hosted []string
	for _, g := range st.Groups {
		if strings.HasPrefix(g.Name, "idle-") && g.Leader == c.nodes[victim].id {
			hosted = append(hosted, g.Name)
		}
	}
	if len(hosted) == 0 {
		t.Fatalf("%s hosts no idle member", c.nodes[victim].id)
	}
	t.Logf("nemesis: SIGKILL %s, host of %d idle members", c.describe(victim), len(hosted))
	killed := time.Now()
	c.kill(t, victim)
	stored := sendIdle(t, c, hosted, 20, killed.Add(time.Minute))
	took := make([]time.Duration, len(stored))
	for i, at := range stored {
		took[i] = at.Sub(killed)
	}
	slices.Sort(took)
	at := func(q float64) time.Duration { return took[int(q*float64(len(took)-1))].Round(10 * time.Millisecond) }
	t.Logf("from the kill to each of %d members' first stored send: p50 %v, p90 %v, p99 %v, max %v",
		len(took), at(0.5), at(0.9), at(0.99), at(1))

	// The victim comes back with an empty data directory: its replicas of
	// the 3000 members catch up as new ones.
	back := time.Now()
	c.startEmpty(t, victim)
	c.heal(t) // ready: registered again, its replicas marked as rejoining
	ready := time.Since(back)
	wait.For(t, 5*time.Minute, "every member's replicas caught up", func() bool { return repaired(t, c) })
	t.Logf("from the empty start to the node ready: %v; to no member short of replicas: %v", ready.Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond))
	verify.wait(t)
	want := map[string]uint64{}
	for i := range n {
		want[idleName(i)] = 0
	}
	for _, m := range hosted {
		name, _, _ := strings.Cut(m, "#")
		want[name]++
	}
	checkIdle(t, c, want, time.Minute)
}
