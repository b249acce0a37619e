package test

import (
	"fmt"
	"github.com/cairnmq/cairn/client/history"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The pause test's shape.
const (
	shortPause        = 2 * time.Second
	shortPauseWatch   = 6 * time.Second // after SIGCONT: past a suspicion timeout (3 s) and a probe
	longPause         = 15 * time.Second
	rejoinDeadline    = 30 * time.Second // SIGCONT to alive on every other node
	settleDeadline    = 30 * time.Second // to every replica caught up
	pauseWarmSends    = 200
	pauseWarmReceived = 60
	pauseAfterSends   = 100 // sends on the other front-ends during a pause
)

// TestCluster3_SIGSTOPPauseIsNotDeath checks the failure detector's
// tuning (a node paused for 2 s under CPU load is not declared dead, and a
// killed node is declared dead within about 5 s) with the
// real binary, under the failover workload:
//
//   - a node stopped with SIGSTOP for 2 s and continued is never declared
//     dead: the cluster status of both other nodes shows it alive, polled
//     during the pause and for 6 s after it, and sends on the other
//     front-ends go on during the pause;
//   - a node stopped for 15 s is declared dead (alive=false) within about
//     10 s, the members it hosted get new hosts, the other front-ends go on
//     sending, and once continued the node is alive again and catches up
//     (every replica's lag 0);
//
// then every member is drained and the history is checked as in
// TestCluster3_SIGKILLHostUnderLoad.
func TestCluster3_SIGSTOPPauseIsNotDeath(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	const queue, members = "pause", 3
	c.createQueue(queue, members)
	h := newHistory()
	var budget atomic.Int64

	shortPauseCycle(t, c, h, &budget, queue, members)
	if t.Failed() {
		t.FailNow()
	}
	longPauseCycle(t, c, h, &budget, queue, members)
	if t.Failed() {
		t.FailNow()
	}
	c.drainCluster(h, queue, members, 0)
	reportHistory(t, h)
	checkDeliveryCounts(t, h, budget.Load())
}

func pauseLoad(c *processCluster, h *history.History, budget *atomic.Int64, queue string, members int, phase string, noConsumersOn map[int]bool) *load {
	return startLoad(c, h, budget, loadConfig{
		queue: queue, members: members, phase: phase,
		producers: 2, sendsPerPro: 6000, recvPerCons: 5000, sendPause: 5 * time.Millisecond,
		noConsumersOn: noConsumersOn,
	})
}

// aliveAsSeenBy polls the status of each node but i and reports, for
// each, whether it shows node i alive; a node that does not answer in time
// is left out.
func (c *processCluster) aliveAsSeenBy(i int) map[string]bool {
	out := map[string]bool{}
	for j := range c.nodes {
		if j == i {
			continue
		}
		st, err := c.statusFrom(j)
		if err != nil {
			continue
		}
		n, ok := nodeState(st, c.nodes[i].nodeID)
		out[c.nodes[j].nodeID] = ok && n.Alive
	}
	return out
}

func shortPauseCycle(t *testing.T, c *processCluster, h *history.History, budget *atomic.Int64, queue string, members int) {
	t.Helper()
	const phase = "short pause"
	l := pauseLoad(c, h, budget, queue, members, phase, nil)
	defer l.finish()
	l.waitUntil(30*time.Second, phase+": traffic before the pause", func() bool {
		s, r := l.totals()
		return s >= pauseWarmSends && r >= pauseWarmReceived
	})
	member := queue + "#1"
	victimID := c.hosts(0)[member]
	if victimID == "" {
		t.Fatalf("%s: %s has no host", phase, member)
	}
	vi, _ := c.node(victimID)
	// Its clients may see outcomes made unknown by the elections that a
	// 2 s pause causes in its groups (Raft's heartbeat timeout is 500 ms).
	l.fault(vi)
	sendsBefore, _, _ := l.liveTotals()
	c.pause(vi)
	pausedAt := time.Now()
	// Both other nodes' status is polled from the moment of SIGSTOP to
	// shortPauseWatch after SIGCONT, in the background: a status call
	// waits up to 2 s for the paused node's report.
	var (
		samples  atomic.Int64
		deadMu   sync.Mutex
		deadSeen []string
		watchers sync.WaitGroup
	)
	watchUntil := pausedAt.Add(shortPause + shortPauseWatch)
	for j := range c.nodes {
		if j == vi {
			continue
		}
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			for time.Now().Before(watchUntil) {
				st, err := c.statusFrom(j)
				if err == nil {
					samples.Add(1)
					if n, ok := nodeState(st, victimID); !ok || !n.Alive {
						deadMu.Lock()
						deadSeen = append(deadSeen, fmt.Sprintf("%s's status %v after SIGSTOP: %+v", c.nodes[j].nodeID, time.Since(pausedAt).Round(time.Millisecond), n))
						deadMu.Unlock()
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Until(pausedAt.Add(shortPause)))
	sendsDuring, _, _ := l.liveTotals()
	c.resume(vi)
	resumedAt := time.Now()
	t.Logf("%s: %s (host of %s) stopped with SIGSTOP for %v; the other front-ends sent %d messages meanwhile",
		phase, victimID, member, resumedAt.Sub(pausedAt).Round(time.Millisecond), sendsDuring-sendsBefore)
	victimSends := l.nodes[vi].sendsOK.Load()
	watchers.Wait()
	t.Logf("%s: %d status answers from the other nodes during the pause and %v after it", phase, samples.Load(), shortPauseWatch)
	if len(deadSeen) > 0 {
		t.Errorf("%s: a node paused for %v was declared dead: %v", phase, shortPause, deadSeen)
	}
	if samples.Load() == 0 {
		t.Errorf("%s: no cluster status answered while watching the paused node", phase)
	}
	if sendsDuring == sendsBefore {
		t.Errorf("%s: no send succeeded on the other front-ends during the pause", phase)
	}
	if n := l.nodes[vi].sendsOK.Load() - victimSends; n == 0 {
		t.Errorf("%s: no send succeeded on %s's front-end in the %v after SIGCONT", phase, victimID, shortPauseWatch)
	} else {
		t.Logf("%s: %s's front-end sent %d messages in the %v after SIGCONT", phase, victimID, n, shortPauseWatch)
	}
	l.finish()
	l.report()
}

func longPauseCycle(t *testing.T, c *processCluster, h *history.History, budget *atomic.Int64, queue string, members int) {
	t.Helper()
	const phase = "long pause"
	hosts := c.hosts(0)
	member := queue + "#2"
	victimID := hosts[member]
	if victimID == "" {
		t.Fatalf("%s: %s has no host", phase, member)
	}
	vi, _ := c.node(victimID)
	observer := (vi + 1) % len(c.nodes)
	var led []string
	for m, hst := range hosts {
		if hst == victimID {
			led = append(led, m)
		}
	}
	// The paused node's front-end gets producers only: a consumer there
	// would go on handing out the messages it prefetched after the cluster
	// released them (TestCluster3_PausedFrontEndHandsOutReleasedMessages).
	// Its sessions on the members still matter: its producers' sends, and
	// the consumers of its member on the other front-ends.
	l := pauseLoad(c, h, budget, queue, members, phase, map[int]bool{vi: true})
	defer l.finish()
	l.waitUntil(30*time.Second, phase+": traffic before the pause", func() bool {
		s, r := l.totals()
		return s >= pauseWarmSends && r >= pauseWarmReceived
	})

	l.fault(vi)
	c.pause(vi)
	pausedAt := time.Now()
	t.Logf("%s: SIGSTOP %s, host of %v", phase, victimID, led)

	// Declared dead within about 10 s.
	var deadAfter time.Duration
	for {
		if alive, ok := c.aliveAsSeenBy(vi)[c.nodes[observer].nodeID]; ok && !alive {
			deadAfter = time.Since(pausedAt)
			break
		}
		if time.Since(pausedAt) > deadDeadline {
			l.finish()
			t.Fatalf("%s: %s stopped %v ago is still alive in %s's status", phase, victimID, deadDeadline, c.nodes[observer].nodeID)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: %s declared dead %v after SIGSTOP", phase, victimID, deadAfter.Round(time.Millisecond))
	if deadAfter > 10*time.Second {
		t.Errorf("%s: %s declared dead only %v after SIGSTOP, want about 5 s", phase, victimID, deadAfter)
	}
	// Its members fail over.
	for _, m := range led {
		nh, took := c.waitHost(observer, m, victimID, pausedAt)
		t.Logf("%s: %s has a new host, %s, %v after SIGSTOP", phase, m, nh, took.Round(time.Millisecond))
	}
	// The other front-ends carry on.
	sendsBefore, recvBefore, _ := l.liveTotals()
	l.waitUntil(longPause, phase+": traffic on the other front-ends during the pause", func() bool {
		s, _, _ := l.liveTotals()
		return s-sendsBefore >= pauseAfterSends
	})
	if d := time.Until(pausedAt.Add(longPause)); d > 0 {
		time.Sleep(d)
	}
	sendsDuring, recvDuring, _ := l.liveTotals()
	c.resume(vi)
	resumedAt := time.Now()
	t.Logf("%s: SIGCONT %s after %v; meanwhile, after the failover, the other front-ends sent %d messages and received %d",
		phase, victimID, resumedAt.Sub(pausedAt).Round(time.Millisecond), sendsDuring-sendsBefore, recvDuring-recvBefore)

	// It rejoins: alive again on both other nodes.
	for {
		seen := c.aliveAsSeenBy(vi)
		if len(seen) == len(c.nodes)-1 && !containsValue(seen, false) {
			break
		}
		if time.Since(resumedAt) > rejoinDeadline {
			l.finish()
			t.Fatalf("%s: %s not alive again %v after SIGCONT: %v", phase, victimID, rejoinDeadline, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: %s alive again %v after SIGCONT", phase, victimID, time.Since(resumedAt).Round(time.Millisecond))
	sendsBefore, _, _ = l.liveTotals()
	l.waitUntil(30*time.Second, phase+": traffic after the rejoin", func() bool {
		s, _, _ := l.liveTotals()
		return s-sendsBefore >= pauseAfterSends
	})
	l.finish()
	l.report()

	// Caught up: every replica of every group, as every node sees it.
	start := time.Now()
	for i := range c.nodes {
		var why string
		for {
			st, err := c.statusFrom(i)
			ok := false
			if err != nil {
				why = err.Error()
			} else {
				ok, why = settled(st, len(c.nodes))
			}
			if ok {
				break
			}
			if time.Since(start) > settleDeadline {
				t.Fatalf("%s: %v after the rejoin, %s's status: %s", phase, settleDeadline, c.nodes[i].nodeID, why)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("%s: every replica caught up (lag 0) %v after SIGCONT", phase, time.Since(resumedAt).Round(time.Millisecond))
}

func containsValue(m map[string]bool, v bool) bool {
	for _, x := range m {
		if x == v {
			return true
		}
	}
	return false
}
