// Package chaos is Cairn's chaos suite: a nemesis runs fault schedules
// against a three-node cluster while `cairn verify` runs a workload through
// them (in the first scenario `cairn verify --topics` beside it, a topic's
// durable, shared and non-durable subscriptions), and every scenario ends
// with all faults healed and the checker's verdict. The schedules are written once, against a target, and run on two:
//
//   - the compose cluster (deploy/compose.yaml): docker kill, docker pause,
//     docker network disconnect, docker restart;
//   - three local `cairn server` processes: SIGKILL, SIGSTOP, and a
//     toxiproxy in front of every client, peer, Raft and HTTP address for
//     partitions, so the suite runs where Docker does not.
//
// Beside verify's busy queue stand idle queues (CAIRN_CHAOS_IDLE_QUEUES,
// default 100) holding one message each, which they must still hold at the
// end, since their members share Raft groups with the busy one's.
// TestChaos_KillWithAThousandQueues kills the node hosting a third of a
// thousand queues' members (CAIRN_CHAOS_KILL_QUEUES) and logs how long each
// took to be served again.
//
// `make chaos` runs a short pass of each scenario on each target (the
// compose one only when Docker answers); `make chaos-local` the local one
// alone; `make chaos-long` a soak. Without CAIRN_CHAOS=1 the tests skip, so
// `make test` does not run them. CAIRN_CHAOS_HISTORY=DIR keeps each
// scenario's history and verify's stderr, and the local nodes' logs, in DIR
// (.ci/run sets it and prints where).
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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/test/wait"
)

var (
	cairnBin string
	root     string
)

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

// cairnArgs are the arguments of a cairn command against tg.
func cairnArgs(t *testing.T, tg target, args ...string) []string {
	flags, _ := tg.credentials(t)
	return append(append([]string{"--server", tg.clientAddrs()}, flags...), args...)
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

// target is a three-node cluster the nemesis can hurt. Nodes are numbered
// 0-2 and their ids are cairn-0..cairn-2 on every target. Each fault has
// its undoing; heal undoes every fault still in place and waits until all
// three nodes are ready.
type target interface {
	// clientAddrs is the --server list for cairn commands.
	clientAddrs() string
	// credentials are how a client proves itself to the nodes: cairn's
	// flags and the Go client's options (none for an open cluster).
	credentials(t *testing.T) (flags []string, opts client.Options)
	describe(i int) string
	kill(t *testing.T, i int)  // SIGKILL
	start(t *testing.T, i int) // after kill
	pause(t *testing.T, i int) // SIGSTOP
	resume(t *testing.T, i int)
	isolate(t *testing.T, i int) // cut off from the network
	reconnect(t *testing.T, i int)
	restart(t *testing.T, i int) // graceful stop, start, wait until ready
	restartAll(t *testing.T)     // all three at once, wait until ready
	// startEmpty, after kill, starts the node under its id with an empty
	// data directory (a new volume), as a pod whose disk was lost.
	startEmpty(t *testing.T, i int)
	heal(t *testing.T)
	// lastWords logs the end of every node's log (for a failed test).
	lastWords(t *testing.T)
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

// status is what the nemesis needs of `cairn cluster status --json`.
type status struct {
	Nodes []struct {
		ID       string `json:"id"`
		MetaRole string `json:"meta_role"`
		Alive    bool   `json:"alive"`
	} `json:"nodes"`
	Groups []struct {
		Name   string `json:"name"`
		Leader string `json:"leader"`
	} `json:"groups"`
	UnderReplicated int `json:"under_replicated"`
}

// victim is the node of the meta leader, or of a member's host: the nodes
// whose loss costs the most.
func victim(t *testing.T, tg target, metaLeader bool) int {
	t.Helper()
	out, err := run(t, cairnBin, cairnArgs(t, tg, "cluster", "status", "--json")...)
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

// repaired reports whether cluster status says every node is alive and no
// member is short of replicas that have caught up.
func repaired(t *testing.T, tg target) bool {
	out, err := run(t, cairnBin, cairnArgs(t, tg, "cluster", "status", "--json")...)
	var st status
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.UnderReplicated != 0 || len(st.Nodes) != 3 {
		return false
	}
	for _, n := range st.Nodes {
		if !n.Alive {
			return false
		}
	}
	return true
}

func nodeIndex(id string) int {
	var i int
	if _, err := fmt.Sscanf(id, "cairn-%d", &i); err != nil || i < 0 || i > 2 {
		return 0
	}
	return i
}

// scenario is a nemesis schedule: it applies faults until end and returns
// with some of them possibly still in place (heal undoes them).
type scenario struct {
	name   string
	verify []string
	// topics, when not nil, runs `cairn verify --topics` with these flags
	// beside the queue's verify.
	topics []string
	// nemesis applies the faults and returns how many it applied: a
	// scenario that applied none did not test what it is named for.
	nemesis func(t *testing.T, tg target, end time.Time) int
}

var scenarios = []scenario{
	{"kill the member host or the meta leader every 10-20 s", []string{"--dedup"}, []string{"--dedup"},
		faultEvery(10*time.Second, 20*time.Second, 3*time.Second, func(n int) bool { return n%2 == 1 }, "kill", target.kill, target.start)},
	{"pause a node for 5 s", nil, nil,
		faultEvery(5*time.Second, 10*time.Second, 5*time.Second, func(int) bool { return false }, "pause", target.pause, target.resume)},
	{"isolate a node from the network for 10 s", []string{"--transactions"}, nil,
		faultEvery(5*time.Second, 10*time.Second, 10*time.Second, func(int) bool { return true }, "isolate", target.isolate, target.reconnect)},
	{"restart the whole cluster", nil, nil, func(t *testing.T, tg target, end time.Time) int {
		if !sleepUntil(time.Until(end)/3, end) {
			return 0
		}
		t.Logf("nemesis: restart of all three nodes at once")
		tg.restartAll(t)
		return 1
	}},
	{"kill a node and start it with an empty data directory, once repaired", nil, nil, func(t *testing.T, tg target, end time.Time) int {
		n := 0
		for ; sleepUntil(between(5*time.Second, 10*time.Second), end); n++ {
			i := victim(t, tg, n%2 == 1)
			t.Logf("nemesis: kill %s, empty its data directory, start it", tg.describe(i))
			tg.kill(t, i)
			sleepUntil(3*time.Second, end.Add(time.Minute))
			start := time.Now()
			tg.startEmpty(t, i)
			// Another node's data may go only once every member has its
			// replicas again: before that it may hold the last copy. Until
			// the node is ready (registered again), the others may not
			// know it came back empty.
			tg.heal(t)
			wait.For(t, 3*time.Minute, "every member's replicas caught up", func() bool { return repaired(t, tg) })
			t.Logf("nemesis: repaired %v after %s started empty", time.Since(start).Round(100*time.Millisecond), tg.describe(i))
		}
		return n
	}},
	{"rolling restart", nil, nil, func(t *testing.T, tg target, end time.Time) int {
		sleepUntil(time.Until(end)/4, end)
		for i := range 3 {
			t.Logf("nemesis: restart %s", tg.describe(i))
			tg.restart(t, i)
		}
		return 3
	}},
}

// faultEvery is a schedule that, every lo to hi until the end, applies a
// fault to a victim (the meta leader's node when metaLeader(n) for the n-th
// fault, else a member host's), holds it, and undoes it.
func faultEvery(lo, hi, hold time.Duration, metaLeader func(n int) bool, what string, apply, undo func(target, *testing.T, int)) func(*testing.T, target, time.Time) int {
	return func(t *testing.T, tg target, end time.Time) int {
		n := 0
		for ; sleepUntil(between(lo, hi), end); n++ {
			i := victim(t, tg, metaLeader(n))
			t.Logf("nemesis: %s %s for %v", what, tg.describe(i), hold)
			apply(tg, t, i)
			sleepUntil(hold, end.Add(time.Minute))
			undo(tg, t, i)
		}
		return n
	}
}

// runScenarios runs every scenario on tg: cairn verify through the faults,
// heal, and the checker must find no violation; idle queues (idle_test.go)
// stand beside verify's throughout and must keep their messages. The two
// targets run side by side (their tests are parallel): the workloads mostly
// wait out faults, and on a 2-core machine both passed together in 223 s
// against 380 s one after the other; each target keeps its scenarios in
// order.
func runScenarios(t *testing.T, tg target) {
	d := scenarioDuration(t)
	idle := map[string]uint64{}
	if n := idleQueues(t); n > 0 {
		createIdle(t, tg, n)
		var names []string
		for i := range n {
			names = append(names, idleName(i))
			idle[idleName(i)] = 1
		}
		sendIdle(t, tg, names, 4, time.Now().Add(time.Minute))
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			// The nodes' last lines are the failed scenario's, not the
			// end of the suite's.
			t.Cleanup(func() {
				if t.Failed() {
					tg.lastWords(t)
				}
			})
			v := startVerify(t, tg, d, sc.verify...)
			var topics *verifyRun
			if sc.topics != nil {
				topics = startVerify(t, tg, d, append([]string{"--topics"}, sc.topics...)...)
			}
			faults := sc.nemesis(t, tg, time.Now().Add(d))
			tg.heal(t)
			if faults == 0 {
				t.Errorf("the nemesis applied no fault in %v: the scenario did not test what it is named for (CAIRN_CHAOS_DURATION too short?)", d)
			}
			v.wait(t)
			if topics != nil {
				topics.wait(t)
			}
		})
	}
	checkIdle(t, tg, idle, time.Minute)
}

// verifyRun is a `cairn verify --json` running against a target.
type verifyRun struct {
	args           []string
	cmd            *exec.Cmd
	cancel         context.CancelFunc
	stdout, stderr bytes.Buffer
	waited         bool
}

// startVerify starts cairn verify for d with extra flags; its history and
// stderr are kept (keptPath) when the test ends, also if it fails before
// wait.
func startVerify(t *testing.T, tg target, d time.Duration, extra ...string) *verifyRun {
	t.Helper()
	v := &verifyRun{args: extra}
	// Every scenario's faults reach some of verify's four connections,
	// spread over the three nodes: a run that observed none did not test
	// them.
	args := cairnArgs(t, tg, append([]string{"verify", "--duration", d.String(), "--producers", "2", "--consumers", "2", "--min-faults", "1", "--json"}, extra...)...)
	kind := "" // the files of a topics verify beside a queue's are apart
	if slices.Contains(extra, "--topics") {
		kind = ".topics"
	}
	if path := keptPath(t, kind+".jsonl"); path != "" {
		args = append(args, "--history", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	v.cancel = cancel
	v.cmd = exec.CommandContext(ctx, cairnBin, args...)
	v.cmd.Stdout, v.cmd.Stderr = &v.stdout, &v.stderr
	if err := v.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Its output is complete only once it ended.
		if !v.waited {
			cancel()
			_ = v.cmd.Wait()
		}
		if path := keptPath(t, kind+".stderr"); path != "" {
			if err := os.WriteFile(path, v.stderr.Bytes(), 0o644); err != nil {
				t.Errorf("keeping verify's stderr: %v", err)
			}
		}
	})
	return v
}

// wait waits for verify's verdict and fails the test unless it passed.
func (v *verifyRun) wait(t *testing.T) {
	t.Helper()
	err := v.cmd.Wait()
	v.waited = true
	v.cancel()
	t.Logf("cairn verify %s: %s", strings.Join(v.args, " "), strings.TrimSpace(v.stdout.String()))
	if err != nil {
		t.Fatalf("cairn verify: %v\nstdout: %s\nstderr: %s", err, v.stdout.String(), lastLines(v.stderr.String(), 20))
	}
}

// keptDir is CAIRN_CHAOS_HISTORY (the package doc says what goes there),
// or "".
func keptDir() string { return os.Getenv("CAIRN_CHAOS_HISTORY") }

// keptPath names the test's file of that kind in keptDir, or "".
func keptPath(t *testing.T, ext string) string {
	dir := keptDir()
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(t.Name())+ext)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
