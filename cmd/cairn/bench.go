package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cairnmq/cairn/client/bench"
)

func benchCmd() *cobra.Command {
	var (
		cfg    bench.Config
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure send and consume rates and latencies against a cluster",
		Long: `Run producers and consumers against one queue and measure them: send and
consume rates (msgs/s, MiB/s), send latency (send to the quorum's store) and
end-to-end latency (send to receipt), as percentiles from HDR histograms.
At the end it checks that every message sent was consumed exactly once: a run
that lost, duplicated or invented a message prints what it found and exits 1,
since a benchmark that loses messages has no result.

Without --dest it creates a fresh queue and deletes it afterwards; a named
--dest is created if missing (with --members) and kept.

With --topic the destination is a topic: the producers publish, the run makes
--subscriptions durable shared subscriptions (deleted at the end) and deals
the consumers over them in turn; every subscription must receive every
message, and "consumed" counts each receipt, so the consume rate is what the
topic delivered in all. Each message carries
its send time in its body, so end-to-end latency across machines needs their
clocks in step.

  cairn bench --count 100000 --producers 4 --consumers 4 --mode async --window 500
  cairn bench --duration 30s --producers 16 --consumers 0
  cairn bench --duration 30s --rate 5000 --json     # latency at a fixed load
  cairn bench --duration 30s --rate 5000 --consumers-on-host   # consumers served by the host itself
  cairn bench --topic --subscriptions 4 --consumers 4 --count 50000 --mode async

--json prints one object: {"send_rate","consume_rate" (msgs/s),
"send_mib_s","consume_mib_s","send_latency_ms","e2e_latency_ms" (each
{"p50","p90","p99","p999","max"}),"sent","consumed","lost","duplicates",
"unexpected","send_errors","send_seconds","consume_seconds", and the
configuration: "dest","members","producers","consumers","size","mode",
"window","ack","transacted","rate","consume_after","no_direct_sends",
"consumers_on_host","topic","subscriptions"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("count") && cmd.Flags().Changed("duration") {
				return fmt.Errorf("give --count or --duration, not both")
			}
			if cfg.Count > 0 {
				cfg.Duration = 0
			}
			cfg.Servers = servers(cmd)
			var err error
			if cfg.Base, err = clientOptions(cmd); err != nil {
				return err
			}
			var progress func(bench.Progress)
			errw := cmd.ErrOrStderr()
			if f, ok := errw.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				progress = func(p bench.Progress) { drawProgress(errw, p) }
			}
			res, err := bench.Run(cmd.Context(), cfg, progress)
			if progress != nil {
				fmt.Fprint(errw, "\r\033[K")
			}
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(cmd, res); err != nil {
					return err
				}
			} else {
				printBench(cmd.OutOrStdout(), res)
			}
			if !res.OK() {
				return &exitError{code: 1, err: fmt.Errorf("bench: no result: %d lost, %d duplicated, %d unexpected messages in %s", res.Lost, res.Duplicates, res.Unexpected, res.Dest)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dest, "dest", "", "queue (or topic) to use (default: a fresh one, deleted afterwards)")
	f.IntVar(&cfg.Members, "members", 1, "members of a queue or topic the run creates (0: one per node)")
	f.IntVar(&cfg.Producers, "producers", 1, "producers, each on its own connection")
	f.IntVar(&cfg.Consumers, "consumers", 1, "consumers, each on its own connection (0: send only)")
	f.IntVar(&cfg.Size, "size", 1024, fmt.Sprintf("message body size in bytes (at least %d)", bench.HeaderBytes))
	f.IntVar(&cfg.Count, "count", 0, "messages to send in all (instead of --duration)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long the producers send")
	f.StringVar(&cfg.Mode, "mode", bench.Sync, "sync (one send at a time per producer) or async (--window sends in flight)")
	f.IntVar(&cfg.Window, "window", 500, "unconfirmed sends per producer in async mode (they travel in batches, in order)")
	f.StringVar(&cfg.Ack, "ack", bench.AckClient, "consumers' acknowledge mode: auto, client (every message acknowledged: what has arrived together, waited for before more is taken) or dups-ok")
	f.IntVar(&cfg.Transacted, "transacted", 0, "send and consume in transactions of N messages (0: no transactions)")
	f.IntVar(&cfg.Rate, "rate", 0, "offered load in msgs/s over all producers (0: as fast as they go)")
	f.IntVar(&cfg.Prefetch, "prefetch", 0, "messages a consumer may hold unconsumed (0: the client's default, 64)")
	f.BoolVar(&cfg.NoDirectSends, "no-direct-sends", false, "send through each connection's node only, not straight to the member's host")
	f.BoolVar(&cfg.ConsumersOnHost, "consumers-on-host", false, "connect each consumer to its member's host instead of spreading the connections over the nodes (its deliveries then skip a relaying node)")
	f.BoolVar(&cfg.ConsumeAfter, "consume-after", false, "start the consumers when every send is done: the consume rate of a backlog")
	f.BoolVar(&cfg.Topic, "topic", false, "publish to a topic (--dest, or a fresh one) instead of sending to a queue; needs --subscriptions")
	f.IntVar(&cfg.Subscriptions, "subscriptions", 0, "with --topic: durable subscriptions to make, each to receive every message")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 30*time.Second, "after the sends, how long to wait for the next message before the missing ones count as lost")
	f.BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	return cmd
}

// drawProgress redraws one status line: a bar, counts and rates.
func drawProgress(w io.Writer, p bench.Progress) {
	const width = 30
	frac := min(max(p.Fraction, 0), 1)
	done := int(frac * width)
	bar := strings.Repeat("=", done) + strings.Repeat(" ", width-done)
	what := "sending"
	if p.Draining {
		what = "draining"
	}
	secs := p.Elapsed.Seconds()
	fmt.Fprintf(w, "\r\033[K[%s] %3.0f%% %s  sent %d (%.0f/s)  consumed %d (%.0f/s)  %s",
		bar, frac*100, what, p.Sent, float64(p.Sent)/secs, p.Consumed, float64(p.Consumed)/secs, p.Elapsed.Round(time.Second))
}

func printBench(w io.Writer, r bench.Result) {
	kind := "queue"
	if r.Topic {
		kind = "topic"
	}
	fmt.Fprintf(w, "%s %s (%d members): %d producers (%s", kind, r.Dest, r.Members, r.Producers, r.Mode)
	if r.Window > 0 {
		fmt.Fprintf(w, ", window %d", r.Window)
	}
	if r.Transacted > 0 {
		fmt.Fprintf(w, ", transactions of %d", r.Transacted)
	}
	fmt.Fprintf(w, "), %d consumers (ack %s)", r.Consumers, r.Ack)
	if r.Topic {
		fmt.Fprintf(w, " over %d subscriptions", r.Subscriptions)
	}
	fmt.Fprintf(w, ", %d-byte messages", r.Size)
	if r.Rate > 0 {
		fmt.Fprintf(w, ", offered %d msgs/s", r.Rate)
	}
	fmt.Fprintln(w)
	t := newTable(w, "", "MSGS", "SECONDS", "MSGS/S", "MIB/S", "P50 MS", "P90 MS", "P99 MS", "P99.9 MS", "MAX MS")
	row := func(name string, n int64, secs, rate, mib float64, l bench.Latency) {
		t.row(name, n, fmt.Sprintf("%.1f", secs), fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.2f", mib),
			fmt.Sprintf("%.2f", l.P50), fmt.Sprintf("%.2f", l.P90), fmt.Sprintf("%.2f", l.P99), fmt.Sprintf("%.2f", l.P999), fmt.Sprintf("%.2f", l.Max))
	}
	row("send", r.Sent, r.SendSeconds, r.SendRate, r.SendMiBs, r.SendLatency)
	if r.Consumers > 0 {
		row("consume (e2e)", r.Consumed, r.ConsumeSeconds, r.ConsumeRate, r.ConsumeMiBs, r.E2ELatency)
	}
	_ = t.flush()
	if r.SendErrors > 0 {
		fmt.Fprintf(w, "%d sends failed or ended unknown (not counted as sent)\n", r.SendErrors)
	}
	switch {
	case r.Consumers > 0 && r.OK() && r.Topic:
		fmt.Fprintln(w, "verified: every subscription consumed every message sent exactly once")
	case r.Consumers > 0 && r.OK():
		fmt.Fprintln(w, "verified: every message sent was consumed exactly once")
	}
}
