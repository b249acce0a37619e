package test

import (
	"strings"
	"testing"

	"github.com/cairnmq/cairn/client/history"
)

// newHistory records a workload whose consumer sessions never recover or
// reconnect: a phase is one session, and a message twice in one phase is a
// violation.
func newHistory() *history.History {
	h := history.New()
	h.StrictPhases = true
	return h
}

// reportHistory fails t with the history's violations, a few of each kind.
func reportHistory(t *testing.T, h *history.History) {
	t.Helper()
	t.Logf("history: %v", h.Stats())
	var b strings.Builder
	if history.Report(&b, h.Check(), 10) > 0 {
		t.Errorf("broken promises:\n%s", b.String())
	}
}
