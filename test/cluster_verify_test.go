package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `cairn verify` is a product feature: pointed at a cluster while a node is
// killed, it runs its workload through the failover, drains the queue and
// finds no violation; plain, with transactions and dedup ids, and on a
// topic (--topics: each subscription's history checked, a durable one
// receiving every publish). Its history file holds a line per event.
func TestCluster3_Verify_FindsNoViolationThroughAKill(t *testing.T) {
	for i, args := range [][]string{
		{"--producers", "2", "--consumers", "2"},
		{"--producers", "2", "--consumers", "2", "--transactions", "--dedup"},
		{"--producers", "2", "--consumers", "2", "--topics", "--transactions", "--dedup"},
	} {
		// Each workload on a cluster of its own, one after the other:
		// three race-built clusters side by side, beside the cluster
		// package's tests, starved the machine's two cores.
		name := strings.Join(append([]string{"plain"}, args[4:]...), " ")
		t.Run(name, func(t *testing.T) { verifyThroughAKill(t, 1+i%2, args) })
	}
}

// verifyThroughAKill runs cairn verify with args on a new cluster, kills
// its node victim once the workload is under way, and checks the report.
func verifyThroughAKill(t *testing.T, victimIndex int, args []string) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	env := []string{"CAIRN_SERVER=" + strings.Join(c.clientAddrs(0), ",")}
	hist := filepath.Join(t.TempDir(), "history.jsonl")
	done := make(chan cliResult, 1)
	go func() {
		// The kill lands on one of the workload's four connections.
		done <- cli(t, env, append([]string{"verify", "--duration", "8s", "--json", "--history", hist, "--min-faults", "1"}, args...)...)
	}()
	// Kill once the workload is well under way.
	waitWorkload(t, hist)
	victim := c.nodes[victimIndex]
	victim.kill()
	t.Logf("verify %v: killed %s", args, victim.nodeID)
	r := <-done
	type report struct {
		Subscription string         `json:"subscription"`
		SentOK       int            `json:"sent_ok"`
		Received     int            `json:"received"`
		Violations   map[string]int `json:"violations"`
		Examples     []string       `json:"examples"`
		OK           bool           `json:"ok"`
	}
	var rep struct {
		report
		Subscriptions []report `json:"subscriptions"` // --topics
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("verify %v: exit %d, output %q: %v\nstderr: %s", args, r.code, r.stdout, err, r.stderr)
	}
	t.Logf("verify %v: %s", args, strings.TrimSpace(r.stdout))
	if len(rep.Subscriptions) > 0 {
		kinds := ""
		for _, s := range rep.Subscriptions {
			kinds += s.Subscription + " "
			if !s.OK || s.SentOK == 0 || s.Received == 0 || (s.Subscription != "non-durable" && s.Received < s.SentOK) {
				t.Errorf("verify %v: subscription %+v", args, s)
			}
		}
		if kinds != "durable shared non-durable " {
			t.Errorf("verify %v: subscriptions %q, want durable, shared, non-durable", args, kinds)
		}
		rep.SentOK, rep.Received = rep.Subscriptions[0].SentOK, rep.Subscriptions[0].Received
	}
	if r.code != 0 || !rep.OK || rep.SentOK == 0 || rep.Received == 0 {
		t.Fatalf("verify %v: exit %d, report %+v\nstderr: %s", args, r.code, rep, r.stderr)
	}
	b, err := os.ReadFile(hist)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines < rep.SentOK {
		t.Errorf("history file has %d lines for %d sends", lines, rep.SentOK)
	}
}

// verifyThrough starts cairn verify for d through servers (2 producers, 2
// consumers) and waits until its workload is under way; judged waits for
// its report and fails the test unless it found nothing wrong.
func verifyThrough(t *testing.T, servers []string, d time.Duration) (judged func()) {
	t.Helper()
	env := []string{"CAIRN_SERVER=" + strings.Join(servers, ",")}
	hist := filepath.Join(t.TempDir(), "history.jsonl")
	done := make(chan cliResult, 1)
	go func() {
		done <- cli(t, env, "verify", "--duration", d.String(), "--json", "--history", hist, "--producers", "2", "--consumers", "2")
	}()
	waitWorkload(t, hist)
	return func() {
		t.Helper()
		r := <-done
		t.Logf("verify: %s", strings.TrimSpace(r.stdout))
		if r.code != 0 || !strings.Contains(r.stdout, `"ok":true`) {
			t.Fatalf("verify: exit %d, %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	}
}

// waitWorkload waits until cairn verify's history at hist holds 100 lines:
// its workload is well under way.
func waitWorkload(t *testing.T, hist string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(hist); strings.Count(string(b), "\n") >= 100 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("verify: no workload in %s after 20 s", hist)
		}
	}
}
