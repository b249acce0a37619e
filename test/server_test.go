package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/certs"
)

// Bounds of the waits on a server process.
const (
	readyTimeout = 30 * time.Second // start (or restart) to /readyz 200
	stopTimeout  = 15 * time.Second // SIGTERM to exit, before SIGKILL
	killTimeout  = 10 * time.Second // SIGKILL to exit
)

// addrs are a node's listen addresses, all on 127.0.0.1.
type addrs struct {
	client, peer, raft, gossip, http string
}

var (
	portsMu sync.Mutex
	// portsGiven are ports already handed to a server of this test run; a
	// port closed by one test may otherwise be picked again by another
	// before the first server binds it.
	portsGiven = map[int]bool{}
)

// freeAddrs picks five free loopback ports; the gossip port is free for
// both TCP and UDP. The ports come from below the kernel's ephemeral range
// and above the in-process harness's (cluster/testing.go takes 20000 to
// 25999): tests elsewhere (other packages run in parallel) bind port 0,
// which only ever takes ephemeral ports, or the harness's, so they cannot
// take one of these between the probe and the server's bind, nor while a
// killed server is down (a cluster test took a killed node's HTTP port
// when both shared one range). The
// probing listeners stay open until all five are picked, so no two are the
// same.
func freeAddrs(t testing.TB) addrs {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	low, high := 26000, ephemeralStart()
	next := low + rand.IntN(max(high-low-1000, 1))
	pick := func(udpToo bool) string {
		for range high - low {
			port := next
			if next++; next >= high {
				next = low
			}
			if portsGiven[port] {
				continue
			}
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				continue
			}
			closers = append(closers, ln)
			if udpToo {
				pc, err := net.ListenPacket("udp", addr)
				if err != nil {
					continue
				}
				closers = append(closers, pc)
			}
			portsGiven[port] = true
			return addr
		}
		t.Fatalf("no free port between %d and %d", low, high)
		return ""
	}
	return addrs{client: pick(false), peer: pick(false), raft: pick(false), gossip: pick(true), http: pick(false)}
}

// ephemeralStart is the first port the kernel hands out for port 0.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if p, err := strconv.Atoi(f[0]); err == nil && p > 27000 {
				return p
			}
		}
	}
	return 32768
}

// logBuffer collects a server's output over all its runs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is one run of `cairn server`.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, once done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the process's exit status, or -1 when a signal ended it.
func (p *process) exitCode() int { return p.cmd.ProcessState.ExitCode() }

// server is a `cairn server` node of a test: its flags and data directory
// stay the same over restarts.
type server struct {
	t      *testing.T
	nodeID string
	dir    string
	addrs  addrs
	// viaEnv passes the flags as CAIRN_* environment variables instead of
	// command-line flags.
	viaEnv bool
	// extra are more flags as name → value ("max-message-bytes" → "2000").
	extra map[string]string
	// tlsCA, if set, is the CA verifying the node's HTTPS (with TLS on).
	tlsCA string
	log   logBuffer
	runs  int
	proc  *process
}

// newServer prepares a durable single node with a fresh data directory and
// fresh ports; it stops the node when the test ends and prints its output
// if the test failed.
func newServer(t *testing.T) *server {
	t.Helper()
	s := &server{t: t, nodeID: "n1", dir: t.TempDir(), addrs: freeAddrs(t), extra: map[string]string{}}
	t.Cleanup(s.cleanup)
	return s
}

func (s *server) flags() map[string]string {
	f := map[string]string{
		"node-id":          s.nodeID,
		"data-dir":         s.dir,
		"bootstrap-expect": "1",
		"client-addr":      s.addrs.client,
		"peer-addr":        s.addrs.peer,
		"raft-addr":        s.addrs.raft,
		"gossip-addr":      s.addrs.gossip,
		"http-addr":        s.addrs.http,
		"auto-create":      "true",
	}
	for k, v := range s.extra {
		f[k] = v
	}
	return f
}

// start starts the node and waits until /readyz answers 200.
func (s *server) start() {
	s.t.Helper()
	s.startNoWait()
	s.waitReady()
}

// startNoWait starts the process without waiting for it to be ready.
func (s *server) startNoWait() {
	s.t.Helper()
	if s.proc != nil && !s.proc.exited() {
		s.t.Fatal("server: start while it runs")
	}
	args := []string{"server"}
	env := cleanEnv()
	for k, v := range s.flags() {
		if s.viaEnv {
			env = append(env, "CAIRN_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_"))+"="+v)
		} else {
			args = append(args, "--"+k+"="+v)
		}
	}
	cmd := exec.Command(cairnBin, args...)
	cmd.Env = env
	cmd.Stdout = &s.log
	cmd.Stderr = &s.log
	s.runs++
	fmt.Fprintf(&s.log, "=== test: run %d of cairn %s (env: %v)\n", s.runs, strings.Join(args, " "), s.viaEnv)
	if err := startServerProcess(cmd); err != nil {
		s.t.Fatalf("starting cairn server: %v", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	run := s.runs
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(&s.log, "=== test: run %d ended: %v\n", run, p.err)
		close(p.done)
	}()
	s.proc = p
}

// readyz is the node's /readyz answer: status code and body.
func (s *server) readyz() (int, string, error) {
	c := http.Client{Timeout: time.Second}
	scheme := "http"
	if s.tlsCA != "" {
		tc, err := certs.ClientTLS(s.tlsCA, "", "")
		if err != nil {
			return 0, "", err
		}
		scheme, c.Transport = "https", &http.Transport{TLSClientConfig: tc}
	}
	resp, err := c.Get(scheme + "://" + s.addrs.http + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitReady polls /readyz until it answers 200, failing the test if the
// process exits or the deadline passes first.
func (s *server) waitReady() {
	s.t.Helper()
	start := time.Now()
	deadline := start.Add(readyTimeout)
	var last string
	for {
		code, body, err := s.readyz()
		if err == nil && code == http.StatusOK {
			s.t.Logf("server run %d ready in %v", s.runs, time.Since(start).Round(time.Millisecond))
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		}
		if s.proc.exited() {
			s.t.Fatalf("server run %d exited before it was ready: %v", s.runs, s.proc.err)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("server run %d not ready after %v; last /readyz: %s", s.runs, readyTimeout, last)
		}
		select {
		case <-s.proc.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.t.Helper()
	// Wait may have reaped it already (ErrProcessDone) before done closes.
	if err := s.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) && !s.proc.exited() {
		s.t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-s.proc.done:
	case <-time.After(killTimeout):
		s.t.Fatalf("server still running %v after SIGKILL", killTimeout)
	}
}

// terminate sends SIGTERM and waits up to stopTimeout for the process to
// exit, then kills it. It returns how long the exit took and whether it
// happened before the deadline.
func (s *server) terminate() (time.Duration, bool) {
	s.t.Helper()
	start := time.Now()
	if err := s.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil && !s.proc.exited() {
		s.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-s.proc.done:
		return time.Since(start), true
	case <-time.After(stopTimeout):
	}
	_ = s.proc.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.proc.done:
	case <-time.After(killTimeout):
		s.t.Errorf("server still running %v after SIGKILL", killTimeout)
	}
	return time.Since(start), false
}

// cleanup stops a running server, fails the test on a data race the
// server reported, and prints the server's output if the test failed.
func (s *server) cleanup() {
	if s.proc != nil && !s.proc.exited() {
		if d, ok := s.terminate(); !ok {
			s.t.Errorf("server did not stop within %v of SIGTERM at the end of the test", d)
		}
	}
	out := s.log.String()
	if strings.Contains(out, "WARNING: DATA RACE") {
		s.t.Errorf("the server reported a data race")
	}
	if s.t.Failed() {
		const max = 256 << 10
		if len(out) > max {
			out = "...\n" + out[len(out)-max:]
		}
		s.t.Logf("output of cairn server (%d runs):\n%s", s.runs, out)
	}
}

// cleanEnv is the test's environment without CAIRN_* variables, so a
// developer's settings do not leak into the binary under test. A binary
// built with -race would sleep a second at every exit; it is told not to.
func cleanEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "CAIRN_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	if raceEnabled {
		env = append(env, "GORACE="+gorace)
	}
	return env
}

// cliResult is what one run of the CLI printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs `cairn ARGS...` with extra environment variables env (in
// addition to the test's own, minus CAIRN_*), bounded to a minute.
func cli(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cairnBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if took := time.Since(start); took > 2*time.Second {
		t.Logf("cairn %s took %v", strings.Join(args, " "), took.Round(time.Millisecond))
	}
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("cairn %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("cairn %s: still running after a minute; stderr: %s", strings.Join(args, " "), r.stderr)
	}
	return r
}

// ok runs `cairn --server <node> ARGS...` and requires exit status 0.
func (s *server) ok(args ...string) cliResult {
	s.t.Helper()
	return mustOK(s.t, nil, append([]string{"--server", s.addrs.client}, args...)...)
}

// fails runs `cairn --server <node> ARGS...` and requires the failure
// contract; it returns the error line.
func (s *server) fails(args ...string) (string, cliResult) {
	s.t.Helper()
	return mustFail(s.t, nil, append([]string{"--server", s.addrs.client}, args...)...)
}

func mustOK(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	r := cli(t, env, args...)
	if r.code != 0 {
		t.Fatalf("cairn %s: exit status %d, want 0\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// mustFail requires a non-zero exit status and exactly one line on stderr,
// starting with "cairn: "; it returns that line.
func mustFail(t *testing.T, env []string, args ...string) (string, cliResult) {
	t.Helper()
	r := cli(t, env, args...)
	cmdline := "cairn " + strings.Join(args, " ")
	if r.code == 0 {
		t.Errorf("%s: exit status 0, want an error\nstdout: %s\nstderr: %s", cmdline, r.stdout, r.stderr)
		return "", r
	}
	line := strings.TrimSuffix(r.stderr, "\n")
	if !strings.HasSuffix(r.stderr, "\n") || strings.Contains(line, "\n") {
		t.Errorf("%s: stderr is not exactly one line:\n%q", cmdline, r.stderr)
	}
	if !strings.HasPrefix(line, "cairn: ") {
		t.Errorf("%s: stderr %q does not start with %q", cmdline, line, "cairn: ")
	}
	return line, r
}

// jsonLines decodes one JSON object per line of out.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		objs = append(objs, jsonObject(t, line))
	}
	return objs
}

func jsonObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, s)
	}
	return obj
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// requireFields checks that obj has each field with the given JSON kind
// ("field:kind").
func requireFields(t *testing.T, what string, obj map[string]any, fields ...string) {
	t.Helper()
	for _, f := range fields {
		name, kind, _ := strings.Cut(f, ":")
		v, ok := obj[name]
		if !ok {
			t.Errorf("%s: no field %q in %v", what, name, obj)
			continue
		}
		if got := jsonKind(v); got != kind {
			t.Errorf("%s: field %q is a %s (%v), want a %s", what, name, got, v, kind)
		}
	}
}

// dial connects the Go client library to the node.
func (s *server) dial(opts client.Options) *client.Connection {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{s.addrs.client}, opts)
	if err != nil {
		s.t.Fatalf("dial %s: %v", s.addrs.client, err)
	}
	return c
}

// showQueue asks the node for a queue's counts.
func (s *server) showQueue(name string) client.QueueInfo {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := client.NewAdmin([]string{s.addrs.client})
	if err != nil {
		s.t.Fatal(err)
	}
	defer a.Close()
	info, err := a.ShowQueue(ctx, name)
	if err != nil {
		s.t.Fatalf("show queue %s: %v", name, err)
	}
	return info
}

// serving reports whether st shows the group of member with a leader and
// this node's replica applied up to the end of its log.
func (s *server) serving(st client.ClusterStatus, member string) bool {
	for _, g := range st.Groups {
		if g.Name != member || g.Leader == "" || g.AppliedIndex == 0 {
			continue
		}
		for _, r := range g.Replicas {
			if r.Node == s.nodeID && g.AppliedIndex >= r.MatchIndex {
				return true
			}
		}
	}
	return false
}

// status asks the node for the cluster's status.
func (s *server) status() client.ClusterStatus {
	s.t.Helper()
	a, err := client.NewAdmin([]string{s.addrs.client})
	if err != nil {
		s.t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := a.ClusterStatus(ctx)
	if err != nil {
		s.t.Fatalf("cluster status: %v", err)
	}
	return st
}

// waitDone waits for wg, failing the test after d.
func waitDone(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
	}
}
