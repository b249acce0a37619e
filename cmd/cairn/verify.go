package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// event is one line of `cairn verify --history FILE`.
type event struct {
	Time          time.Time `json:"time"`
	Op            string    `json:"op"` // send, receive, ack, commit, rollback, reconnect
	ID            string    `json:"id,omitempty"`
	Tx            string    `json:"tx,omitempty"`
	Phase         string    `json:"phase,omitempty"`
	Outcome       string    `json:"outcome,omitempty"` // ok, error, unknown, rolled-back
	Error         string    `json:"error,omitempty"`
	Redelivered   bool      `json:"redelivered,omitempty"`
	DeliveryCount int       `json:"delivery_count,omitempty"`
}

// recorder writes events as JSON lines; a nil recorder writes nothing.
type recorder struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (r *recorder) log(e event) {
	if r == nil {
		return
	}
	e.Time = time.Now().UTC()
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(e)
}

func verifyOutcome(err error) (string, string) {
	switch {
	case err == nil:
		return "ok", ""
	case errors.Is(err, client.ErrTransactionRolledBack):
		return "rolled-back", err.Error()
	case errors.Is(err, client.ErrDeliveryUnknown), errors.Is(err, client.ErrCommitUnknown), errors.Is(err, client.ErrLostServer):
		return "unknown", err.Error()
	}
	return "error", err.Error()
}

type verifyConfig struct {
	duration                      time.Duration
	producers, consumers, members int
	dedup, transactions, asJSON   bool
	// topics: the workload publishes to a topic (queue names it) with
	// durable, shared and non-durable subscribers.
	topics             bool
	historyFile, queue string
	// check judges the history recorded in this file instead of running
	// a workload.
	check   string
	servers []string
	// What a run must have done for its verdict to count (--min-*).
	minSent, minReceived, minCommits, minRollbacks, minFaults int
	// opts is how to reach the nodes and prove oneself to them.
	opts client.Options
}

func verifyCmd() *cobra.Command {
	var cfg verifyConfig
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Run a workload, then check every promise against what it saw",
		Long: `Run producers and consumers against a new queue for --duration, through the
reconnecting client (they survive failovers: kill nodes meanwhile), recording
every send, receive, acknowledge and commit with its outcome. Then drain the
queue and check the history:

  lost                 a send returned ok and the message never came (or came,
                       was not acknowledged, and never came again)
  duplicated           a second copy came as new (a message stored twice, a
                       dedup id enqueued twice), or one came twice in the drain
  acked-redelivered    a message came again after its acknowledge returned ok
  unexpected           a message came that was never sent, or whose send failed
                       (or whose transaction rolled back)
  wrongly-marked       a message came again without the redelivered mark and a
                       higher delivery count, or came first marked
  wrong-count          the k-th receipt of a message had a delivery count below k
  partial-transaction  a transaction applied in part: some of its sends came
                       and not all, or its receipts' messages came again while
                       its sends came (or did not while they did not)

Every second consumer's session has two consumers (of the queue, or of the
shared subscription), which must share its messages, each to one of them.
With --transactions, one transaction in five is rolled back on purpose.

A run must also have done its work, or its verdict proves nothing: at least
--min-sent sends succeeded, --min-received messages received, with
--transactions --min-commits committed and --min-rollbacks rolled back, and
--min-faults faults observed (reconnects of its connections, and sends,
acknowledgements and commits that failed or whose outcome was unknown).

It prints the counts and up to 10 examples of each violation, and exits 1 if
there is any violation or shortfall. --json prints one object: {"queue",
"duration","sent_ok","send_unknown","send_failed","send_rolled_back",
"received","redelivered","acked","commits":{"committed","rolled_back",
"unknown"},"reconnects",
"faults_observed","minimums":{"sent","received","commits","rollbacks",
"faults"},"shortfalls":[...],"violations":{kind: count},"examples":[...],
"ok"}. --history FILE writes every event as a JSON line: {"time","op","id",
"tx","phase","outcome","error","redelivered","delivery_count"}, op one of
send, receive, ack, commit, rollback and reconnect. --check FILE judges such
a file of a queue's run instead of running a workload (no server needed).

--topics publishes to a new topic instead, with three subscriptions made
before the first publish: an unshared durable one (one consumer, on a
connection with a client id), a shared durable one (--consumers consumers)
and a non-durable one. It drains the durable two and checks each
subscription's history with the rules above, except that the non-durable
subscriber may miss messages, and so parts of transactions (it is
subscribed anew after a reconnect, and never drained): it must still get
no unmarked copy, and need receive nothing. --json then prints {"topic",
"duration","subscriptions":[one object as above, with "subscription":
durable, shared or non-durable],"ok"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.producers < 1 || cfg.consumers < 1 || cfg.duration <= 0 {
				return fmt.Errorf("--producers and --consumers must be at least 1 and --duration positive")
			}
			if cfg.minSent < 0 || cfg.minReceived < 0 || cfg.minCommits < 0 || cfg.minRollbacks < 0 || cfg.minFaults < 0 {
				return fmt.Errorf("the --min-* flags take a count of 0 or more")
			}
			var reps []verifyReport
			var out any
			if cfg.check != "" {
				if cfg.topics {
					return fmt.Errorf("--check judges a queue's history; a --topics run is judged as it runs")
				}
				rep, err := checkHistoryFile(cfg)
				if err != nil {
					return err
				}
				reps, out = []verifyReport{rep}, rep
			} else {
				var err error
				if reps, out, err = runVerifyCommand(cmd, &cfg); err != nil {
					return err
				}
			}
			if cfg.asJSON {
				if err := printJSON(cmd, out); err != nil {
					return err
				}
			}
			violations, short := 0, 0
			for _, rep := range reps {
				if !cfg.asJSON {
					printVerify(cmd.OutOrStdout(), rep)
				}
				for _, c := range rep.Violations {
					violations += c
				}
				short += len(rep.Shortfalls)
			}
			switch {
			case violations > 0:
				return &exitError{code: 1, err: fmt.Errorf("verify: %d violations in %s", violations, cfg.queue)}
			case short > 0:
				return &exitError{code: 1, err: fmt.Errorf("verify: the run of %s did not do its work (%d shortfalls): its verdict proves nothing", cfg.queue, short)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.duration, "duration", 60*time.Second, "how long the workload runs")
	f.IntVar(&cfg.producers, "producers", 4, "producers, each on its own connection")
	f.IntVar(&cfg.consumers, "consumers", 4, "consumers, each on its own connection")
	f.IntVar(&cfg.members, "members", 0, "members of the queue (0: one per node)")
	f.BoolVar(&cfg.dedup, "dedup", false, "idempotent sends: every message carries a dedup id")
	f.BoolVar(&cfg.transactions, "transactions", false, "send and consume in transactions of 1 to 3 messages")
	f.StringVar(&cfg.historyFile, "history", "", "write every event to this file, one JSON line each")
	f.StringVar(&cfg.queue, "queue", "", "queue (with --topics, topic) to create and use (default: verify-<random>)")
	f.BoolVar(&cfg.topics, "topics", false, "publish to a topic with a durable, a shared durable (--consumers) and a non-durable subscriber, and check each")
	f.BoolVar(&cfg.asJSON, "json", false, "print the report as JSON")
	f.StringVar(&cfg.check, "check", "", "judge the history recorded in this file (--history) instead of running a workload")
	f.IntVar(&cfg.minSent, "min-sent", 1, "fail unless at least this many sends succeeded")
	f.IntVar(&cfg.minReceived, "min-received", 1, "fail unless at least this many messages were received")
	f.IntVar(&cfg.minCommits, "min-commits", 1, "with --transactions, fail unless at least this many transactions committed")
	f.IntVar(&cfg.minRollbacks, "min-rollbacks", 1, "with --transactions, fail unless at least this many rolled back")
	f.IntVar(&cfg.minFaults, "min-faults", 0, "fail unless the workload observed at least this many faults (reconnects, failed or unknown operations)")
	return cmd
}

// runVerifyCommand runs verify's workload against the servers and returns
// its reports, and what --json prints.
func runVerifyCommand(cmd *cobra.Command, cfg *verifyConfig) ([]verifyReport, any, error) {
	cfg.servers = servers(cmd)
	var err error
	if cfg.opts, err = clientOptions(cmd); err != nil {
		return nil, nil, err
	}
	if cfg.queue == "" {
		cfg.queue = "verify-" + client.NewMessageID()[3:11]
	}
	var rec *recorder
	if cfg.historyFile != "" {
		f, err := os.Create(cfg.historyFile)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		rec = &recorder{enc: json.NewEncoder(f)}
	}
	if cfg.topics {
		rep, err := runVerifyTopics(cmd.Context(), cmd.ErrOrStderr(), *cfg, rec)
		return rep.Subscriptions, rep, err
	}
	rep, err := runVerify(cmd.Context(), cmd.ErrOrStderr(), *cfg, rec)
	return []verifyReport{rep}, rep, err
}

func runVerify(ctx context.Context, logw io.Writer, cfg verifyConfig, rec *recorder) (verifyReport, error) {
	a, err := client.NewAdmin(cfg.servers, cfg.opts)
	if err != nil {
		return verifyReport{}, err
	}
	defer a.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	q, err := a.CreateQueue(actx, cfg.queue, client.QueueOptions{Members: cfg.members})
	cancel()
	if err != nil {
		return verifyReport{}, fmt.Errorf("creating queue %s: %w", cfg.queue, err)
	}
	h := history.New()
	start := time.Now()
	w := newWorkload(ctx, cfg, rec)
	defer w.close()
	open := func(s *client.Session) (*client.Consumer, error) { return s.Consumer(w.ctx, cfg.queue) }
	for i := range cfg.consumers {
		// Every second session has two consumers of the queue.
		if err := w.startConsumer(ctx, "", open, h, fmt.Sprintf("c%d", i), i%2 == 1); err != nil {
			return verifyReport{}, err
		}
	}
	if err := w.startProducers(ctx, h); err != nil {
		return verifyReport{}, err
	}
	w.finish()
	fmt.Fprintf(logw, "cairn verify: workload done after %v; draining %s\n", time.Since(start).Round(time.Millisecond), cfg.queue)
	holds := func(ctx context.Context) (client.QueueInfo, error) { return a.ShowQueue(ctx, cfg.queue) }
	if err := w.drain(ctx, cfg.queue, len(q.Members), h, holds); err != nil {
		return verifyReport{}, err
	}
	return report(cfg.queue, cfg, h, w.observed()), nil
}

// reopen makes a consumer again with open, trying every second until it
// is made or ctx ends (nil).
func reopen(ctx context.Context, s *client.Session, open func(*client.Session) (*client.Consumer, error)) *client.Consumer {
	for {
		if k, err := open(s); err == nil {
			return k
		}
		if !sleepCtx(ctx, time.Second) {
			return nil
		}
	}
}

// sleepCtx waits d, or until ctx ends; false if it ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
