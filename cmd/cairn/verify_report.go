package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/cairnmq/cairn/client/history"
)

// verifyReport is what `cairn verify --json` prints.
type verifyReport struct {
	Queue string `json:"queue"`
	// Subscription is the kind of a --topics subscription: durable,
	// shared or non-durable; Queue is its destination (TOPIC::ID).
	Subscription string `json:"subscription,omitempty"`
	Duration     string `json:"duration"`
	SentOK       int    `json:"sent_ok"`
	SendUnknown  int    `json:"send_unknown"`
	SendFailed   int    `json:"send_failed"`
	// SendRolledBack counts the sends of rolled-back transactions.
	SendRolledBack int `json:"send_rolled_back"`
	Received       int `json:"received"`
	Redelivered    int `json:"redelivered"`
	Acked          int `json:"acked"`
	// Commits counts the transactions by outcome (with --transactions).
	Commits *commitCounts `json:"commits,omitempty"`
	// Reconnects is how often the workload's connections lost their node;
	// FaultsObserved adds every send, acknowledgement and commit that
	// failed or whose outcome was unknown (a planned rollback aside).
	Reconnects     int `json:"reconnects"`
	FaultsObserved int `json:"faults_observed"`
	// Minimums is what the run had to do to count (--min-*); Shortfalls
	// says what it did not do. A run with a shortfall is not ok: it did
	// not test what it was run for.
	Minimums   verifyMinimums `json:"minimums"`
	Shortfalls []string       `json:"shortfalls"`
	Violations map[string]int `json:"violations"`
	Examples   []string       `json:"examples"`
	OK         bool           `json:"ok"`
}

type commitCounts struct {
	Committed  int `json:"committed"`
	RolledBack int `json:"rolled_back"`
	Unknown    int `json:"unknown"`
}

// verifyMinimums is what a run must have done for its verdict to count.
type verifyMinimums struct {
	Sent      int `json:"sent"`
	Received  int `json:"received"`
	Commits   int `json:"commits,omitempty"`
	Rollbacks int `json:"rollbacks,omitempty"`
	Faults    int `json:"faults"`
}

// observed is what a workload saw happen to it beside its history.
type observed struct {
	reconnects int
	// errors are operations that failed or whose outcome was unknown,
	// planned rollbacks aside.
	errors int
}

// report is what the history h of dest (the queue, or a subscription) says
// of the run: its counts, each kind of violation with up to ten examples,
// and what it fell short of.
func report(dest string, cfg verifyConfig, h *history.History, seen observed) verifyReport {
	st := h.Stats()
	vs := h.Check()
	rep := verifyReport{Queue: dest, Duration: cfg.duration.String(), SentOK: st.SentOK, SendUnknown: st.SendUnknown, SendFailed: st.SendFailed, SendRolledBack: st.SendRolledBack,
		Acked: st.Acked, Reconnects: seen.reconnects, FaultsObserved: seen.reconnects + seen.errors,
		Minimums: cfg.minimums(), Shortfalls: []string{}, Violations: map[string]int{}, Examples: []string{}}
	for p, n := range st.Receipts {
		rep.Received += n
		rep.Redelivered += st.Redelivered[p]
	}
	if cfg.transactions {
		rep.Commits = &commitCounts{Committed: st.Committed, RolledBack: st.RolledBack, Unknown: st.TxUnknown}
	}
	rep.Shortfalls = shortfalls(rep)
	perKind := map[string]int{}
	for _, v := range vs {
		rep.Violations[v.Kind]++
		if perKind[v.Kind] < 10 {
			perKind[v.Kind]++
			rep.Examples = append(rep.Examples, v.Kind+": "+v.String())
		}
	}
	rep.OK = len(vs) == 0 && len(rep.Shortfalls) == 0
	return rep
}

// minimums is what --min-* ask of a run; commits and rollbacks only of a
// run with --transactions.
func (cfg verifyConfig) minimums() verifyMinimums {
	m := verifyMinimums{Sent: cfg.minSent, Received: cfg.minReceived, Faults: cfg.minFaults}
	if cfg.transactions {
		m.Commits, m.Rollbacks = cfg.minCommits, cfg.minRollbacks
	}
	return m
}

// shortfalls says what rep's run did less of than its minimums ask.
func shortfalls(rep verifyReport) []string {
	m := rep.Minimums
	out := []string{}
	short := func(did, want int, what, flag string) {
		if did < want {
			out = append(out, fmt.Sprintf("%d %s, --%s asks for %d", did, what, flag, want))
		}
	}
	short(rep.SentOK, m.Sent, "sends succeeded", "min-sent")
	short(rep.Received, m.Received, "messages received", "min-received")
	if rep.Commits != nil {
		short(rep.Commits.Committed, m.Commits, "transactions committed", "min-commits")
		short(rep.Commits.RolledBack, m.Rollbacks, "transactions rolled back", "min-rollbacks")
	}
	short(rep.FaultsObserved, m.Faults, "faults observed (reconnects, failed or unknown operations)", "min-faults")
	return out
}

// printVerify prints one report: its counts, then its verdict, its
// shortfalls or its examples.
func printVerify(w io.Writer, rep verifyReport) {
	what := "queue " + rep.Queue
	if rep.Subscription != "" {
		what = rep.Subscription + " subscription " + rep.Queue
	}
	fmt.Fprintf(w, "%s, %s: sends %d ok, %d unknown, %d failed", what, rep.Duration, rep.SentOK, rep.SendUnknown, rep.SendFailed)
	if rep.SendRolledBack > 0 {
		fmt.Fprintf(w, ", %d rolled back", rep.SendRolledBack)
	}
	fmt.Fprintf(w, "; %d received (%d redelivered), %d acknowledged", rep.Received, rep.Redelivered, rep.Acked)
	if c := rep.Commits; c != nil {
		fmt.Fprintf(w, "; transactions %d committed, %d rolled back, %d unknown", c.Committed, c.RolledBack, c.Unknown)
	}
	fmt.Fprintf(w, "; %d reconnects, %d faults observed\n", rep.Reconnects, rep.FaultsObserved)
	if len(rep.Shortfalls) > 0 {
		fmt.Fprintf(w, "the run did not do its work, so it proves nothing: %s\n", strings.Join(rep.Shortfalls, "; "))
	}
	switch {
	case len(rep.Violations) > 0:
	case rep.Subscription == "non-durable":
		fmt.Fprintln(w, "no violation: nothing duplicated, redelivered after its ack, unexpected or wrongly marked (a non-durable subscriber may miss what was published while it reconnected)")
	default:
		fmt.Fprintln(w, "no violation: nothing lost, duplicated, redelivered after its ack, unexpected, wrongly marked or partly committed")
	}
	for _, e := range rep.Examples {
		fmt.Fprintln(w, e)
	}
}
