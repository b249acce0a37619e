package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/cluster/console"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"
)

// consoleCall makes a request of node n's console as user (no
// credentials when empty), with the action header when action is set.
func consoleCall(t *testing.T, hc *http.Client, base, method, path, user, password string, action bool) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	if action {
		req.Header.Set(console.ActionHeader, "1")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	_ = json.Unmarshal(b, &v)
	return resp.StatusCode, v
}

// With TLS on, the console asks who is calling and lets each user do what
// the client API lets them: nobody and a wrong password are asked to sign
// in, a user without the grant is refused and nothing changes, the admin
// purges; an action without the console's header, or from another site,
// is refused.
func TestConsole_AsksWhoCallsAndChecksWhatTheyMay(t *testing.T) {
	t.Parallel()
	_, tc := newTLSCluster(t, 1)
	n := tc.Node("n1")
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "work", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "work"), "m", 3)
	if _, err := a.CreateUser(ctx, "viewer", "viewer-password", []client.Grant{{Actions: []string{"browse"}, Pattern: "*"}}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clientOptions(t, n).TLS}}
	base := "https://" + n.Addrs().HTTP

	if code, _ := consoleCall(t, hc, base, "GET", "/", "", "", false); code != http.StatusUnauthorized {
		t.Errorf("the page without credentials: %d, want 401", code)
	}
	if code, _ := consoleCall(t, hc, base, "GET", "/api/queues", "admin", "wrong", false); code != http.StatusUnauthorized {
		t.Errorf("a wrong password: %d, want 401", code)
	}
	if code, v := consoleCall(t, hc, base, "GET", "/api/queues/work", "viewer", "viewer-password", false); code != http.StatusOK || v["pending"] != 3.0 {
		t.Errorf("viewer's queue show: %d %v", code, v)
	}
	if code, v := consoleCall(t, hc, base, "POST", "/api/queues/work/purge", "viewer", "viewer-password", true); code != http.StatusForbidden || !strings.Contains(fmt.Sprint(v["error"]), "not authorised: manage on work") {
		t.Errorf("viewer's purge: %d %v, want 403 not authorised", code, v)
	}
	if code, _ := consoleCall(t, hc, base, "POST", "/api/queues/work/purge", AdminUser, testAdminPassword, false); code != http.StatusForbidden {
		t.Errorf("a purge without the console's header: %d, want 403", code)
	}
	req, _ := http.NewRequest("POST", base+"/api/queues/work/purge", nil)
	req.SetBasicAuth(AdminUser, testAdminPassword)
	req.Header.Set(console.ActionHeader, "1")
	req.Header.Set("Origin", "https://elsewhere.example")
	if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a purge from another site: %v %v, want 403", resp.Status, err)
	}
	checkQueue(t, a, "work", 3, 0)
	if code, v := consoleCall(t, hc, base, "POST", "/api/queues/work/purge", AdminUser, testAdminPassword, true); code != http.StatusOK || v["purged"] != 3.0 {
		t.Errorf("admin's purge: %d %v", code, v)
	}
	checkQueue(t, a, "work", 0, 0)
}

// In a real browser (Debian's chromium, headless), the console's pages
// show what cairn queue show says of a queue spread over three nodes, and
// the cluster's three nodes alive.
func TestConsole_InABrowserShowsWhatQueueShowSays(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium): the console's browser test is skipped")
	}
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	tc.CreateSpread(ctx, map[string]int{"shown": 3})
	s := mustSession(t, tc.Dial("n1"), client.ClientAck)
	for i := range uint32(3) {
		name := fsm.MemberName("shown", i)
		sendN(t, ctx, mustProducer(t, s, name), name+"/", int(i)+2)
	}
	recvN(t, mustConsumer(t, ctx, s, "shown#2"), 2)
	q := showQueue(t, tc.Admin("n1"), "shown")

	field := regexp.MustCompile(`data-field="([^"]+)"[^>]*>([^<]*)<`)
	dom := func(url string) string {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir="+t.TempDir(),
			"--virtual-time-budget=5000", "--dump-dom", url).Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom %s: %v", url, err)
		}
		return string(out)
	}
	base := "http://" + tc.Node("n2").Addrs().HTTP + "/"
	wait.Until(t, 60*time.Second, "the queue's page showing queue show's counts", func() string {
		page := dom(base + "#/queue/shown")
		got := map[string]string{}
		for _, m := range field.FindAllStringSubmatch(page, -1) {
			got[m[1]] = m[2]
		}
		want := map[string]string{"name": "shown", "pending": fmt.Sprint(q.Pending), "delivered": fmt.Sprint(q.Delivered)}
		for _, m := range q.Members {
			want["pending-"+m.Name], want["delivered-"+m.Name] = fmt.Sprint(m.Pending), fmt.Sprint(m.Delivered)
		}
		for k, v := range want {
			if got[k] != v {
				return fmt.Sprintf("%s: the page shows %q, queue show %q (the page: %s)", k, got[k], v, page)
			}
		}
		return ""
	})
	alive := regexp.MustCompile(`data-node="n[123]" data-field="state">alive<`)
	wait.Until(t, 60*time.Second, "the cluster page showing three nodes alive", func() string {
		if page := dom(base + "#/"); len(alive.FindAllString(page, -1)) != 3 {
			return "the page: " + page
		}
		return ""
	})
}

// The console lists a dead-letter queue's messages and moves one back to
// its queue, in one transaction: the queue holds it again, with its body
// and properties, and the dead-letter queue no more; moving it again finds
// nothing.
func TestConsole_MovesADeadLetteredMessageBack(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "pq", client.QueueOptions{MaxDeliveries: 1}); err != nil {
		t.Fatal(err)
	}
	s := mustSession(t, dial(t, n), client.ClientAck)
	if _, err := mustProducer(t, s, "pq").Send(ctx, &client.Message{Body: []byte("poison"), Properties: map[string]any{"order": "42"}}); err != nil {
		t.Fatal(err)
	}
	recv(t, mustConsumer(t, ctx, s, "pq"))
	if err := s.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "pq.DLQ holding the dead message", func() bool {
		dlq, err := a.ShowQueue(ctx, "pq.DLQ")
		return err == nil && dlq.Pending == 1
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	base := "http://" + n.Addrs().HTTP
	resp, err := http.Get(base + "/api/queues/pq.DLQ/messages")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	err = json.NewDecoder(resp.Body).Decode(&msgs)
	resp.Body.Close()
	if err != nil || len(msgs) != 1 || msgs[0]["body"] != "poison" {
		t.Fatalf("the dead-letter queue's messages: %v %v", msgs, err)
	}
	id := fmt.Sprint(msgs[0]["id"])
	move := "/api/queues/pq.DLQ/messages/" + id + "/move?to=pq"
	if code, v := consoleCall(t, http.DefaultClient, base, "POST", move, "", "", true); code != http.StatusOK {
		t.Fatalf("move back: %d %v", code, v)
	}
	checkQueue(t, a, "pq.DLQ", 0, 0)
	checkQueue(t, a, "pq", 1, 0)
	m := recv(t, mustConsumer(t, ctx, mustSession(t, dial(t, n), client.AutoAck), "pq"))
	if string(m.Body) != "poison" || m.Properties["order"] != "42" || m.DeliveryCount != 1 {
		t.Errorf("moved back: %q %v, delivery %d; want poison, order=42, its first delivery", m.Body, m.Properties, m.DeliveryCount)
	}
	if code, _ := consoleCall(t, http.DefaultClient, base, "POST", move, "", "", true); code != http.StatusNotFound {
		t.Errorf("moving it again: %d, want 404", code)
	}
}

// The console answers only to the node's names and addresses: a page of
// another site whose name its DNS points at an open node (DNS rebinding:
// Host and Origin both the page's) reads nothing and purges nothing. The
// node's id, an IP address, localhost and a --console-host are served.
func TestConsole_AnswersOnlyToTheNodesNames(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir(), func(c *Config) { c.ConsoleHosts = []string{"broker.example.com"} }))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "work", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	sendN(t, ctx, mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "work"), "m", 3)
	_, port, _ := strings.Cut(n.Addrs().HTTP, ":")
	call := func(host, method, path string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+n.Addrs().HTTP+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host + ":" + port
		if method == "POST" {
			req.Header.Set(console.ActionHeader, "1")
			req.Header.Set("Origin", "http://"+req.Host)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	for _, path := range []string{"/", "/api/queues"} {
		if code, v := call("evil.example", "GET", path); code != http.StatusMisdirectedRequest || !strings.Contains(fmt.Sprint(v["error"]), "--console-host evil.example") {
			t.Errorf("GET %s with Host evil.example: %d %v; want 421 naming --console-host", path, code, v)
		}
	}
	if code, _ := call("evil.example", "POST", "/api/queues/work/purge"); code != http.StatusMisdirectedRequest {
		t.Errorf("a purge with Host and Origin evil.example: %d; want 421", code)
	}
	checkQueue(t, a, "work", 3, 0)
	for _, host := range []string{"127.0.0.1", "localhost", "n1", "Broker.Example.com.", "[::1]"} {
		if code, v := call(host, "GET", "/api/queues/work"); code != http.StatusOK || v["pending"] != 3.0 {
			t.Errorf("GET /api/queues/work with Host %s: %d %v; want 200, 3 pending", host, code, v)
		}
	}
	if code, v := call("n1", "POST", "/api/queues/work/purge"); code != http.StatusOK || v["purged"] != 3.0 {
		t.Errorf("a purge with Host n1: %d %v", code, v)
	}
}
