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
	Queue       string         `json:"queue"`
	Duration    string         `json:"duration"`
	SentOK      int            `json:"sent_ok"`
	SendUnknown int            `json:"send_unknown"`
	SendFailed  int            `json:"send_failed"`
	Received    int            `json:"received"`
	Redelivered int            `json:"redelivered"`
	Acked       int            `json:"acked"`
	Violations  map[string]int `json:"violations"`
	Examples    []string       `json:"examples"`
	OK          bool           `json:"ok"`
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
	historyFile, queue            string
	servers                       []string
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
"delivery_count"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.producers < 1 || cfg.consumers < 1 || cfg.duration <= 0 {
				return fmt.Errorf("--producers and --consumers must be at least 1 and --duration positive")
			}
			cfg.servers = servers(cmd)
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
			rep, err := runVerify(cmd.Context(), cmd.ErrOrStderr(), cfg, rec)
			if err != nil {
				return err
			}
			if cfg.asJSON {
				if err := printJSON(cmd, rep); err != nil {
					return err
				}
			} else {
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "queue %s, %s: sends %d ok, %d unknown, %d failed; %d received (%d redelivered), %d acknowledged\n",
					rep.Queue, rep.Duration, rep.SentOK, rep.SendUnknown, rep.SendFailed, rep.Received, rep.Redelivered, rep.Acked)
				if rep.OK {
					fmt.Fprintln(w, "no violation: nothing lost, duplicated, redelivered after its ack, unexpected, wrongly marked or partly committed")
				}
				for _, e := range rep.Examples {
					fmt.Fprintln(w, e)
				}
			}
			if !rep.OK {
				n := 0
				for _, c := range rep.Violations {
					n += c
				}
				return &exitError{code: 1, err: fmt.Errorf("verify: %d violations in queue %s", n, rep.Queue)}
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
	f.StringVar(&cfg.queue, "queue", "", "queue to create and use (default: verify-<random>)")
	f.BoolVar(&cfg.asJSON, "json", false, "print the report as JSON")
	return cmd
}

func runVerify(ctx context.Context, logw io.Writer, cfg verifyConfig, rec *recorder) (verifyReport, error) {
	a, err := client.NewAdmin(cfg.servers)
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
	wctx, stop := context.WithTimeout(ctx, cfg.duration)
	defer stop()
	var wg sync.WaitGroup
	var conns []*client.Connection
	var connMu sync.Mutex
	dial := func(i int, policy client.ReconnectPolicy) (*client.Connection, error) {
		// Each starts on another node, so the load spreads.
		addrs := append(append([]string{}, cfg.servers[i%len(cfg.servers):]...), cfg.servers[:i%len(cfg.servers)]...)
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := client.Dial(dctx, addrs, client.Options{ReconnectPolicy: policy, ReconnectBlockingTime: 30 * time.Second})
		if err == nil {
			connMu.Lock()
			conns = append(conns, c)
			connMu.Unlock()
		}
		return c, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range cfg.producers {
		conn, err := dial(i, client.ReconnectProducer)
		if err != nil {
			return verifyReport{}, err
		}
		wg.Go(func() { produce(wctx, conn, cfg, h, rec, i) })
	}
	var sessions []*client.Session
	for i := range cfg.consumers {
		conn, err := dial(i, client.ReconnectAll)
		if err != nil {
			return verifyReport{}, err
		}
		mode := client.ClientAck
		if cfg.transactions {
			mode = client.Transacted
		}
		s, err := conn.Session(mode)
		if err != nil {
			return verifyReport{}, err
		}
		sessions = append(sessions, s)
		wg.Go(func() { consume(wctx, s, cfg, h, rec, i) })
	}
	wg.Wait()
	for _, s := range sessions {
		_ = s.Close() // what a consumer held returns, marked redelivered
	}
	fmt.Fprintf(logw, "cairn verify: workload done after %v; draining %s\n", time.Since(start).Round(time.Millisecond), cfg.queue)
	if err := drainVerify(ctx, cfg, len(q.Members), h, rec); err != nil {
		return verifyReport{}, err
	}
	return report(cfg, h), nil
}

// report is what the history h says of the run: its counts, and each kind
// of violation with up to ten examples.
func report(cfg verifyConfig, h *history.History) verifyReport {
	st := h.Stats()
	vs := h.Check()
	rep := verifyReport{Queue: cfg.queue, Duration: cfg.duration.String(), SentOK: st.SentOK, SendUnknown: st.SendUnknown, SendFailed: st.SendFailed,
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

// produce sends until ctx ends: one message at a time, or transactions of
// one to three.
func produce(ctx context.Context, conn *client.Connection, cfg verifyConfig, h *history.History, rec *recorder, i int) {
	mode := client.AutoAck
	if cfg.transactions {
		mode = client.Transacted
	}
	s, err := conn.Session(mode)
	if err != nil {
		return
	}
	p, err := s.Producer(cfg.queue)
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

// consume receives and acknowledges (or commits) until ctx ends.
func consume(ctx context.Context, s *client.Session, cfg verifyConfig, h *history.History, rec *recorder, i int) {
	k, err := s.Consumer(ctx, cfg.queue)
	if err != nil {
		return
	}
	phase := fmt.Sprintf("c%d", i)
	for n := 0; ctx.Err() == nil; n++ {
		tx := ""
		size := 1
		if cfg.transactions {
			tx = fmt.Sprintf("c%d-tx%d", i, n)
			size = 1 + rand.IntN(3)
		}
		var got []*history.Receipt
		for range size {
			m, err := k.ReceiveTimeout(200 * time.Millisecond)
			if m == nil {
				if errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrDestinationDeleted) {
					return
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

// drainVerify consumes every member of the queue until it holds nothing and
// nothing came for a while, recording each message in the drain phase.
func drainVerify(ctx context.Context, cfg verifyConfig, members int, h *history.History, rec *recorder) error {
	conn, err := client.Dial(ctx, cfg.servers, client.Options{ReconnectPolicy: client.ReconnectAll})
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
			k, err := s.Consumer(ctx, fmt.Sprintf("%s#%d", cfg.queue, i))
			if err == nil {
				ks = append(ks, k)
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("verify: consumer of %s#%d for the drain: %w", cfg.queue, i, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	a, err := client.NewAdmin(cfg.servers)
	if err != nil {
		return err
	}
	defer a.Close()
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
		q, err := a.ShowQueue(sctx, cfg.queue)
		cancel()
		if err == nil && q.Pending == 0 && q.Delivered == 0 && q.Prepared == 0 && q.Delayed == 0 {
			return nil
		}
		left, showErr = &q, err
	}
	switch {
	case left == nil:
		return fmt.Errorf("verify: queue %s: messages still came after draining for 2 minutes", cfg.queue)
	case showErr != nil:
		return fmt.Errorf("verify: draining queue %s for 2 minutes: asking what it holds failed: %w", cfg.queue, showErr)
	}
	return fmt.Errorf("verify: queue %s still held messages after draining for 2 minutes: %d pending, %d delivered and not acknowledged, %d prepared, %d delayed (cairn queue show %s tells which member)",
		cfg.queue, left.Pending, left.Delivered, left.Prepared, left.Delayed, cfg.queue)
}
