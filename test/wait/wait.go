// Package wait is the one family of polling helpers the tests of every
// package use: a test waits on a condition with a deadline, never on a
// bare sleep. A condition that can say what it still misses ("" once it
// holds) makes a timeout's failure explain itself; prefer Until and Steady
// over For and Holds where the test can say it.
package wait

import (
	"testing"
	"time"
)

// A condition is checked every fastPoll for its first fastFor, then every
// slowPoll: in-process conditions (an election, a takeover) are seen
// within a poll, and a long wait (a node restarting, a container becoming
// healthy) does not spin.
const (
	fastPoll = 20 * time.Millisecond
	fastFor  = 5 * time.Second
	slowPoll = 100 * time.Millisecond
)

func pollAfter(start time.Time) time.Duration {
	if time.Since(start) < fastFor {
		return fastPoll
	}
	return slowPoll
}

// For waits up to d for cond to hold, failing t after.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, d, what, explained(cond, "not yet"))
}

// Until waits up to d for missing to return "", failing t after with the
// last thing it said was missing.
func Until(t testing.TB, d time.Duration, what string, missing func() string) {
	t.Helper()
	start := time.Now()
	for {
		why := missing()
		if why == "" {
			return
		}
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s: %s", d, what, why)
		}
		time.Sleep(pollAfter(start))
	}
}

// Holds checks for the whole of d that cond holds, failing t as soon as it
// does not.
func Holds(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Steady(t, d, what, explained(cond, "it did not"))
}

// Steady checks for the whole of d that broken returns "", failing t with
// what it said as soon as it does not.
func Steady(t testing.TB, d time.Duration, what string, broken func() string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; time.Sleep(fastPoll) {
		if why := broken(); why != "" {
			t.Fatalf("%s stopped holding: %s", what, why)
		}
	}
}

func explained(cond func() bool, otherwise string) func() string {
	return func() string {
		if cond() {
			return ""
		}
		return otherwise
	}
}
