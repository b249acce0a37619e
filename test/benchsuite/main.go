// Command benchsuite is `make bench` and `make bench-compare`: the standard
// set of `cairn bench` runs on a local three-node cluster and, with
// --compare, the same set against three local nats-server processes with
// JetStream (R3, file storage, sync_interval always: fsync before the
// publish ack, as Cairn does) driven by `nats bench`, with the ratio
// Cairn/NATS per row. nats-server and the nats CLI are installed with
// `go install` into a temporary directory for the run; nothing of them is
// kept or committed. The table is markdown, ready for docs/performance.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	cairnBin   = flag.String("cairn", "bin/cairn", "the cairn binary")
	compare    = flag.Bool("compare", false, "run the same set against NATS JetStream too")
	natsServer = flag.String("nats-server-version", "v2.15.2", "nats-server version to go install")
	natsCLI    = flag.String("natscli-version", "v0.5.0", "nats CLI version to go install")
	scale      = flag.Float64("scale", 1, "multiply every row's message count (0.1 for a quick look)")
	only       = flag.String("only", "", "run only the rows whose name contains this")
	pending    = flag.Int("pending", 0, "also fill a queue with this many 1 KiB messages and measure memory, restart time and send rate beside them")
	queues     = flag.Int("queues", 0, "also create this many idle queues (and with --compare as many NATS streams of three replicas) and measure their creation rate, idle CPU and memory")
	beside     = flag.Int("idle-beside", 0, "create this many idle queues (and with --compare as many NATS streams of three replicas) before the standard set, which then runs beside them")
	rounds     = flag.Int("rounds", 1, "run every row of the standard set this many times, each round Cairn then NATS, and print the median of each figure and of the rounds' Cairn/NATS ratios, with their range")
)

// row is one comparison: the same workload on both brokers.
type row struct {
	name  string
	count int
	// cairn are `cairn bench` flags besides --count and --json.
	cairn []string
	// nats is the `nats bench js ...` command; nil: no NATS equivalent.
	nats []string
	// metric picks the figure compared.
	metric string // "send", "consume" or "e2e"
	// natsPreload fills the stream first (consume rows).
	natsPreload bool
	// natsFanOut, when positive, runs that many `nats bench js consume`
	// at once, each with a durable consumer of its own reading every
	// message of the stream: JetStream's fan-out to that many
	// subscriptions. The rate is what they delivered in all, per second.
	natsFanOut int
	// size is the message body in bytes (0: 1 KiB).
	size int
}

// bytes is the row's message size.
func (r row) bytes() int {
	if r.size == 0 {
		return 1024
	}
	return r.size
}

var rows = []row{
	{name: "sync send, 1 producer", count: 3000, metric: "send",
		cairn: []string{"--mode", "sync", "--producers", "1", "--consumers", "0"},
		nats:  []string{"pub", "sync", "--clients", "1"}},
	{name: "sync send, 16 producers", count: 20000, metric: "send",
		cairn: []string{"--mode", "sync", "--producers", "16", "--consumers", "0"},
		nats:  []string{"pub", "sync", "--clients", "16"}},
	{name: "async send, 4 producers, window 500", count: 200000, metric: "send",
		cairn: []string{"--mode", "async", "--window", "500", "--producers", "4", "--consumers", "0"},
		nats:  []string{"pub", "async", "--batch", "500", "--clients", "4"}},
	// Both sides let each consumer hold 500 unacknowledged messages: that is
	// what `nats bench js consume` buffers per client (its --batch, default
	// 500), and Cairn's --prefetch is the same credit. Cairn's consumers
	// also wait for each acknowledgement's commit before taking more; NATS
	// acknowledges without waiting. The rows that send and consume at once
	// (and the end-to-end row after them) give their consumers the same
	// 500: with the client's default of 64, a consumer waiting on its
	// acknowledgement runs out of credit within one Raft round at these
	// rates, and its messages then wait for another (docs/performance.md,
	// "Latency"). Cairn's consumers connect to the queue's host
	// (`--consumers-on-host`, client.Options.PreferHostOf), as a user who
	// consumes one queue would set; spread over the nodes, three of four
	// were served through another node. NATS's clients connect where its
	// client library picks among the servers given.
	{name: "consume a backlog, 4 consumers, each message acked", count: 100000, metric: "consume", natsPreload: true,
		cairn: []string{"--mode", "async", "--window", "500", "--producers", "4", "--consumers", "4", "--consume-after", "--ack", "client", "--prefetch", "500", "--consumers-on-host"},
		nats:  []string{"consume", "--clients", "4", "--acks", "explicit", "--batch", "500"}},
	{name: "send and consume together, 4+4, window 500", count: 100000, metric: "e2e",
		cairn: []string{"--mode", "async", "--window", "500", "--producers", "4", "--consumers", "4", "--ack", "client", "--prefetch", "500", "--consumers-on-host"}},
	// The default shape: `cairn queue create` makes a member per node, and
	// clients connect to every node. The rows above use one member, as a
	// JetStream stream is one group; these are what a user gets.
	{name: "sync send, 16 producers, a member per node", count: 20000, metric: "send",
		cairn: []string{"--mode", "sync", "--producers", "16", "--consumers", "0", "--members", "0"},
		nats:  []string{"pub", "sync", "--clients", "16"}},
	{name: "async send, 4 producers, window 500, a member per node", count: 200000, metric: "send",
		cairn: []string{"--mode", "async", "--window", "500", "--producers", "4", "--consumers", "0", "--members", "0"},
		nats:  []string{"pub", "async", "--batch", "500", "--clients", "4"}},
	// Large messages, the sizes users send besides 1 KiB: windows and
	// prefetch shrink with the size, so that each client holds a few MiB,
	// on both sides alike.
	{name: "async send, 64 KiB, 4 producers, window 64", size: 64 << 10, count: 10000, metric: "send",
		cairn: []string{"--mode", "async", "--window", "64", "--producers", "4", "--consumers", "0"},
		nats:  []string{"pub", "async", "--batch", "64", "--clients", "4"}},
	{name: "consume a backlog, 64 KiB, 4 consumers, each message acked", size: 64 << 10, count: 10000, metric: "consume", natsPreload: true,
		cairn: []string{"--mode", "async", "--window", "64", "--producers", "4", "--consumers", "4", "--consume-after", "--ack", "client", "--prefetch", "64", "--consumers-on-host"},
		nats:  []string{"consume", "--clients", "4", "--acks", "explicit", "--batch", "64"}},
	{name: "sync send, 1 MiB, 1 producer", size: 1 << 20, count: 300, metric: "send",
		cairn: []string{"--mode", "sync", "--producers", "1", "--consumers", "0"},
		nats:  []string{"pub", "sync", "--clients", "1"}},
	{name: "async send, 1 MiB, 4 producers, window 4", size: 1 << 20, count: 1000, metric: "send",
		cairn: []string{"--mode", "async", "--window", "4", "--producers", "4", "--consumers", "0"},
		nats:  []string{"pub", "async", "--batch", "4", "--clients", "4"}},
	{name: "consume a backlog, 1 MiB, 4 consumers, each message acked", size: 1 << 20, count: 1000, metric: "consume", natsPreload: true,
		cairn: []string{"--mode", "async", "--window", "4", "--producers", "4", "--consumers", "4", "--consume-after", "--ack", "client", "--prefetch", "4", "--consumers-on-host"},
		nats:  []string{"consume", "--clients", "4", "--acks", "explicit", "--batch", "4"}},
	// Fan-out: a topic with four durable subscriptions, every message
	// acknowledged, against one R3 stream with four durable consumers each
	// reading every message. The rate is messages delivered in all: four
	// per message published. In the first row the topic has one member, one
	// group as the stream is, and each subscription one consumer. In the
	// second it has a member per node, as `cairn topic create` makes it,
	// and each subscription three consumers, one per node (a consumer takes
	// its node's member first), so that no member waits for forwarding;
	// NATS gets three clients per durable consumer there too.
	{name: "fan-out of a backlog to 4 subscriptions, each message acked", count: 50000, metric: "consume", natsPreload: true, natsFanOut: 4,
		cairn: []string{"--topic", "--subscriptions", "4", "--mode", "async", "--window", "500", "--producers", "4", "--consumers", "4", "--consume-after", "--ack", "client", "--prefetch", "500", "--consumers-on-host"},
		nats:  []string{"consume", "--clients", "1", "--acks", "explicit", "--batch", "500"}},
	{name: "fan-out of a backlog to 4 subscriptions, each message acked, a member per node", count: 50000, metric: "consume", natsPreload: true, natsFanOut: 4,
		cairn: []string{"--topic", "--subscriptions", "4", "--mode", "async", "--window", "500", "--producers", "4", "--consumers", "12", "--consume-after", "--ack", "client", "--prefetch", "500", "--members", "0"},
		nats:  []string{"consume", "--clients", "3", "--acks", "explicit", "--batch", "500"}},
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchsuite:", err)
		os.Exit(1)
	}
}

func run() error {
	if *rounds < 1 {
		return fmt.Errorf("--rounds %d: every row needs at least one run", *rounds)
	}
	dir, err := os.MkdirTemp("", "cairn-benchsuite-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cairn, err := startCairn(dir)
	if err != nil {
		return err
	}
	defer cairn.stop()
	var nats *cluster
	var natsBin string
	if *compare {
		if natsBin, err = installNATS(dir); err != nil {
			return err
		}
		if nats, err = startNATS(dir, natsBin); err != nil {
			return err
		}
		defer nats.stop()
	}
	if *repair > 0 {
		return repairRows(cairn, *repair)
	}
	if *renew > 0 {
		return renewRows(cairn, *renew)
	}
	if *beside > 0 {
		if *queues > 0 {
			return errors.New("--idle-beside and --queues both create idle queues: run them apart")
		}
		if err := createBeside(cairn, nats, natsBin, *beside); err != nil {
			return err
		}
	}
	printHeader()
	// maxTogether is the rate of sending and consuming at once: the most
	// the end-to-end row could carry.
	var maxTogether float64
	for _, r := range rows {
		if *only != "" && !strings.Contains(r.name, *only) {
			continue
		}
		rate, err := printRow(cairn, nats, natsBin, r)
		if err != nil {
			return err
		}
		if r.metric == "e2e" {
			maxTogether = rate
		}
	}
	if maxTogether > 0 && *only == "" {
		if err := printE2ERow(cairn, maxTogether); err != nil {
			return err
		}
	}
	if *queues > 0 {
		if err := idleRows(cairn, nats, natsBin, *queues); err != nil {
			return fmt.Errorf("with %d idle queues: %w", *queues, err)
		}
	}
	if *pending > 0 {
		if err := pendingRows(cairn, *pending); err != nil {
			return fmt.Errorf("with %d pending messages: %w", *pending, err)
		}
	}
	return nil
}

// printHeader prints the table's header.
func printHeader() {
	fmt.Printf("| row | messages | Cairn msgs/s | Cairn p50 / p99 ms |")
	if *compare {
		if *rounds > 1 {
			fmt.Printf(" NATS msgs/s | NATS p50 / p99 ms | Cairn/NATS, median of the rounds' (range) |")
		} else {
			fmt.Printf(" NATS msgs/s | NATS p50 / p99 ms | Cairn/NATS |")
		}
	}
	fmt.Println()
	fmt.Printf("|---|---|---|---|")
	if *compare {
		fmt.Printf("---|---|---|")
	}
	fmt.Println()
}

// printRow runs row r --rounds times, each round Cairn then NATS (so that
// a machine that slows down during the suite weighs on both sides of
// every ratio), prints its medians, and returns Cairn's median rate.
func printRow(cairn, nats *cluster, natsBin string, r row) (float64, error) {
	n := max(int(float64(r.count)**scale), 100)
	var cairnRuns, natsRuns []figure
	var ratios []float64
	for range *rounds {
		c, err := cairnRow(cairn, r, n)
		if err != nil {
			return 0, fmt.Errorf("%s on Cairn: %w", r.name, err)
		}
		cairnRuns = append(cairnRuns, c)
		if *compare && r.nats != nil {
			m, err := natsRow(nats, natsBin, r, n)
			if err != nil {
				return 0, fmt.Errorf("%s on NATS: %w", r.name, err)
			}
			natsRuns = append(natsRuns, m)
			ratios = append(ratios, c.rate/m.rate)
		}
	}
	c := medianFigure(cairnRuns)
	fmt.Printf("| %s | %d | %.0f | %s |", r.name, n, c.rate, c.latency())
	if *compare {
		if r.nats == nil {
			fmt.Print(noNATS())
		} else {
			m := medianFigure(natsRuns)
			fmt.Printf(" %.0f | %s | %s |", m.rate, m.latency(), ratioCell(ratios))
		}
	}
	fmt.Println()
	return c.rate, nil
}

// printE2ERow measures end to end at half of Cairn's maximum for that same
// work (sends and consumes at once, maxTogether): the latency a user sees
// with room to spare. Half the send-only maximum can be more than sending
// and consuming together can carry, and then measures a growing queue.
func printE2ERow(cairn *cluster, maxTogether float64) error {
	rate := int(maxTogether / 2)
	args := []string{"--mode", "async", "--window", "500", "--producers", "4", "--consumers", "4", "--ack", "client", "--prefetch", "500",
		"--consumers-on-host", "--duration", "20s", "--rate", strconv.Itoa(rate)}
	var runs []figure
	var sent []float64
	for range *rounds {
		res, err := cairnBench(cairn, args)
		if err != nil {
			return fmt.Errorf("end to end at %d msgs/s: %w", rate, err)
		}
		sent = append(sent, float64(res.Sent))
		runs = append(runs, e2eFigure(res))
	}
	e := medianFigure(runs)
	fmt.Printf("| end to end at %d msgs/s (half the send-and-consume maximum), 4+4 | %.0f | %.0f | %s |",
		rate, median(sent), e.rate, e.latency())
	fmt.Println(noNATS())
	return nil
}

// noNATS fills the NATS columns of a row that has no NATS equivalent.
func noNATS() string {
	if *compare {
		return " — | — | — |"
	}
	return ""
}

// figure is one run's result: its rate and, when the tool reported them,
// its latency percentiles in milliseconds (end to end: e2e).
type figure struct {
	rate     float64
	p50, p99 float64
	hasLat   bool
	e2e      bool
}

func (f figure) latency() string {
	if !f.hasLat {
		return "—"
	}
	if f.e2e {
		return fmt.Sprintf("%.2f / %.2f (e2e)", f.p50, f.p99)
	}
	return fmt.Sprintf("%.2f / %.2f", f.p50, f.p99)
}

// medianFigure is the median of each of the runs' figures, taken one by
// one: the rate of one run may go with the p99 of another. Latencies are
// taken from the runs that reported them.
func medianFigure(runs []figure) figure {
	var rates, p50s, p99s []float64
	for _, f := range runs {
		rates = append(rates, f.rate)
		if f.hasLat {
			p50s, p99s = append(p50s, f.p50), append(p99s, f.p99)
		}
	}
	m := figure{rate: median(rates), e2e: runs[0].e2e}
	if len(p50s) > 0 {
		m.p50, m.p99, m.hasLat = median(p50s), median(p99s), true
	}
	return m
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratioCell is the Cairn/NATS cell: the median of the rounds' ratios and,
// with more than one round, their range, which says how far one run is to
// be trusted on this machine.
func ratioCell(ratios []float64) string {
	if len(ratios) == 1 {
		return fmt.Sprintf("%.2f", ratios[0])
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(ratios), slices.Min(ratios), slices.Max(ratios))
}

func e2eFigure(res benchJSON) figure {
	return figure{rate: res.ConsumeRate, p50: res.E2ELatency.P50, p99: res.E2ELatency.P99, hasLat: true, e2e: true}
}

type latency struct{ P50, P99 float64 }

type benchJSON struct {
	SendRate    float64 `json:"send_rate"`
	ConsumeRate float64 `json:"consume_rate"`
	Sent        int64   `json:"sent"`
	SendLatency latency `json:"send_latency_ms"`
	E2ELatency  latency `json:"e2e_latency_ms"`
}

func cairnBench(c *cluster, args []string) (benchJSON, error) {
	var auth []string
	if c.secured != nil {
		auth = c.secured.cliFlags
	}
	args = append(append(append([]string{"--server", strings.Join(c.clients, ",")}, auth...), "bench", "--json", "--size", "1024"), args...) // a later --size wins
	out, err := exec.Command(*cairnBin, args...).Output()
	var res benchJSON
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return res, fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return res, err
	}
	return res, json.Unmarshal(out, &res)
}

func cairnRow(c *cluster, r row, n int) (figure, error) {
	res, err := cairnBench(c, append([]string{"--count", strconv.Itoa(n), "--size", strconv.Itoa(r.bytes())}, r.cairn...))
	if err != nil {
		return figure{}, err
	}
	if r.metric == "send" {
		return figure{rate: res.SendRate, p50: res.SendLatency.P50, p99: res.SendLatency.P99, hasLat: true}, nil
	}
	return e2eFigure(res), nil
}

var (
	natsRate = regexp.MustCompile(`stats: ([0-9,]+) msgs/sec`)
	natsP50  = regexp.MustCompile(`P50:? ([0-9,.]+)us`)
	natsP99  = regexp.MustCompile(`P99:? ([0-9,.]+)us`)
)

func natsBench(c *cluster, natsBin string, args []string, size int) (string, error) {
	if args[0] == "pub" {
		args = append(args, "--replicas", "3", "--storage", "file")
	}
	args = append([]string{"--server", strings.Join(c.clients, ","), "bench", "js"}, args...)
	args = append(args, "--size", strconv.Itoa(size), "--no-progress")
	cmd := exec.Command(filepath.Join(natsBin, "nats"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func natsRow(c *cluster, natsBin string, r row, n int) (figure, error) {
	count := []string{"--msgs", strconv.Itoa(n)}
	if r.natsPreload {
		// Batches of at most 512 KiB (500 at 1 KiB): a client filling the
		// stream with large messages holds a few MiB, not hundreds.
		batch := strconv.Itoa(min(500, max(4, (512<<10)/r.bytes())))
		if _, err := natsBench(c, natsBin, append([]string{"pub", "async", "bench.x", "--batch", batch, "--clients", "4", "--create", "--purge"}, count...), r.bytes()); err != nil {
			return figure{}, err
		}
	}
	args := append(append([]string{}, r.nats...), count...)
	if r.natsFanOut > 0 {
		return natsFanOut(c, natsBin, r, args)
	}
	if args[0] == "pub" {
		// The subject comes after the sub-command; a fresh stream per row.
		args = append([]string{args[0], args[1], "bench.x", "--create", "--purge"}, args[2:]...)
	}
	out, err := natsBench(c, natsBin, args, r.bytes())
	if err != nil {
		return figure{}, err
	}
	m := natsRate.FindAllStringSubmatch(out, -1)
	if m == nil {
		return figure{}, fmt.Errorf("no rate in nats bench's output:\n%s", out)
	}
	// The aggregate comes last when there are several clients.
	rate, _ := strconv.ParseFloat(strings.ReplaceAll(m[len(m)-1][1], ",", ""), 64)
	f := figure{rate: rate}
	p50, p99 := natsP50.FindAllStringSubmatch(out, -1), natsP99.FindAllStringSubmatch(out, -1)
	if p50 != nil && p99 != nil {
		us := func(s string) float64 { v, _ := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64); return v }
		f.p50, f.p99, f.hasLat = us(p50[len(p50)-1][1])/1000, us(p99[len(p99)-1][1])/1000, true
	}
	return f, nil
}

// installNATS go-installs nats-server and the nats CLI into dir/bin.
func installNATS(dir string) (string, error) {
	bin := filepath.Join(dir, "bin")
	for _, pkg := range []string{"github.com/nats-io/nats-server/v2@" + *natsServer, "github.com/nats-io/natscli/nats@" + *natsCLI} {
		fmt.Fprintf(os.Stderr, "benchsuite: go install %s\n", pkg)
		cmd := exec.Command("go", "install", pkg)
		cmd.Dir = dir // outside any module: nothing of it reaches go.mod
		cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go install %s: %v\n%s", pkg, err, out)
		}
	}
	return bin, nil
}

func startNATS(dir, bin string) (*cluster, error) {
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	c := &cluster{}
	var routes []string
	for i := range 3 {
		routes = append(routes, "nats://"+addr(ports[i*2+1]))
	}
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		// max_payload: room for the 1 MiB rows (NATS takes 1 MB by default).
		conf := fmt.Sprintf(`server_name: %s
listen: %q
max_payload: 4MB
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: bench
  listen: %q
  routes: [%s]
}
`, name, addr(ports[i*2]), filepath.Join(dir, "nats-"+name), addr(ports[i*2+1]), strings.Join(routes, ", "))
		path := filepath.Join(dir, "nats-"+name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		c.clients = append(c.clients, "nats://"+addr(ports[i*2]))
		if err := c.start(filepath.Join(dir, "nats-"+name+".log"), filepath.Join(bin, "nats-server"), "-c", path); err != nil {
			c.stop()
			return nil, err
		}
	}
	// JetStream is ready when the meta group has a leader: a stream
	// create through `nats bench` succeeds. Try a tiny one until it does.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "nats"), "--server", strings.Join(c.clients, ","), "bench", "js", "pub", "sync", "bench.x",
			"--msgs", "10", "--create", "--purge", "--replicas", "3", "--storage", "file", "--no-progress")
		out, err := cmd.CombinedOutput()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			c.stop()
			return nil, fmt.Errorf("NATS JetStream not ready after a minute: %v\n%s", err, lastLine(out))
		}
		time.Sleep(time.Second)
	}
}
