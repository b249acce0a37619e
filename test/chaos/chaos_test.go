// Package chaos is Cairn's chaos suite: a nemesis runs fault schedules
// against the three-node compose cluster (deploy/compose.yaml) while
// `cairn verify` runs a workload through them, and every scenario ends with
// all faults healed and the checker's verdict. `make chaos` runs a short
// pass of each scenario; `make chaos-long` a soak. Both need Docker and the
// image (`make image`); without CAIRN_CHAOS=1 the tests skip, so `make test`
// does not run them.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const project = "cairn-chaos"

var (
	cairnBin string
	root     string
)

// clientAddrs are the compose cluster's client ports on this host.
var clientAddrs = "127.0.0.1:7650,127.0.0.1:7660,127.0.0.1:7670"

func enabled() bool { return os.Getenv("CAIRN_CHAOS") == "1" }

// scenarioDuration is how long each scenario's workload runs
// (CAIRN_CHAOS_DURATION, default 30 s).
func scenarioDuration(t *testing.T) time.Duration {
	if v := os.Getenv("CAIRN_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CAIRN_CHAOS_DURATION=%q: %v", v, err)
		}
		return d
	}
	return 30 * time.Second
}

func TestMain(m *testing.M) {
	if enabled() {
		var err error
		if root, err = filepath.Abs("../.."); err == nil {
			dir, derr := os.MkdirTemp("", "cairn-chaos-")
			err = derr
			if err == nil {
				defer os.RemoveAll(dir)
				cairnBin = filepath.Join(dir, "cairn")
				cmd := exec.Command("go", "build", "-o", cairnBin, "./cmd/cairn")
				cmd.Dir = root
				if out, berr := cmd.CombinedOutput(); berr != nil {
					err = fmt.Errorf("%v\n%s", berr, out)
				}
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: building cairn:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// run runs a command bounded to two minutes and returns its output.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := run(t, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func compose(t *testing.T, args ...string) string {
	t.Helper()
	return must(t, "docker-compose", append([]string{"-f", "deploy/compose.yaml", "-p", project}, args...)...)
}

func container(i int) string { return fmt.Sprintf("%s_cairn-%d_1", project, i) }

const network = project + "_cairn"

// waitHealthy waits until every container is running and healthy.
func waitHealthy(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		out, _ := run(t, "docker", "inspect", "-f", "{{.State.Health.Status}}", container(0), container(1), container(2))
		if strings.Count(out, "healthy") == 3 && !strings.Contains(out, "unhealthy") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the compose cluster is not healthy after %v: %q", d, out)
		}
		time.Sleep(time.Second)
	}
}

// status is what the nemesis needs of `cairn cluster status --json`.
type status struct {
	Nodes []struct {
		ID       string `json:"id"`
		MetaRole string `json:"meta_role"`
	} `json:"nodes"`
	Groups []struct {
		Name   string `json:"name"`
		Leader string `json:"leader"`
	} `json:"groups"`
}

// victim is the container of the meta leader, or of a member's host: the
// nodes whose loss costs the most.
func victim(t *testing.T, metaLeader bool) int {
	t.Helper()
	out, err := run(t, cairnBin, "--server", clientAddrs, "cluster", "status", "--json")
	var st status
	if err == nil && json.Unmarshal([]byte(out), &st) == nil {
		for _, n := range st.Nodes {
			if metaLeader && n.MetaRole == "leader" {
				return nodeIndex(n.ID)
			}
		}
		for _, g := range st.Groups {
			if !metaLeader && strings.HasPrefix(g.Name, "verify-") && g.Leader != "" {
				return nodeIndex(g.Leader)
			}
		}
	}
	return rand.IntN(3)
}

func nodeIndex(id string) int {
	var i int
	if _, err := fmt.Sscanf(id, "cairn-%d", &i); err != nil || i < 0 || i > 2 {
		return 0
	}
	return i
}

// heal undoes every fault: unpaused, connected, started.
func heal(t *testing.T) {
	t.Helper()
	for i := range 3 {
		c := container(i)
		run(t, "docker", "unpause", c)
		run(t, "docker", "network", "connect", "--alias", fmt.Sprintf("cairn-%d", i), network, c)
		run(t, "docker", "start", c)
	}
	waitHealthy(t, 90*time.Second)
}

// sleepUntil waits d, or less if end comes first; false once end passed.
func sleepUntil(d time.Duration, end time.Time) bool {
	if left := time.Until(end); left < d {
		d = left
	}
	if d > 0 {
		time.Sleep(d)
	}
	return time.Now().Before(end)
}

// between is a random duration in [lo, hi).
func between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}

// scenario is a nemesis schedule: it applies faults until end and returns
// with some of them possibly still in place (heal undoes them).
type scenario struct {
	name    string
	verify  []string
	nemesis func(t *testing.T, end time.Time)
}

var scenarios = []scenario{
	{"kill the member host or the meta leader every 10-20 s", []string{"--dedup"}, func(t *testing.T, end time.Time) {
		for n := 0; sleepUntil(between(10*time.Second, 20*time.Second), end); n++ {
			i := victim(t, n%2 == 1)
			t.Logf("nemesis: docker kill %s", container(i))
			must(t, "docker", "kill", container(i))
			sleepUntil(3*time.Second, end.Add(time.Minute))
			must(t, "docker", "start", container(i))
		}
	}},
	{"pause a node for 5 s", nil, func(t *testing.T, end time.Time) {
		for sleepUntil(between(5*time.Second, 10*time.Second), end) {
			i := victim(t, false)
			t.Logf("nemesis: docker pause %s for 5 s", container(i))
			must(t, "docker", "pause", container(i))
			sleepUntil(5*time.Second, end.Add(time.Minute))
			must(t, "docker", "unpause", container(i))
		}
	}},
	{"isolate a node from the network for 10 s", []string{"--transactions"}, func(t *testing.T, end time.Time) {
		for sleepUntil(between(5*time.Second, 10*time.Second), end) {
			i := victim(t, true)
			t.Logf("nemesis: docker network disconnect %s for 10 s", container(i))
			must(t, "docker", "network", "disconnect", network, container(i))
			sleepUntil(10*time.Second, end.Add(time.Minute))
			must(t, "docker", "network", "connect", "--alias", fmt.Sprintf("cairn-%d", i), network, container(i))
		}
	}},
	{"restart the whole cluster", nil, func(t *testing.T, end time.Time) {
		if sleepUntil(time.Until(end)/3, end) {
			t.Logf("nemesis: docker restart of all three nodes at once")
			must(t, "docker", "restart", "-t", "10", container(0), container(1), container(2))
			waitHealthy(t, 90*time.Second)
		}
	}},
	{"rolling restart", nil, func(t *testing.T, end time.Time) {
		sleepUntil(time.Until(end)/4, end)
		for i := range 3 {
			t.Logf("nemesis: docker restart %s", container(i))
			must(t, "docker", "restart", "-t", "30", container(i))
			waitHealthy(t, 90*time.Second)
		}
	}},
}

// Every scenario against the compose cluster: verify through the faults,
// heal, and the checker finds no violation.
func TestChaos_Compose(t *testing.T) {
	if !enabled() {
		t.Skip("the chaos suite runs with CAIRN_CHAOS=1 (make chaos)")
	}
	if out, err := run(t, "docker", "info"); err != nil {
		t.Skipf("no Docker engine answers: %v\n%s", err, out)
	}
	if out, err := run(t, "docker", "image", "inspect", "cairn:dev"); err != nil {
		t.Fatalf("no cairn:dev image (make image): %v\n%s", err, out)
	}
	run(t, "docker-compose", "-f", "deploy/compose.yaml", "-p", project, "down", "-v")
	compose(t, "up", "-d")
	t.Cleanup(func() {
		if t.Failed() {
			for i := range 3 {
				out, _ := run(t, "docker", "logs", "--tail", "40", container(i))
				t.Logf("last lines of %s:\n%s", container(i), out)
			}
		}
		run(t, "docker-compose", "-f", "deploy/compose.yaml", "-p", project, "down", "-v")
	})
	waitHealthy(t, 90*time.Second)
	d := scenarioDuration(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			args := append([]string{"--server", clientAddrs, "verify", "--duration", d.String(), "--producers", "2", "--consumers", "2", "--json"}, sc.verify...)
			ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, cairnBin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc.nemesis(t, time.Now().Add(d))
			heal(t)
			err := cmd.Wait()
			t.Logf("cairn verify %s: %s", strings.Join(sc.verify, " "), strings.TrimSpace(stdout.String()))
			if err != nil {
				t.Fatalf("cairn verify: %v\nstdout: %s\nstderr: %s", err, stdout.String(), lastLines(stderr.String(), 20))
			}
		})
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
