package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// queueShow checks the shape of one queue as `queue show --json` and
// `queue list --json` print it, and returns its totals.
func checkQueueJSON(t *testing.T, what string, q map[string]any) (pending, delivered float64, members []map[string]any) {
	t.Helper()
	requireFields(t, what, q, "name:string", "pending:number", "delivered:number", "members:array")
	ms, _ := q["members"].([]any)
	for i, m := range ms {
		mo, ok := m.(map[string]any)
		if !ok {
			t.Fatalf("%s: member %d is not an object: %v", what, i, m)
		}
		requireFields(t, fmt.Sprintf("%s member %d", what, i), mo, "name:string", "host:string", "pending:number", "delivered:number", "consumers:number", "draining:bool", "renewing:bool")
		members = append(members, mo)
	}
	pending, _ = q["pending"].(float64)
	delivered, _ = q["delivered"].(float64)
	return pending, delivered, members
}

// showJSON runs `queue show NAME --json` and checks the counts, in total and
// of its one member.
func (s *server) showJSON(name string, pending, delivered float64) {
	s.t.Helper()
	r := s.ok("queue", "show", name, "--json")
	lines := jsonLines(s.t, r.stdout)
	if len(lines) != 1 {
		s.t.Fatalf("queue show %s --json: %d lines, want 1:\n%s", name, len(lines), r.stdout)
	}
	q := lines[0]
	p, d, members := checkQueueJSON(s.t, "queue show "+name, q)
	if q["name"] != name || p != pending || d != delivered {
		s.t.Errorf("queue show %s: name %v, pending %v, delivered %v; want %s, %v, %v", name, q["name"], p, d, name, pending, delivered)
	}
	if len(members) != 1 {
		s.t.Fatalf("queue show %s: %d members, want 1: %v", name, len(members), q["members"])
	}
	m := members[0]
	if m["name"] != name+"#0" || m["host"] != s.nodeID || m["pending"] != pending || m["delivered"] != delivered || m["consumers"] != float64(0) {
		s.t.Errorf("queue show %s: member %v; want name %s#0, host %s, pending %v, delivered %v, consumers 0", name, m, name, s.nodeID, pending, delivered)
	}
}

// received is one line of `cairn receive --json`.
type received struct {
	id, member, body string
	redelivered      bool
	count, priority  float64
}

func receiveLines(t *testing.T, out string) []received {
	t.Helper()
	var rs []received
	for i, l := range jsonLines(t, out) {
		requireFields(t, fmt.Sprintf("receive line %d", i+1), l, "id:string", "member:string", "body:string", "redelivered:bool", "delivery_count:number", "priority:number")
		r := received{}
		r.id, _ = l["id"].(string)
		r.member, _ = l["member"].(string)
		r.body, _ = l["body"].(string)
		r.redelivered, _ = l["redelivered"].(bool)
		r.count, _ = l["delivery_count"].(float64)
		r.priority, _ = l["priority"].(float64)
		rs = append(rs, r)
	}
	return rs
}

// TestCLITour drives the README's five-minute tour through the real
// binary: create, send, show, receive without acknowledging (the messages
// come back redelivered), receive, purge, list, delete, cluster status.
func TestCLITour(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.start()

	if r := s.ok("queue", "create", "orders"); !strings.Contains(r.stdout, "created queue orders") {
		t.Errorf("queue create orders printed %q", r.stdout)
	}
	if r := s.ok("queue", "update", "orders", "--replicas", "1"); !strings.Contains(r.stdout, "updated queue orders: 1 member, 1 replica each") {
		t.Errorf("queue update orders --replicas 1 printed %q", r.stdout)
	}

	// Three messages, one JSON line each.
	r := s.ok("send", "orders", "--count", "3", "--json")
	lines := jsonLines(t, r.stdout)
	if len(lines) != 3 {
		t.Fatalf("send --count 3 --json: %d lines, want 3:\n%s", len(lines), r.stdout)
	}
	var ids []string
	seen := map[string]bool{}
	for i, l := range lines {
		requireFields(t, fmt.Sprintf("send line %d", i+1), l, "id:string", "member:string", "outcome:string", "error:string")
		id, _ := l["id"].(string)
		if l["outcome"] != "ok" || l["error"] != "" || l["member"] != "orders#0" || id == "" || seen[id] {
			t.Errorf("send line %d: %v; want a fresh id, member orders#0, outcome ok, no error", i+1, l)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	s.showJSON("orders", 3, 0)

	// Two received and not acknowledged: they return when the command exits.
	r = s.ok("receive", "orders", "--count", "2", "--ack", "none", "--json")
	got := receiveLines(t, r.stdout)
	if len(got) != 2 {
		t.Fatalf("receive --count 2 --ack none: %d lines, want 2:\n%s", len(got), r.stdout)
	}
	for i, m := range got {
		want := received{id: ids[i], member: "orders#0", body: fmt.Sprintf("message %d", i+1), redelivered: false, count: 1, priority: 4}
		if m != want {
			t.Errorf("receive --ack none line %d: %+v, want %+v", i+1, m, want)
		}
	}
	// The client closed its connection before exiting, and a closed
	// connection has returned its messages by the time Close returns.
	s.showJSON("orders", 3, 0)

	r = s.ok("receive", "orders", "--count", "3", "--json", "--timeout", "5s")
	got = receiveLines(t, r.stdout)
	if len(got) != 3 {
		t.Fatalf("receive --count 3: %d lines, want 3:\n%s", len(got), r.stdout)
	}
	for i, m := range got {
		want := received{id: ids[i], member: "orders#0", body: fmt.Sprintf("message %d", i+1), redelivered: i < 2, count: 1, priority: 4}
		if i < 2 {
			want.count = 2
		}
		if m != want {
			t.Errorf("second receive line %d: %+v, want %+v", i+1, m, want)
		}
	}
	s.showJSON("orders", 0, 0)

	// Nothing left: --timeout ends the command with status 0 and no lines.
	start := time.Now()
	r = s.ok("receive", "orders", "--count", "1", "--json", "--timeout", "1s")
	if took := time.Since(start); r.stdout != "" || took < time.Second || took > 20*time.Second {
		t.Errorf("receive from an empty queue with --timeout 1s: took %v, printed %q; want about 1s and nothing", took, r.stdout)
	}

	// Purge removes pending messages.
	s.ok("send", "orders", "--count", "2", "--body", "to purge")
	s.showJSON("orders", 2, 0)
	if r := s.ok("queue", "purge", "orders"); !strings.Contains(r.stdout, "purged 2 messages") {
		t.Errorf("queue purge orders printed %q, want it to say 2 were purged", r.stdout)
	}
	s.showJSON("orders", 0, 0)

	// List: a JSON array of the queues, in the show shape.
	r = s.ok("queue", "list", "--json")
	list := decodeArray(t, r.stdout)
	if len(list) != 1 {
		t.Fatalf("queue list --json: %d queues, want 1: %s", len(list), r.stdout)
	}
	q, _ := list[0].(map[string]any)
	if p, d, _ := checkQueueJSON(t, "queue list", q); q["name"] != "orders" || p != 0 || d != 0 {
		t.Errorf("queue list: %v, want orders with nothing pending or delivered", q)
	}
	if r := s.ok("queue", "list"); !strings.Contains(r.stdout, "orders") {
		t.Errorf("queue list (table) does not name orders:\n%s", r.stdout)
	}

	// Delete: the queue is gone.
	s.ok("queue", "delete", "orders")
	if list := decodeArray(t, s.ok("queue", "list", "--json").stdout); len(list) != 0 {
		t.Errorf("queue list --json after delete: %v, want []", list)
	}
	if line, _ := s.fails("queue", "show", "orders"); !strings.Contains(line, "orders") {
		t.Errorf("queue show of a deleted queue: %q does not name it", line)
	}

	// Cluster status: one node, leading the meta group.
	r = s.ok("cluster", "status", "--json")
	st := jsonObject(t, r.stdout)
	requireFields(t, "cluster status", st, "answered_by:string", "nodes:array", "groups:array", "under_replicated:number", "moving:number")
	if st["answered_by"] != "n1" {
		t.Errorf("cluster status answered_by %v, want n1", st["answered_by"])
	}
	nodes, _ := st["nodes"].([]any)
	if len(nodes) != 1 {
		t.Fatalf("cluster status: %d nodes, want 1: %v", len(nodes), nodes)
	}
	n, _ := nodes[0].(map[string]any)
	requireFields(t, "cluster status node", n, "id:string", "client_addr:string", "state:string", "meta_role:string", "decommissioning:bool")
	if n["id"] != "n1" || n["client_addr"] != s.addrs.client || n["state"] != "alive" || n["meta_role"] != "leader" {
		t.Errorf("cluster status node: %v; want n1 at %s, alive, meta leader", n, s.addrs.client)
	}
	metaFound := false
	groups, _ := st["groups"].([]any)
	for _, g := range groups {
		if g, _ := g.(map[string]any); g["name"] == "meta" {
			metaFound = true
			if g["leader"] != "n1" {
				t.Errorf("cluster status: meta group leader %v, want n1", g["leader"])
			}
		}
	}
	if !metaFound {
		t.Errorf("cluster status: no meta group in %v", groups)
	}
	if r := s.ok("cluster", "status"); !strings.Contains(r.stdout, "n1") {
		t.Errorf("cluster status (table) does not name n1:\n%s", r.stdout)
	}

	// Rebalance: one node, nothing to move.
	rb := jsonObject(t, s.ok("cluster", "rebalance", "--dry-run", "--json").stdout)
	requireFields(t, "cluster rebalance", rb, "moves:array", "applied:bool", "degraded:bool")
	if moves, _ := rb["moves"].([]any); len(moves) != 0 || rb["applied"] != false {
		t.Errorf("cluster rebalance --dry-run on one node: %v, want no moves, not applied", rb)
	}
	if r := s.ok("cluster", "rebalance"); !strings.Contains(r.stdout, "nothing to move") {
		t.Errorf("cluster rebalance on one node:\n%s", r.stdout)
	}

	// The only node cannot leave its cluster for good; refused, it goes on.
	if msg, _ := s.fails("node", "leave", "--decommission"); !strings.Contains(msg, "only live node") {
		t.Errorf("node leave --decommission on a one-node cluster: %q, want it refused as the only live node", msg)
	}
	nodes, _ = jsonObject(t, s.ok("cluster", "status", "--json").stdout)["nodes"].([]any)
	if n, _ = nodes[0].(map[string]any); n["decommissioning"] != false || n["state"] != "alive" {
		t.Errorf("after a refused decommission the node is %v", n)
	}
}

// TestCLISelectors sends typed properties with --property and receives
// with --selector: only the selected messages come, with their properties
// in --json by type; the others stay pending.
func TestCLISelectors(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.start()
	s.ok("send", "orders", "--body", "heavy blue", "--property", "color=blue", "--property", "weight:int=3000", "--property", "rush:bool=true", "--property", "ratio:float=0.5")
	s.ok("send", "orders", "--body", "light blue", "--property", "color=blue", "--property", "weight:int=10")
	s.ok("send", "orders", "--body", "plain")
	r := s.ok("receive", "orders", "--selector", "color = 'blue' AND weight > 2500", "--count", "3", "--timeout", "2s", "--json")
	lines := jsonLines(t, r.stdout)
	if len(lines) != 1 || lines[0]["body"] != "heavy blue" {
		t.Fatalf("receive --selector: %d lines, want the heavy blue one only:\n%s", len(lines), r.stdout)
	}
	want := map[string]any{"color": "blue", "weight": float64(3000), "rush": true, "ratio": 0.5}
	if got, _ := lines[0]["properties"].(map[string]any); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("properties %v, want %v", lines[0]["properties"], want)
	}
	s.showJSON("orders", 2, 0)
	// Browsing shows the two left, in order, and changes nothing.
	r = s.ok("queue", "browse", "orders", "--json")
	if lines := jsonLines(t, r.stdout); len(lines) != 2 || lines[0]["body"] != "light blue" || lines[1]["body"] != "plain" {
		t.Fatalf("queue browse --json: want light blue, then plain:\n%s", r.stdout)
	}
	r = s.ok("queue", "browse", "orders", "--selector", "weight < 100")
	if !strings.Contains(r.stdout, "light blue") || strings.Contains(r.stdout, "plain") {
		t.Fatalf("queue browse --selector 'weight < 100': want light blue only:\n%s", r.stdout)
	}
	if r := s.ok("queue", "browse", "orders", "--selector", "weight > 1e6"); !strings.Contains(r.stdout, "no pending messages in orders that the selector selects") {
		t.Fatalf("queue browse selecting nothing printed %q", r.stdout)
	}
	s.showJSON("orders", 2, 0)
	r = s.ok("receive", "orders", "--selector", "weight IS NULL", "--timeout", "5s", "--json")
	if lines := jsonLines(t, r.stdout); len(lines) != 1 || lines[0]["body"] != "plain" || lines[0]["properties"] != nil {
		t.Fatalf("receive --selector 'weight IS NULL': want the plain message, without properties:\n%s", r.stdout)
	}
}

// TestCLITopics drives topics through the real binary: create, a durable
// subscription made by subscribing, publish, topic show's counts,
// receiving what was published while nobody consumed, and the errors of
// kinds, of a durable subscription without a client id and of a client id
// in use.
func TestCLITopics(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.start()
	if r := s.ok("topic", "create", "news"); !strings.Contains(r.stdout, "created topic news") {
		t.Errorf("topic create printed %q", r.stdout)
	}
	sub := []string{"subscribe", "news", "--subscription", "audit", "--durable", "--client-id", "c1"}
	if r := s.ok(append(sub, "--timeout", "1s")...); r.stdout != "" {
		t.Errorf("subscribing with nothing published printed %q", r.stdout)
	}
	lines := jsonLines(t, s.ok("publish", "news", "--count", "3", "--property", "n:int=5", "--json").stdout)
	if len(lines) != 3 || lines[0]["outcome"] != "ok" {
		t.Fatalf("publish --count 3 --json: %v", lines)
	}
	show := jsonObject(t, s.ok("topic", "show", "news", "--json").stdout)
	requireFields(t, "topic show", show, "name:string", "members:array", "subscriptions:array")
	subs, _ := show["subscriptions"].([]any)
	if len(subs) != 1 {
		t.Fatalf("topic show: %v", show)
	}
	sj, _ := subs[0].(map[string]any)
	requireFields(t, "topic show subscription", sj, "name:string", "client_id:string", "durable:bool", "shared:bool", "pending:number", "delivered:number", "consumers:number")
	if sj["name"] != "audit" || sj["client_id"] != "c1" || sj["durable"] != true || sj["pending"] != float64(3) {
		t.Fatalf("topic show subscription: %v; want audit of c1, durable, 3 pending", sj)
	}
	got := jsonLines(t, s.ok(append(sub, "--count", "3", "--timeout", "10s", "--json")...).stdout)
	if len(got) != 3 {
		t.Fatalf("subscribe --count 3: %d lines", len(got))
	}
	for _, l := range got {
		requireFields(t, "subscribe line", l, "id:string", "member:string", "subscription:string", "body:string", "redelivered:bool", "delivery_count:number", "priority:number")
		if p, _ := l["properties"].(map[string]any); l["subscription"] != "audit" || p["n"] != float64(5) {
			t.Errorf("subscribe line %v; want subscription audit and property n 5", l)
		}
	}
	// A client id held by another connection is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := client.Dial(ctx, []string{s.addrs.client}, client.Options{ClientID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"subscribe", "news", "--subscription", "x", "--durable", "--client-id", "held"}, "client id in use"},
		{[]string{"send", "news"}, "news is a topic"},
		{[]string{"queue", "show", "news"}, "is a topic"},
		{[]string{"subscribe", "news", "--subscription", "x", "--durable"}, "client id"},
		{[]string{"subscription", "delete", "news", "nope"}, "no subscription"},
	} {
		if line, _ := s.fails(c.args...); !strings.Contains(line, c.says) {
			t.Errorf("cairn %s: %q does not say %q", strings.Join(c.args, " "), line, c.says)
		}
	}
	s.ok("queue", "create", "jobs")
	if line, _ := s.fails("publish", "jobs"); !strings.Contains(line, "jobs is a queue") {
		t.Errorf("publish to a queue: %q", line)
	}
	s.ok("subscription", "delete", "news", "audit", "--client-id", "c1")
	if subs, _ := jsonObject(t, s.ok("topic", "show", "news", "--json").stdout)["subscriptions"].([]any); len(subs) != 0 {
		t.Errorf("after subscription delete: %v", subs)
	}
	if r := s.ok("topic", "list"); !strings.Contains(r.stdout, "news") {
		t.Errorf("topic list:\n%s", r.stdout)
	}
	s.ok("topic", "delete", "news")
}

func decodeArray(t *testing.T, out string) []any {
	t.Helper()
	v := jsonValue(t, out)
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("not a JSON array: %s", out)
	}
	return a
}

// TestCLIErrors checks the failure contract of the CLI: a non-zero exit
// status and exactly one line on stderr starting with "cairn: ", and that
// bad input changes nothing and leaves the server serving.
func TestCLIErrors(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.start()
	s.ok("queue", "create", "orders")
	s.ok("send", "orders", "--count", "2")
	unreachable := freeAddrs(t).client

	for _, c := range []struct {
		name string
		args []string
		want string // in the error line, case-insensitive
	}{
		{"unknown queue", []string{"queue", "show", "nope"}, "nope"},
		{"invalid name on create", []string{"queue", "create", "bad name"}, "invalid destination name"},
		{"invalid name on send", []string{"send", "bad/name"}, "invalid destination name"},
		{"invalid name on show", []string{"queue", "show", "a b"}, "invalid destination name"},
		{"queue exists", []string{"queue", "create", "orders"}, "orders"},
		{"message over 1 MiB", []string{"send", "orders", "--size", "2000000"}, "too large"},
		{"count 0", []string{"send", "orders", "--count", "0"}, "--count"},
		{"unknown ack mode", []string{"receive", "orders", "--ack", "sometimes"}, "--ack"},
		{"unknown command", []string{"bogus"}, "bogus"},
		{"unknown flag", []string{"queue", "list", "--frobnicate"}, "frobnicate"},
		{"missing argument", []string{"queue", "show"}, ""},
		{"update without a change", []string{"queue", "update", "orders"}, "--replicas"},
		{"update to 0 replicas", []string{"queue", "update", "orders", "--replicas", "0"}, "at least 1"},
		{"more replicas than nodes", []string{"queue", "update", "orders", "--replicas", "3"}, "live nodes"},
		{"property without a value", []string{"send", "orders", "--property", "color"}, "key=value"},
		{"property of an unknown type", []string{"send", "orders", "--property", "n:long=5"}, `unknown type "long"`},
		{"property not of its type", []string{"send", "orders", "--property", "n:int=five"}, "is not an int"},
		{"malformed selector", []string{"receive", "orders", "--selector", "color = ", "--timeout", "10s"}, "invalid selector at position 9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			line, _ := mustFail(t, nil, append([]string{"--server", s.addrs.client}, c.args...)...)
			t.Log(line)
			if !strings.Contains(strings.ToLower(line), strings.ToLower(c.want)) {
				t.Errorf("error line %q does not say %q", line, c.want)
			}
		})
	}
	t.Run("unreachable server", func(t *testing.T) {
		start := time.Now()
		mustFail(t, nil, "--server", unreachable, "queue", "list")
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("took %v to report an unreachable server", took)
		}
	})
	t.Run("oversized send with --json", func(t *testing.T) {
		line, r := s.fails("send", "orders", "--size", "2000000", "--json")
		ls := jsonLines(t, r.stdout)
		if len(ls) != 1 {
			t.Fatalf("%d JSON lines, want 1:\n%s", len(ls), r.stdout)
		}
		requireFields(t, "send line", ls[0], "id:string", "member:string", "outcome:string", "error:string")
		if ls[0]["outcome"] != "error" || ls[0]["error"] == "" {
			t.Errorf("send line %v, want outcome error with the error", ls[0])
		}
		if !strings.Contains(line, "1048576") {
			t.Errorf("error line %q does not name the limit", line)
		}
	})

	// Nothing changed, and the server still serves.
	s.showJSON("orders", 2, 0)
	list := decodeArray(t, s.ok("queue", "list", "--json").stdout)
	var names []string
	for _, q := range list {
		q, _ := q.(map[string]any)
		names = append(names, fmt.Sprint(q["name"]))
	}
	if len(names) != 1 || names[0] != "orders" {
		t.Errorf("queues after the bad input: %v, want only orders", names)
	}
	s.ok("send", "orders", "--body", "still serving")
	s.showJSON("orders", 3, 0)
}

// A queue's --max-messages and --max-size bound what it holds, shown in
// queue show --json; a send past them fails, naming why.
func TestCLIQueueLimits(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.start()
	s.ok("queue", "create", "few", "--max-messages", "2", "--members", "1")
	s.ok("send", "few", "--count", "2")
	if line, _ := s.fails("send", "few"); !strings.Contains(line, "member is full: it holds 2 messages, its share of the queue's --max-messages is 2") {
		t.Errorf("a third message in a queue of --max-messages 2: %q", line)
	}
	s.ok("queue", "create", "small", "--max-size", "2000", "--members", "1")
	if line, _ := s.fails("send", "small", "--count", "10"); !strings.Contains(line, "member is full") {
		t.Errorf("ten empty messages in a queue of --max-size 2000: %q", line)
	}
	q := jsonObject(t, s.ok("queue", "show", "few", "--json").stdout)
	requireFields(t, "queue show few", q, "max_messages:number", "max_bytes:number")
	if q["max_messages"] != 2.0 {
		t.Errorf("queue show few --json: max_messages %v, want 2", q["max_messages"])
	}
}

// TestEnvironment checks that every flag can come from the environment:
// CAIRN_SERVER for client commands, CAIRN_<FLAG> for `cairn server`.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.viaEnv = true
	s.nodeID = "envnode"
	s.extra["max-message-bytes"] = "2000"
	s.start()

	// The node took its id, data directory and addresses from CAIRN_*.
	code, body, err := s.readyz()
	if err != nil || code != http.StatusOK {
		t.Fatalf("/readyz: %d %s %v", code, body, err)
	}
	if r := jsonObject(t, body); r["node"] != "envnode" {
		t.Errorf("/readyz names node %v, want envnode (CAIRN_NODE_ID)", r["node"])
	}
	if entries, err := os.ReadDir(s.dir); err != nil || len(entries) == 0 {
		t.Errorf("CAIRN_DATA_DIR %s holds nothing (%v)", s.dir, err)
	}

	env := []string{"CAIRN_SERVER=" + s.addrs.client}
	mustOK(t, env, "queue", "create", "envq")
	st := jsonObject(t, mustOK(t, env, "cluster", "status", "--json").stdout)
	nodes, _ := st["nodes"].([]any)
	if st["answered_by"] != "envnode" || len(nodes) != 1 {
		t.Fatalf("cluster status via CAIRN_SERVER: %v", st)
	}
	n, _ := nodes[0].(map[string]any)
	for field, want := range map[string]string{"client_addr": s.addrs.client, "peer_addr": s.addrs.peer, "raft_addr": s.addrs.raft, "gossip_addr": s.addrs.gossip, "http_addr": s.addrs.http} {
		if n[field] != want {
			t.Errorf("cluster status node %s = %v, want %s (from CAIRN_%s)", field, n[field], want, strings.ToUpper(field))
		}
	}

	// CAIRN_MAX_MESSAGE_BYTES=2000, not the default 1 MiB.
	mustOK(t, env, "send", "envq", "--size", "1500")
	if line, _ := mustFail(t, env, "send", "envq", "--size", "3000"); !strings.Contains(line, "too large") {
		t.Errorf("a 3000-byte message with CAIRN_MAX_MESSAGE_BYTES=2000: %q, want too large", line)
	}

	// A flag beats its environment variable.
	bad := []string{"CAIRN_SERVER=" + freeAddrs(t).client}
	mustOK(t, bad, "--server", s.addrs.client, "queue", "show", "envq")
	mustFail(t, bad, "queue", "show", "envq")

	// A bad value in the environment is an error that names the variable.
	if line, _ := mustFail(t, []string{"CAIRN_BOOTSTRAP_EXPECT=many", "CAIRN_DATA_DIR=" + t.TempDir()}, "server"); !strings.Contains(line, "CAIRN_BOOTSTRAP_EXPECT") {
		t.Errorf("bad CAIRN_BOOTSTRAP_EXPECT: %q does not name the variable", line)
	}
	// And without a data directory the server refuses to start.
	if line, _ := mustFail(t, nil, "server", "--node-id", "x"); !strings.Contains(line, "--data-dir") {
		t.Errorf("server without a data dir: %q does not name --data-dir", line)
	}
}
