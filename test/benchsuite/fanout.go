package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// natsFanOut runs r.natsFanOut consumers of the stream at once, each with
// its own durable consumer (so each reads every message), and returns what
// they delivered in all per second: as many times the slowest one's rate,
// since the fan-out is done when the last of them is.
func natsFanOut(c *cluster, natsBin string, r row, args []string) (figure, error) {
	type out struct {
		text string
		err  error
	}
	nats := func(args ...string) error {
		args = append([]string{"--server", strings.Join(c.clients, ",")}, args...)
		out, err := exec.Command(filepath.Join(natsBin, "nats"), args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	// `nats bench js consume` makes only its default consumer; these are
	// made as it makes that one (pull, from the first message, R3 as the
	// stream, --batch unacknowledged messages per client), anew each round.
	maxPending := strconv.Itoa(flagInt(args, "--batch") * flagInt(args, "--clients"))
	for i := range r.natsFanOut {
		name := fmt.Sprintf("fan-out-%d", i)
		_ = nats("consumer", "rm", "benchstream", name, "-f")
		if err := nats("consumer", "add", "benchstream", name, "--pull", "--deliver", "all", "--ack", "explicit", "--replay", "instant",
			"--max-pending", maxPending, "--inactive-threshold", "10s", "--defaults"); err != nil {
			return figure{}, err
		}
	}
	outs := make(chan out, r.natsFanOut)
	for i := range r.natsFanOut {
		go func() {
			text, err := natsBench(c, natsBin, append(slices.Clone(args), "--consumer", fmt.Sprintf("fan-out-%d", i)), r.bytes())
			outs <- out{text, err}
		}()
	}
	slowest := 0.0
	for range r.natsFanOut {
		o := <-outs
		if o.err != nil {
			return figure{}, o.err
		}
		m := natsRate.FindAllStringSubmatch(o.text, -1)
		if m == nil {
			return figure{}, fmt.Errorf("no rate in nats bench's output:\n%s", o.text)
		}
		rate, _ := strconv.ParseFloat(strings.ReplaceAll(m[len(m)-1][1], ",", ""), 64)
		if slowest == 0 || rate < slowest {
			slowest = rate
		}
	}
	return figure{rate: slowest * float64(r.natsFanOut)}, nil
}

// flagInt is the value of flag name in args, 1 when it is not there.
func flagInt(args []string, name string) int {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		if v, err := strconv.Atoi(args[i+1]); err == nil {
			return v
		}
	}
	return 1
}
