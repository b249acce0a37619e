package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// verifyReport is what `cairn verify --json` prints.
type verifyReport struct {
	Queue string `json:"queue"`
	// Subscription is the kind of a --topics subscription: durable,
	// shared or non-durable; Queue is its destination (TOPIC::ID).
	Subscription string         `json:"subscription,omitempty"`
	Duration     string         `json:"duration"`
	SentOK       int            `json:"sent_ok"`
	SendUnknown  int            `json:"send_unknown"`
	SendFailed   int            `json:"send_failed"`
	Received     int            `json:"received"`
	Redelivered  int            `json:"redelivered"`
	Acked        int            `json:"acked"`
	Violations   map[string]int `json:"violations"`
	Examples     []string       `json:"examples"`
	OK           bool           `json:"ok"`
}

// event is one line of `cairn verify --history FILE`.
type event struct {
	Time          time.Time `json:"time"`
	Op            string    `json:"op"` // send, receive, ack, commit
	ID            string    `json:"id,omitempty"`
	Tx            string    `json:"tx,omitempty"`
	Phase         string    `json:"phase,omitempty"`
	Outcome       string    `json:"outcome,omitempty"` // ok, error, unknown
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
	servers            []string
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
  partial-transaction  some, not all, of a transaction's sends came

It prints the counts and up to 10 examples of each violation and exits 1 if
there is any. --json prints one object: {"queue","duration","sent_ok",
"send_unknown","send_failed","received","redelivered","acked","violations":
{kind: count},"examples":[...],"ok"}. --history FILE writes every event as a
JSON line: {"time","op","id","tx","phase","outcome","error","redelivered",
"delivery_count"}.

--topics publishes to a new topic instead, with three subscriptions made
before the first publish: an unshared durable one (one consumer, on a
connection with a client id), a shared durable one (--consumers consumers)
and a non-durable one. It drains the durable two and checks each
subscription's history with the rules above, except that the non-durable
subscriber may miss messages, and so parts of transactions (it is
subscribed anew after a reconnect, and never drained): it must still get
no unmarked copy. --json then prints {"topic","duration",
"subscriptions":[one object as above, with "subscription": durable, shared
or non-durable],"ok"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.producers < 1 || cfg.consumers < 1 || cfg.duration <= 0 {
				return fmt.Errorf("--producers and --consumers must be at least 1 and --duration positive")
			}
			cfg.servers = servers(cmd)
			var err error
			if cfg.opts, err = clientOptions(cmd); err != nil {
				return err
			}
			if cfg.queue == "" {
				cfg.queue = "verify-" + client.NewMessageID()[3:11]
			}
			var rec *recorder
			if cfg.historyFile != "" {
				f, err := os.Create(cfg.historyFile)
				if err != nil {
					return err
				}
				defer f.Close()
				rec = &recorder{enc: json.NewEncoder(f)}
			}
			var reps []verifyReport
			var out any
			if cfg.topics {
				rep, err := runVerifyTopics(cmd.Context(), cmd.ErrOrStderr(), cfg, rec)
				if err != nil {
					return err
				}
				reps, out = rep.Subscriptions, rep
			} else {
				rep, err := runVerify(cmd.Context(), cmd.ErrOrStderr(), cfg, rec)
				if err != nil {
					return err
				}
				reps, out = []verifyReport{rep}, rep
			}
			if cfg.asJSON {
				if err := printJSON(cmd, out); err != nil {
					return err
				}
			}
			n := 0
			for _, rep := range reps {
				if !cfg.asJSON {
					printVerify(cmd.OutOrStdout(), rep)
				}
				for _, c := range rep.Violations {
					n += c
				}
			}
			if n > 0 {
				return &exitError{code: 1, err: fmt.Errorf("verify: %d violations in %s", n, cfg.queue)}
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
	return cmd
}

// printVerify prints one report: its counts, then its verdict or its
// examples.
func printVerify(w io.Writer, rep verifyReport) {
	what := "queue " + rep.Queue
	if rep.Subscription != "" {
		what = rep.Subscription + " subscription " + rep.Queue
	}
	fmt.Fprintf(w, "%s, %s: sends %d ok, %d unknown, %d failed; %d received (%d redelivered), %d acknowledged\n",
		what, rep.Duration, rep.SentOK, rep.SendUnknown, rep.SendFailed, rep.Received, rep.Redelivered, rep.Acked)
	if rep.OK && rep.Subscription == "non-durable" {
		fmt.Fprintln(w, "no violation: nothing duplicated, redelivered after its ack, unexpected or wrongly marked (a non-durable subscriber may miss what was published while it reconnected)")
	} else if rep.OK {
		fmt.Fprintln(w, "no violation: nothing lost, duplicated, redelivered after its ack, unexpected, wrongly marked or partly committed")
	}
	for _, e := range rep.Examples {
		fmt.Fprintln(w, e)
	}
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
	w := newWorkload(ctx, cfg)
	defer w.close()
	open := func(s *client.Session) (*client.Consumer, error) { return s.Consumer(w.ctx, cfg.queue) }
	for i := range cfg.consumers {
		if err := w.startConsumer(ctx, "", open, h, rec, fmt.Sprintf("c%d", i)); err != nil {
			return verifyReport{}, err
		}
	}
	if err := w.startProducers(ctx, h, rec); err != nil {
		return verifyReport{}, err
	}
	w.finish()
	fmt.Fprintf(logw, "cairn verify: workload done after %v; draining %s\n", time.Since(start).Round(time.Millisecond), cfg.queue)
	holds := func(ctx context.Context) (client.QueueInfo, error) { return a.ShowQueue(ctx, cfg.queue) }
	if err := drainVerify(ctx, cfg, cfg.queue, len(q.Members), h, rec, holds); err != nil {
		return verifyReport{}, err
	}
	return report(cfg.queue, cfg, h), nil
}

// report is what the history h of dest (the queue, or a subscription) says
// of the run: its counts, and each kind of violation with up to ten
// examples.
func report(dest string, cfg verifyConfig, h *history.History) verifyReport {
	st := h.Stats()
	vs := h.Check()
	rep := verifyReport{Queue: dest, Duration: cfg.duration.String(), SentOK: st.SentOK, SendUnknown: st.SendUnknown, SendFailed: st.SendFailed,
		Acked: st.Acked, Violations: map[string]int{}, Examples: []string{}, OK: len(vs) == 0}
	for p, n := range st.Receipts {
		rep.Received += n
		rep.Redelivered += st.Redelivered[p]
	}
	perKind := map[string]int{}
	for _, v := range vs {
		rep.Violations[v.Kind]++
		if perKind[v.Kind] < 10 {
			perKind[v.Kind]++
			rep.Examples = append(rep.Examples, v.Kind+": "+v.String())
		}
	}
	return rep
}

// sendLog records sends: a queue's history, or every subscription's.
type sendLog interface {
	Sending(id string)
	Sent(id string, err error)
	SentInTx(txID, id string)
	Committed(txID string, err error)
}

// produce sends (publishes, with --topics) until ctx ends: one message at
// a time, or transactions of one to three.
func produce(ctx context.Context, conn *client.Connection, cfg verifyConfig, h sendLog, rec *recorder, i int) {
	mode := client.AutoAck
	if cfg.transactions {
		mode = client.Transacted
	}
	s, err := conn.Session(mode)
	if err != nil {
		return
	}
	p, err := s.Producer(cfg.queue)
	if cfg.topics {
		p, err = s.Publisher(cfg.queue)
	}
	if err != nil {
		return
	}
	p.SetIdempotent(cfg.dedup)
	for n := 0; ctx.Err() == nil; n++ {
		size := 1
		tx := ""
		if cfg.transactions {
			size = 1 + rand.IntN(3)
			tx = fmt.Sprintf("p%d-tx%d", i, n)
		}
		var sendErr error
		for range size {
			id := client.NewMessageID()
			if tx != "" {
				h.SentInTx(tx, id)
			} else {
				h.Sending(id)
			}
			sctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			_, err := p.Send(sctx, &client.Message{ID: id, Body: []byte(id)})
			cancel()
			out, msg := verifyOutcome(err)
			rec.log(event{Op: "send", ID: id, Tx: tx, Outcome: out, Error: msg})
			if tx == "" {
				h.Sent(id, err)
			} else if err != nil {
				sendErr = err
				break
			}
		}
		if tx == "" {
			continue
		}
		var err error
		if sendErr != nil {
			err = errors.Join(fmt.Errorf("%w: a send failed: %v", client.ErrTransactionRolledBack, sendErr), s.Rollback(context.Background()))
		} else {
			err = s.Commit(context.Background())
		}
		h.Committed(tx, err)
		out, msg := verifyOutcome(err)
		rec.log(event{Op: "commit", Tx: tx, Outcome: out, Error: msg})
	}
}

// consume receives with k and acknowledges (or commits) until ctx ends. A
// subscriber refused after a reconnect because its subscription still
// counts its consumer from before (ErrSubscriptionInUse) is made again with
// open a moment later, as an application would.
func consume(ctx context.Context, s *client.Session, k *client.Consumer, open func(*client.Session) (*client.Consumer, error), cfg verifyConfig, h *history.History, rec *recorder, phase string) {
	for n := 0; ctx.Err() == nil; n++ {
		tx := ""
		size := 1
		if cfg.transactions {
			tx = fmt.Sprintf("%s-tx%d", phase, n)
			size = 1 + rand.IntN(3)
		}
		var got []*history.Receipt
		for range size {
			m, err := k.ReceiveTimeout(200 * time.Millisecond)
			if m == nil {
				switch {
				case errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrDestinationDeleted):
					return
				case errors.Is(err, client.ErrSubscriptionInUse):
					_ = k.Close()
					if k = reopen(ctx, s, open); k == nil {
						return
					}
				case err != nil:
					sleepCtx(ctx, 100*time.Millisecond) // a reconnect: no busy loop
				}
				break
			}
			rec.log(event{Op: "receive", ID: m.ID, Tx: tx, Phase: phase, Outcome: "ok", Redelivered: m.Redelivered, DeliveryCount: m.DeliveryCount})
			if tx != "" {
				h.ReceivedInTx(tx, phase, m)
				continue
			}
			got = append(got, h.Received(phase, m))
			err = m.Ack()
			h.Acked(got[len(got)-1], err)
			out, msg := verifyOutcome(err)
			rec.log(event{Op: "ack", ID: m.ID, Phase: phase, Outcome: out, Error: msg})
		}
		if tx != "" {
			err := s.Commit(context.Background())
			h.Committed(tx, err)
			out, msg := verifyOutcome(err)
			rec.log(event{Op: "commit", Tx: tx, Outcome: out, Error: msg})
		}
	}
}

// drainVerify consumes every member of dest (a queue, or a subscription
// TOPIC::ID) until holds says it holds nothing and nothing came for a
// while, recording each message in the drain phase.
func drainVerify(ctx context.Context, cfg verifyConfig, dest string, members int, h *history.History, rec *recorder, holds func(context.Context) (client.QueueInfo, error)) error {
	o := cfg.opts
	o.ReconnectPolicy = client.ReconnectAll
	conn, err := client.Dial(ctx, cfg.servers, o)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := conn.Session(client.ClientAck)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	var ks []*client.Consumer
	for i := range members {
		// A cluster just healed may still be electing the member's leader or
		// replacing a broken stream: a failed create is tried again.
		for {
			k, err := s.Consumer(ctx, fmt.Sprintf("%s#%d", dest, i))
			if err == nil {
				ks = append(ks, k)
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("verify: consumer of %s#%d for the drain: %w", dest, i, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	lastGot := time.Now()
	var left *client.QueueInfo
	var showErr error
	for time.Now().Before(deadline) {
		// Take what every member has at hand, then acknowledge it all at
		// once (ClientAck): one round trip per batch, not per message.
		var batch []*history.Receipt
		for _, k := range ks {
			for range 256 {
				m, err := k.ReceiveNoWait()
				if err != nil || m == nil {
					break
				}
				batch = append(batch, h.Received(history.DrainPhase, m))
				rec.log(event{Op: "receive", ID: m.ID, Phase: history.DrainPhase, Outcome: "ok", Redelivered: m.Redelivered, DeliveryCount: m.DeliveryCount})
			}
		}
		if len(batch) > 0 {
			lastGot = time.Now()
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.Acknowledge(actx)
			cancel()
			for _, r := range batch {
				h.Acked(r, err)
			}
			continue
		}
		time.Sleep(50 * time.Millisecond)
		if time.Since(lastGot) < 2*time.Second {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		q, err := holds(sctx)
		cancel()
		if err == nil && q.Pending == 0 && q.Delivered == 0 && q.Prepared == 0 && q.Delayed == 0 {
			return nil
		}
		left, showErr = &q, err
	}
	switch {
	case left == nil:
		return fmt.Errorf("verify: %s: messages still came after draining for 2 minutes", dest)
	case showErr != nil:
		return fmt.Errorf("verify: draining %s for 2 minutes: asking what it holds failed: %w", dest, showErr)
	}
	return fmt.Errorf("verify: %s still held messages after draining for 2 minutes: %d pending, %d delivered and not acknowledged, %d prepared, %d delayed (cairn queue show, for a subscription cairn topic show, tells which member)",
		dest, left.Pending, left.Delivered, left.Prepared, left.Delayed)
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
