package test

import (
	"fmt"
	"github.com/cairnmq/cairn/client/history"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The failover workload's shape, per kill cycle.
const (
	failoverProducers    = 2    // per node
	failoverSendsPerProd = 4000 // bound of one producer's sends in a cycle
	failoverRecvPerCons  = 3000 // bound of one consumer's receipts in a cycle
	failoverWarmSends    = 300  // successful sends before the kill
	failoverWarmReceived = 100  // receipts before the kill
	failoverAfterSends   = 150  // successful sends on the surviving front-ends after the new host
	failoverAfterRecv    = 50   // receipts on the surviving front-ends after the new host
	failoverPhaseTimeout = 30 * time.Second
)

// TestCluster3_SIGKILLHostUnderLoad is the three-node failover test: three nodes
// started at the same moment form one cluster; a queue with three members
// (one hosted on each node) is fed by producers on every front-end and
// consumed, member by member, by IndividualAck and ClientAck consumers on
// every front-end, which acknowledge most of what they get and hold the
// rest across the faults. Mid-stream the host of a member is killed with
// SIGKILL; a new host must be elected within a few seconds, and producers
// and consumers on the two other front-ends carry on (their sends succeed,
// their consumers of the failed-over member get messages again, and the
// deliveries they held through the failover can still be acknowledged).
// The killed node is restarted with the same flags and data, and the cycle
// is repeated on another member's host (two cycles; one with -short).
// Finally every member is drained and the history is checked: no send that
// returned ok is missing, nothing acknowledged came back, every message
// delivered again is marked redelivered with a delivery count that counts
// its deliveries, and nothing came that was not sent.
func TestCluster3_SIGKILLHostUnderLoad(t *testing.T) {
	cycles := 2
	if testing.Short() {
		cycles = 1
	}
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	const queue, members = "failover", 3
	c.createQueue(queue, members)
	h := newHistory()
	var budget atomic.Int64
	victims := map[string]string{} // phase → killed node
	for cycle := 1; cycle <= cycles; cycle++ {
		phase, victim := killCycle(t, c, h, &budget, queue, members, cycle)
		if t.Failed() {
			t.FailNow()
		}
		victims[phase] = victim
	}
	c.drainCluster(h, queue, members, 0)
	reportHistory(t, h)
	checkDeliveryCounts(t, h, budget.Load())
	// What the consumers on the killed front-ends held came back, marked
	// (the history check says so too; this says how much there was).
	for phase, victim := range victims {
		held, back := heldCameBack(h, phase+" ", victim)
		t.Logf("%s: consumers on %s held %d messages unacknowledged when it was killed; %d came back marked redelivered", phase, victim, held, back)
		if held == 0 {
			t.Errorf("%s: the consumers on %s held nothing when it was killed; the test did not test that", phase, victim)
		}
		if back != held {
			t.Errorf("%s: of %d messages held on %s when it was killed, %d came back marked redelivered", phase, held, victim, back)
		}
	}
}

// killCycle runs the workload, kills the host of member cycle-1 with
// SIGKILL once it is under way, checks the failover and that the other
// front-ends carry on, stops the workload and restarts the killed node.
func killCycle(t *testing.T, c *processCluster, h *history.History, budget *atomic.Int64, queue string, members, cycle int) (phase, victimID string) {
	t.Helper()
	phase = fmt.Sprintf("cycle %d", cycle)
	l := startLoad(c, h, budget, loadConfig{
		queue: queue, members: members, phase: phase,
		producers: failoverProducers, sendsPerPro: failoverSendsPerProd, recvPerCons: failoverRecvPerCons,
		sendPause: 2 * time.Millisecond,
	})
	defer l.finish()

	warm := l.waitUntil(failoverPhaseTimeout, phase+": traffic before the kill", func() bool {
		s, r := l.totals()
		return s >= failoverWarmSends && r >= failoverWarmReceived
	})

	// The victim: the host of member cycle-1, as a node sees it.
	member := fmt.Sprintf("%s#%d", queue, (cycle-1)%members)
	hosts := c.hosts(cycle % len(c.nodes))
	victimID = hosts[member]
	if victimID == "" {
		t.Fatalf("%s: %s has no host (%v)", phase, member, hosts)
	}
	vi, victim := c.node(victimID)
	observer := (vi + 1) % len(c.nodes)

	l.fault(vi)
	sendsBefore, recvBefore, _ := l.liveTotals()
	killedAt := time.Now()
	victim.kill()
	t.Logf("%s: SIGKILL %s, host of %s (hosts %v), after %v of traffic: %s", phase, victimID, member, hosts, warm.Round(time.Millisecond), l.summary())

	newHost, took := c.waitHost(observer, member, victimID, killedAt)
	t.Logf("%s: %s has a new host, %s, %v after the kill", phase, member, newHost, took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("%s: a new host for %s took %v, want a few seconds", phase, member, took)
	}

	// The surviving front-ends carry on: sends succeed and consumers of
	// the failed-over member, on the other front-ends, get messages again.
	recvMember := func() int64 {
		n := int64(0)
		for _, m := range h.Messages() {
			for _, r := range m.Receipts {
				if strings.HasPrefix(r.Phase, phase+" ") && memberOfPhase(r.Phase) == member {
					n++
				}
			}
		}
		return n
	}
	memberBefore := recvMember()
	sendsBefore, recvBefore, _ = l.liveTotals()
	after := l.waitUntil(failoverPhaseTimeout, phase+": traffic on the surviving front-ends after the failover", func() bool {
		s, r, _ := l.liveTotals()
		return s-sendsBefore >= failoverAfterSends && r-recvBefore >= failoverAfterRecv
	})
	sendsAfter, recvAfter, _ := l.liveTotals()
	t.Logf("%s: after the new host, in %v, the surviving front-ends sent %d messages and received %d; consumers of %s received %d",
		phase, after.Round(time.Millisecond), sendsAfter-sendsBefore, recvAfter-recvBefore, member, recvMember()-memberBefore)

	// The killed node comes back with its flags and data while the others
	// carry on; leadership moves back to the preferred hosts (another
	// change of host under load), so the next cycle kills the host of
	// another member on another node.
	start := time.Now()
	victim.start()
	t.Logf("%s: %s restarted with its data, ready in %v", phase, victimID, time.Since(start).Round(time.Millisecond))
	if c.waitBalanced(observer, 10*time.Second) {
		t.Logf("%s: every member back on its own host %v after the restart", phase, time.Since(start).Round(time.Millisecond))
	}
	sendsBefore, recvBefore, _ = l.liveTotals()
	l.waitUntil(failoverPhaseTimeout, phase+": traffic on the surviving front-ends after the restart", func() bool {
		s, r, _ := l.liveTotals()
		return s-sendsBefore >= failoverAfterSends && r-recvBefore >= failoverAfterRecv
	})
	l.finish()
	l.report()
	return phase, victimID
}

// memberOfPhase is the member a consumer phase ("cycle 1 q#0@n2") consumed.
func memberOfPhase(phase string) string {
	sp, at := -1, -1
	for i := len(phase) - 1; i >= 0; i-- {
		switch {
		case phase[i] == '@' && at < 0:
			at = i
		case phase[i] == ' ' && sp < 0:
			sp = i
		}
	}
	if sp < 0 || at < sp {
		return ""
	}
	return phase[sp+1 : at]
}
