package bench

import "testing"

// The verdict counts what a benchmark must not do: a message sent and never
// consumed, one consumed twice, one consumed that was never sent, or whose
// send was refused. A message whose send outcome is unknown may come or not.
func TestTracker_Verdict(t *testing.T) {
	tr := newTracker(2)
	for seq := range uint64(5) {
		tr.sending(0, seq)
	}
	tr.sent(0, 0, true)
	tr.sent(0, 1, true)
	tr.sent(0, 2, true) // never consumed: lost
	tr.sent(0, 3, false)
	tr.notSent(0, 4) // refused: must not come

	for _, c := range []struct {
		no    int
		seq   uint64
		first bool
	}{
		{0, 0, true}, {0, 0, false}, // a duplicate
		{0, 1, true},
		{0, 3, true},  // outcome unknown: may come
		{0, 4, false}, // refused, yet came: unexpected
		{1, 0, false}, // never sent: unexpected
		{7, 0, false}, // no such producer: unexpected
	} {
		if got := tr.consumed(c.no, c.seq); got != c.first {
			t.Errorf("consumed(%d, %d) = %v, want %v", c.no, c.seq, got, c.first)
		}
	}
	lost, dups, unexpected := tr.verdict()
	if lost != 1 || dups != 1 || unexpected != 3 {
		t.Errorf("verdict: lost %d, duplicates %d, unexpected %d; want 1, 1, 3", lost, dups, unexpected)
	}
	if tr.allConsumed() {
		t.Error("allConsumed with a sent message never consumed")
	}
	tr.consumed(0, 2)
	if !tr.allConsumed() {
		t.Error("not allConsumed after every sent message came")
	}
}

// A message taken whose acknowledgement's outcome is unknown is consumed
// unless it comes again, and its coming again is its first receipt; that
// holds whether its send's outcome arrives before or after.
func TestTracker_MaybeConsumed(t *testing.T) {
	tr := newTracker(1)
	for seq := range uint64(3) {
		tr.sending(0, seq)
	}
	tr.sent(0, 0, true)
	tr.maybeConsumed(0, 0)
	tr.maybeConsumed(0, 1) // before its send's outcome
	tr.maybeConsumed(0, 2)
	tr.sent(0, 1, true)
	tr.sent(0, 2, true)
	if !tr.allConsumed() {
		t.Error("not allConsumed: a message taken with an acknowledgement of unknown outcome counts as consumed")
	}
	if !tr.consumed(0, 2) || tr.consumed(0, 2) {
		t.Error("a message that comes again after an unknown acknowledgement: want its first receipt, then a duplicate")
	}
	lost, dups, unexpected := tr.verdict()
	if lost != 0 || dups != 1 || unexpected != 0 || tr.done.Load() != 3 {
		t.Errorf("verdict: lost %d, duplicates %d, unexpected %d, done %d; want 0, 1, 0, 3", lost, dups, unexpected, tr.done.Load())
	}
}

// A configuration is refused, naming the flag, before anything runs.
func TestConfig_Refused(t *testing.T) {
	ok := Config{Producers: 1, Size: 1024, Count: 1, Mode: Sync, Ack: AckClient}
	for name, mutate := range map[string]func(*Config){
		"small size":               func(c *Config) { c.Size = HeaderBytes - 1 },
		"no producers":             func(c *Config) { c.Producers = 0 },
		"no end":                   func(c *Config) { c.Count = 0 },
		"mode":                     func(c *Config) { c.Mode = "fast" },
		"ack":                      func(c *Config) { c.Ack = "never" },
		"async tx":                 func(c *Config) { c.Mode = Async; c.Window = 5; c.Transacted = 2 },
		"window":                   func(c *Config) { c.Mode = Async; c.Window = 0 },
		"negative rate":            func(c *Config) { c.Rate = -1 },
		"too few members":          func(c *Config) { c.Members = 3; c.Consumers = 2 },
		"subscriptions of a queue": func(c *Config) { c.Subscriptions = 2 },
		"topic, no subscription":   func(c *Config) { c.Topic = true },
		"topic, too few consumers": func(c *Config) { c.Topic, c.Subscriptions, c.Consumers = true, 3, 2 },
		"negative subscriptions":   func(c *Config) { c.Topic, c.Subscriptions = true, -1 },
	} {
		c := ok
		mutate(&c)
		if err := c.check(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
	if err := ok.check(); err != nil {
		t.Errorf("refused a good configuration: %v", err)
	}
}
