package bench

import (
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

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

// A configuration is refused, naming the flag, before anything runs.
func TestConfig_Refused(t *testing.T) {
	ok := Config{Producers: 1, Size: 1024, Count: 1, Mode: Sync, Ack: AckClient}
	for name, mutate := range map[string]func(*Config){
		"small size":      func(c *Config) { c.Size = HeaderBytes - 1 },
		"no producers":    func(c *Config) { c.Producers = 0 },
		"no end":          func(c *Config) { c.Count = 0 },
		"mode":            func(c *Config) { c.Mode = "fast" },
		"ack":             func(c *Config) { c.Ack = "never" },
		"async tx":        func(c *Config) { c.Mode = Async; c.Window = 5; c.Transacted = 2 },
		"window":          func(c *Config) { c.Mode = Async; c.Window = 0 },
		"negative rate":   func(c *Config) { c.Rate = -1 },
		"too few members": func(c *Config) { c.Members = 3; c.Consumers = 2 },
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

// A message's end-to-end latency runs from its send to the moment the
// consumer took it; waiting for its acknowledgement to commit is not part of
// it, while the consume rate counts it only once acknowledged (now).
func TestReceived_EndToEndEndsWhenTaken(t *testing.T) {
	r := &run{cfg: Config{Size: HeaderBytes}, t: newTracker(1)}
	r.t.sending(0, 7)
	r.t.sent(0, 7, true)
	sentAt := time.Now().Add(-time.Second)
	hist := newHist()
	before := time.Now().UnixNano()
	r.received(taken{&client.Message{Body: r.body(0, 7, sentAt)}, sentAt.Add(5 * time.Millisecond)}, hist)
	if got := hist.Max(); got < 4900 || got > 5100 {
		t.Errorf("end-to-end latency %d µs, want 5,000: from the send to the take, not to the acknowledgement", got)
	}
	if r.consumed.Load() != 1 || r.lastRecv.Load() < before {
		t.Errorf("consumed %d, last receipt at %d (before it: %d): want it counted at the acknowledgement", r.consumed.Load(), r.lastRecv.Load(), before)
	}
}
