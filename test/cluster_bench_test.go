package test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// benchResult is the part of `cairn bench --json` the tests read; the
// field names are a contract that scripts read (cairn bench --help).
type benchResult struct {
	Dest        string             `json:"dest"`
	Members     int                `json:"members"`
	SendRate    float64            `json:"send_rate"`
	ConsumeRate float64            `json:"consume_rate"`
	SendLatency map[string]float64 `json:"send_latency_ms"`
	E2ELatency  map[string]float64 `json:"e2e_latency_ms"`
	Sent        int64              `json:"sent"`
	Consumed    int64              `json:"consumed"`
	Lost        int64              `json:"lost"`
	Duplicates  int64              `json:"duplicates"`
	Unexpected  int64              `json:"unexpected"`
	SendErrors  int64              `json:"send_errors"`
	// Subscriptions: a --topic run's.
	Subscriptions int `json:"subscriptions"`
}

// `cairn bench` against three real nodes, in every send and acknowledge
// mode: every message sent is consumed once, the rates and percentiles are
// filled in, and the queue it created for itself is gone afterwards.
func TestCluster3_Bench_EveryModeConsumesEveryMessageOnce(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	env := []string{"CAIRN_SERVER=" + strings.Join(c.clientAddrs(0), ",")}
	for _, args := range [][]string{
		{"--count", "300", "--producers", "2", "--consumers", "2"},
		{"--count", "2000", "--producers", "2", "--consumers", "1", "--mode", "async", "--window", "50", "--ack", "dups-ok", "--size", "100"},
		{"--count", "300", "--producers", "1", "--consumers", "1", "--transacted", "10"},
		{"--count", "600", "--producers", "3", "--consumers", "3", "--members", "3", "--ack", "auto"},
		{"--duration", "2s", "--rate", "200", "--producers", "2", "--consumers", "1"},
		{"--count", "500", "--producers", "2", "--consumers", "2", "--consume-after", "--mode", "async", "--window", "20"},
	} {
		r := mustOK(t, env, append([]string{"bench", "--json"}, args...)...)
		var res benchResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, r.stdout)
		}
		t.Logf("bench %v: %s", args, strings.TrimSpace(r.stdout))
		want := int64(0)
		for i, a := range args {
			if a == "--count" {
				json.Unmarshal([]byte(args[i+1]), &want)
			}
		}
		if want > 0 && res.Sent != want {
			t.Errorf("bench %v: sent %d, want %d", args, res.Sent, want)
		}
		if res.Sent == 0 || res.Consumed != res.Sent || res.Lost != 0 || res.Duplicates != 0 || res.Unexpected != 0 || res.SendErrors != 0 {
			t.Errorf("bench %v: sent %d consumed %d lost %d duplicates %d unexpected %d send errors %d", args, res.Sent, res.Consumed, res.Lost, res.Duplicates, res.Unexpected, res.SendErrors)
		}
		if res.SendRate <= 0 || res.ConsumeRate <= 0 {
			t.Errorf("bench %v: rates %v and %v", args, res.SendRate, res.ConsumeRate)
		}
		for _, l := range []map[string]float64{res.SendLatency, res.E2ELatency} {
			if len(l) != 5 || l["p50"] <= 0 || l["p50"] > l["p99"] || l["p99"] > l["max"] {
				t.Errorf("bench %v: latency %v: want p50 <= p99 <= max, all five percentiles", args, l)
			}
		}
	}
	// A topic: every subscription receives every message once; the
	// consumed count is every subscription's.
	for _, args := range [][]string{
		{"--count", "300", "--producers", "2", "--subscriptions", "3", "--consumers", "3"},
		{"--count", "600", "--producers", "2", "--subscriptions", "2", "--consumers", "6", "--members", "0", "--consume-after", "--mode", "async", "--window", "20"},
	} {
		r := mustOK(t, env, append([]string{"bench", "--json", "--topic"}, args...)...)
		var res benchResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("bench --topic %v: %v\n%s", args, err, r.stdout)
		}
		t.Logf("bench --topic %v: %s", args, strings.TrimSpace(r.stdout))
		if res.Subscriptions < 2 || res.Sent == 0 || res.Consumed != res.Sent*int64(res.Subscriptions) || res.Lost+res.Duplicates+res.Unexpected+res.SendErrors != 0 {
			t.Errorf("bench --topic %v: %d subscriptions, sent %d consumed %d lost %d duplicates %d unexpected %d send errors %d",
				args, res.Subscriptions, res.Sent, res.Consumed, res.Lost, res.Duplicates, res.Unexpected, res.SendErrors)
		}
	}
	// A named topic is kept, the run's subscriptions are not.
	mustOK(t, env, "bench", "--topic", "--dest", "kept-topic", "--subscriptions", "2", "--consumers", "2", "--count", "50")
	var topic struct {
		Subscriptions []json.RawMessage `json:"subscriptions"`
	}
	if show := mustOK(t, env, "topic", "show", "kept-topic", "--json"); json.Unmarshal([]byte(show.stdout), &topic) != nil || len(topic.Subscriptions) != 0 {
		t.Errorf("topic kept after bench --topic --dest kept-topic: want it without subscriptions: %s", show.stdout)
	}
	list := mustOK(t, env, "queue", "list")
	topics := mustOK(t, env, "topic", "list")
	if strings.Contains(list.stdout+topics.stdout, "bench-") {
		t.Errorf("bench left its queues or topics behind:\n%s%s", list.stdout, topics.stdout)
	}
	// A named --dest is created with --members and kept.
	mustOK(t, env, "bench", "--dest", "kept", "--members", "2", "--count", "50", "--consumers", "2")
	show := mustOK(t, env, "queue", "show", "kept", "--json")
	var q struct {
		Members []json.RawMessage `json:"members"`
		Pending int               `json:"pending"`
	}
	if err := json.Unmarshal([]byte(show.stdout), &q); err != nil || len(q.Members) != 2 || q.Pending != 0 {
		t.Errorf("queue kept after bench --dest kept --members 2: %s (%v)", show.stdout, err)
	}
}

// Bad bench arguments are refused with a message that names the flag,
// before anything is created.
func TestCluster3_Bench_BadArgumentsChangeNothing(t *testing.T) {
	s := newServer(t)
	s.start()
	env := []string{"CAIRN_SERVER=" + s.addrs.client}
	before := mustOK(t, env, "queue", "list", "--json").stdout
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--size", "8"}, "--size 8"},
		{[]string{"--mode", "fast"}, "--mode \"fast\""},
		{[]string{"--ack", "never"}, "--ack \"never\""},
		{[]string{"--mode", "async", "--transacted", "5"}, "--transacted"},
		{[]string{"--producers", "0"}, "--producers"},
		{[]string{"--count", "10", "--duration", "1s"}, "--count or --duration"},
		{[]string{"--mode", "async", "--window", "0"}, "--window"},
		{[]string{"--members", "3", "--consumers", "1", "--count", "10"}, "--consumers 3 or more"},
	} {
		msg, _ := mustFail(t, env, append([]string{"bench", "--dest", "refused"}, tc.args...)...)
		if !strings.Contains(msg, tc.want) {
			t.Errorf("bench %v: %q does not mention %q", tc.args, msg, tc.want)
		}
	}
	after := mustOK(t, env, "queue", "list", "--json").stdout
	if before != after {
		t.Errorf("refused bench runs changed the queues:\nbefore %s\nafter %s", before, after)
	}
}
