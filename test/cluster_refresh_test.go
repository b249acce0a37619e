package test

import (
	"fmt"
	"testing"
	"time"
)

// Issue 5 on three real processes: `cairn send` and `cairn receive` use the
// reconnecting client, so each survives the SIGKILL of the node it talks to.
// The idempotent sender ends every message "ok" and none is stored twice;
// the receiver gets every message, a message whose acknowledge the kill cut
// off at most twice (again, marked redelivered), and none it acknowledged
// before the kill again.
func TestCluster3_CLI_SendAndReceiveSurviveTheirNode(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	hi, _ := c.node(c.createQueue("cr", 1).Members[0].Host)
	front, other := (hi+1)%3, (hi+2)%3
	env := []string{"CAIRN_SERVER=" + c.nodes[front].addrs.client}
	const total = 400

	// killWhen kills the front-end once cond holds of the queue.
	killWhen := func(what string, cond func(pending, delivered uint64) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			q := c.nodes[other].showQueue("cr")
			if cond(q.Pending, q.Delivered) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not get under way: %+v", what, q)
			}
			time.Sleep(10 * time.Millisecond)
		}
		c.nodes[front].kill()
		t.Logf("killed %s under %s", c.nodes[front].nodeID, what)
	}

	sent := make(chan cliResult, 1)
	go func() { sent <- cli(t, env, "send", "cr", "--count", fmt.Sprint(total), "--idempotent", "--json") }()
	killWhen("cairn send", func(pending, _ uint64) bool { return pending >= 50 })
	s := <-sent
	if s.code != 0 {
		t.Fatalf("cairn send: exit %d\nstderr: %s", s.code, s.stderr)
	}
	lines := jsonLines(t, s.stdout)
	for _, line := range lines {
		if line["outcome"] != "ok" {
			t.Errorf("send through the kill: %v", line)
		}
	}
	if q := c.nodes[other].showQueue("cr"); len(lines) != total || q.Pending != total {
		t.Fatalf("cairn send printed %d lines and the queue holds %d; want %d of each", len(lines), q.Pending, total)
	}

	c.nodes[front].start()
	c.waitSettled(30 * time.Second)
	received := make(chan cliResult, 1)
	go func() {
		received <- cli(t, env, "receive", "cr", "--count", fmt.Sprint(total), "--ack", "client", "--timeout", "50s", "--json")
	}()
	killWhen("cairn receive", func(pending, delivered uint64) bool { return pending+delivered <= total-50 })
	r := <-received
	if r.code != 0 {
		t.Fatalf("cairn receive: exit %d\nstderr: %s", r.code, r.stderr)
	}
	got := map[string]int{}
	for _, line := range jsonLines(t, r.stdout) {
		b := fmt.Sprint(line["body"])
		got[b]++
		if got[b] > 1 && line["redelivered"] != true {
			t.Errorf("%q came again unmarked", b)
		}
	}
	for b, n := range got {
		var i int
		if _, err := fmt.Sscanf(b, "message %d", &i); err != nil || i < 1 || i > total {
			t.Errorf("received %q, never sent", b)
		}
		if n > 2 {
			t.Errorf("received %q %d times", b, n)
		}
	}
	// What it printed twice it did not print otherwise: the rest waits.
	q := c.nodes[other].showQueue("cr")
	if len(got)+int(q.Pending+q.Delivered) != total {
		t.Errorf("%d distinct messages received and the queue holds %+v; want %d in all", len(got), q, total)
	}
	t.Logf("cairn receive printed %d lines, %d distinct", total, len(got))
}
