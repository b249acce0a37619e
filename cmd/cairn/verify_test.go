package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// verifyCheck runs `cairn verify --check` on a history of events (one JSON
// object each, "time" left out) with extra flags, and returns its report
// and exit code.
func verifyCheck(t *testing.T, events []string, extra ...string) (verifyReport, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(events, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"verify", "--check", path, "--json"}, extra...))
	code := 0
	if err := root.Execute(); err != nil {
		var ee *exitError
		if !errors.As(err, &ee) {
			t.Fatalf("verify --check: %v", err)
		}
		code = ee.code
	}
	var rep verifyReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("verify --check printed %q: %v", out.String(), err)
	}
	return rep, code
}

// A clean history of a run with every kind of event: sends (one of
// unknown outcome, never stored), receipts acknowledged, one held and
// received again marked, transactions committed, rolled back on purpose
// and of unknown outcome applied whole, a reconnect.
var cleanHistory = []string{
	`{"op":"send","id":"a","outcome":"ok"}`,
	`{"op":"send","id":"b","outcome":"ok"}`,
	`{"op":"send","id":"u","outcome":"unknown"}`,
	`{"op":"receive","id":"a","phase":"c0","delivery_count":1}`,
	`{"op":"ack","id":"a","phase":"c0","outcome":"ok"}`,
	`{"op":"receive","id":"b","phase":"c0","delivery_count":1}`,
	`{"op":"reconnect","error":"cairn: lost server: n1"}`,
	`{"op":"receive","id":"b","phase":"drain","redelivered":true,"delivery_count":2}`,
	`{"op":"ack","id":"b","phase":"drain","outcome":"ok"}`,
	`{"op":"send","id":"t1","tx":"p0-tx0","outcome":"ok"}`,
	`{"op":"send","id":"t2","tx":"p0-tx0","outcome":"ok"}`,
	`{"op":"commit","tx":"p0-tx0","outcome":"ok"}`,
	`{"op":"receive","id":"t1","tx":"c0-tx0","phase":"c0","delivery_count":1}`,
	`{"op":"rollback","tx":"c0-tx0","outcome":"rolled-back"}`,
	`{"op":"receive","id":"t1","tx":"c0-tx1","phase":"c0","redelivered":true,"delivery_count":2}`,
	`{"op":"receive","id":"t2","tx":"c0-tx1","phase":"c0","delivery_count":1}`,
	`{"op":"send","id":"t3","tx":"c0-tx1","outcome":"ok"}`,
	`{"op":"commit","tx":"c0-tx1","outcome":"unknown","error":"cairn: commit unknown"}`,
	`{"op":"receive","id":"t3","phase":"drain","delivery_count":1}`,
	`{"op":"ack","id":"t3","phase":"drain","outcome":"ok"}`,
}

// verify --check finds each kind of violation in a recorded history, fails
// a run that did not do its work (no traffic, no commit, no fault where one
// was asked for), and passes a clean one with every minimum met.
func TestVerifyCheck_FindsEachViolationAndEachShortfall(t *testing.T) {
	rep, code := verifyCheck(t, cleanHistory, "--min-faults", "1")
	if code != 0 || !rep.OK || len(rep.Violations) != 0 || len(rep.Shortfalls) != 0 {
		t.Fatalf("the clean history: exit %d, %+v", code, rep)
	}
	if rep.SentOK != 4 || rep.SendUnknown != 2 || rep.Reconnects != 1 || rep.FaultsObserved != 3 || rep.Commits == nil || *rep.Commits != (commitCounts{Committed: 1, RolledBack: 1, Unknown: 1}) {
		t.Errorf("the clean history's counts: %+v, commits %+v", rep, rep.Commits)
	}
	for _, c := range []struct {
		name   string
		events []string
		kind   string
	}{
		{"lost", []string{
			`{"op":"send","id":"a","outcome":"ok"}`,
		}, "lost"},
		{"duplicated", []string{
			`{"op":"send","id":"a","outcome":"ok"}`,
			`{"op":"receive","id":"a","phase":"c0","delivery_count":1}`,
			`{"op":"receive","id":"a","phase":"drain","delivery_count":1}`,
			`{"op":"ack","id":"a","phase":"drain","outcome":"ok"}`,
		}, "duplicated"},
		{"redelivered unmarked", []string{
			`{"op":"send","id":"a","outcome":"ok"}`,
			`{"op":"receive","id":"a","phase":"c0","delivery_count":1}`,
			`{"op":"receive","id":"a","phase":"drain","delivery_count":2}`,
			`{"op":"ack","id":"a","phase":"drain","outcome":"ok"}`,
		}, "wrongly-marked"},
		{"acknowledged, then received", []string{
			`{"op":"send","id":"a","outcome":"ok"}`,
			`{"op":"receive","id":"a","phase":"c0","delivery_count":1}`,
			`{"op":"ack","id":"a","phase":"c0","outcome":"ok"}`,
			`{"op":"receive","id":"a","phase":"drain","redelivered":true,"delivery_count":2}`,
			`{"op":"ack","id":"a","phase":"drain","outcome":"ok"}`,
		}, "acked-redelivered"},
		{"partial transaction in sends", []string{
			`{"op":"send","id":"x","tx":"p0-tx0","outcome":"ok"}`,
			`{"op":"send","id":"y","tx":"p0-tx0","outcome":"ok"}`,
			`{"op":"commit","tx":"p0-tx0","outcome":"unknown"}`,
			`{"op":"receive","id":"x","phase":"drain","delivery_count":1}`,
			`{"op":"ack","id":"x","phase":"drain","outcome":"ok"}`,
		}, "partial-transaction"},
		{"partial transaction in acknowledgements", []string{
			`{"op":"send","id":"a","outcome":"ok"}`,
			`{"op":"send","id":"b","outcome":"ok"}`,
			`{"op":"receive","id":"a","tx":"c0-tx0","phase":"c0","delivery_count":1}`,
			`{"op":"receive","id":"b","tx":"c0-tx0","phase":"c0","delivery_count":1}`,
			`{"op":"commit","tx":"c0-tx0","outcome":"unknown"}`,
			`{"op":"receive","id":"b","phase":"drain","redelivered":true,"delivery_count":2}`,
			`{"op":"ack","id":"b","phase":"drain","outcome":"ok"}`,
		}, "partial-transaction"},
		{"a one-send transaction, its send visible and its receive back", []string{
			`{"op":"send","id":"a","outcome":"ok"}`,
			`{"op":"receive","id":"a","tx":"c0-tx0","phase":"c0","delivery_count":1}`,
			`{"op":"send","id":"x","tx":"c0-tx0","outcome":"ok"}`,
			`{"op":"commit","tx":"c0-tx0","outcome":"unknown"}`,
			`{"op":"receive","id":"a","phase":"drain","redelivered":true,"delivery_count":2}`,
			`{"op":"receive","id":"x","phase":"drain","delivery_count":1}`,
			`{"op":"ack","id":"a","phase":"drain","outcome":"ok"}`,
			`{"op":"ack","id":"x","phase":"drain","outcome":"ok"}`,
		}, "partial-transaction"},
		{"a rolled-back send received", []string{
			`{"op":"send","id":"a","outcome":"ok"}`,
			`{"op":"receive","id":"a","phase":"c0","delivery_count":1}`,
			`{"op":"ack","id":"a","phase":"c0","outcome":"ok"}`,
			`{"op":"send","id":"x","tx":"p0-tx0","outcome":"ok"}`,
			`{"op":"rollback","tx":"p0-tx0","outcome":"rolled-back"}`,
			`{"op":"receive","id":"x","phase":"drain","delivery_count":1}`,
			`{"op":"ack","id":"x","phase":"drain","outcome":"ok"}`,
		}, "unexpected"},
	} {
		rep, code := verifyCheck(t, c.events, "--min-commits", "0", "--min-rollbacks", "0")
		if code != 1 || rep.OK || rep.Violations[c.kind] == 0 {
			t.Errorf("%s: exit %d, violations %v; want exit 1 and a %s violation", c.name, code, rep.Violations, c.kind)
		}
	}
	for _, c := range []struct {
		name   string
		events []string
		flags  []string
		short  string
	}{
		{"no traffic", []string{`{"op":"reconnect","error":"x"}`}, nil, "--min-sent"},
		{"sends, nothing received", []string{`{"op":"send","id":"u","outcome":"unknown"}`, `{"op":"send","id":"v","outcome":"ok"}`}, nil, "--min-received"},
		{"fewer than asked", cleanHistory, []string{"--min-sent", "100"}, "--min-sent"},
		{"transactions, none rolled back", cleanHistory[:13], nil, "--min-rollbacks"},
		{"no fault where one was asked", []string{cleanHistory[0], cleanHistory[3], cleanHistory[4]}, []string{"--min-faults", "1"}, "--min-faults"},
	} {
		rep, code := verifyCheck(t, c.events, c.flags...)
		if code != 1 || rep.OK || !slices.ContainsFunc(rep.Shortfalls, func(s string) bool { return strings.Contains(s, c.short) }) {
			t.Errorf("%s: exit %d, ok %v, shortfalls %q; want exit 1 and one naming %s", c.name, code, rep.OK, rep.Shortfalls, c.short)
		}
	}
}

// FuzzVerifyCheck: whatever a history file holds, verify --check reads it
// without panicking, and judges it or says which line it cannot read.
func FuzzVerifyCheck(f *testing.F) {
	f.Add([]byte(strings.Join(cleanHistory, "\n")))
	f.Add([]byte(`{"op":"ack","id":"a","phase":"p"}`))
	f.Add([]byte(`{"op":"commit"}` + "\n" + `{"op":"receive","tx":"t"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := verifyConfig{minSent: 1, minReceived: 1}
		h, seen, _, err := replayHistory(bytes.NewReader(b), &cfg)
		if err != nil {
			return
		}
		if rep := report("fuzz", cfg, h, seen); rep.OK && rep.SentOK == 0 {
			t.Fatalf("a history without a successful send judged ok: %+v", rep)
		}
	})
}
