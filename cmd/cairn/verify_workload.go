package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// workload is verify's producers and consumers: their connections,
// sessions and goroutines, which stop when --duration ends, and what they
// observed.
type workload struct {
	cfg  verifyConfig
	rec  *recorder
	ctx  context.Context // ends with --duration
	stop context.CancelFunc
	wg   sync.WaitGroup

	dialed   int
	all      []*client.Connection
	sessions []*client.Session // the consumers'

	reconnects, errors atomic.Int64
}

// rollbackEvery: with --transactions, every rollbackEvery-th transaction
// of each producer and consumer is rolled back on purpose, so that every
// run checks what a rollback leaves (no send, every receive back).
const rollbackEvery = 5

func newWorkload(ctx context.Context, cfg verifyConfig, rec *recorder) *workload {
	w := &workload{cfg: cfg, rec: rec}
	w.ctx, w.stop = context.WithTimeout(ctx, cfg.duration)
	return w
}

// observed is what the workload's connections saw happen to them.
func (w *workload) observed() observed {
	return observed{reconnects: int(w.reconnects.Load()), errors: int(w.errors.Load())}
}

// outcome records an operation's outcome: an event, and a fault observed
// if it failed.
func (w *workload) outcome(e event, err error) {
	e.Outcome, e.Error = verifyOutcome(err)
	w.rec.log(e)
	if err != nil {
		w.errors.Add(1)
	}
}

// dial opens the next connection, each starting on another node so that
// the load spreads; its reconnects are counted and recorded.
func (w *workload) dial(ctx context.Context, policy client.ReconnectPolicy, clientID string) (*client.Connection, error) {
	servers := w.cfg.servers
	i := w.dialed % len(servers)
	w.dialed++
	addrs := append(append([]string{}, servers[i:]...), servers[:i]...)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	o := w.cfg.opts
	o.ReconnectPolicy, o.ReconnectBlockingTime, o.ClientID = policy, 30*time.Second, clientID
	c, err := client.Dial(dctx, addrs, o)
	if err == nil {
		w.all = append(w.all, c)
		c.SetExceptionListener(func(err error) {
			w.reconnects.Add(1)
			w.rec.log(event{Op: "reconnect", Error: err.Error()})
		})
	}
	return c, err
}

// startProducers starts --producers producers, each on its connection,
// recording their sends in h.
func (w *workload) startProducers(ctx context.Context, h sendLog) error {
	for i := range w.cfg.producers {
		conn, err := w.dial(ctx, client.ReconnectProducer, "")
		if err != nil {
			return err
		}
		w.wg.Go(func() { w.produce(conn, h, i) })
	}
	return nil
}

// startConsumer opens a connection (with clientID, if any), a session and
// the consumer open makes (two when pair: a session's consumers share its
// messages, each to one of them), before it returns, and has them consume
// until the workload ends, recording in h as phase.
func (w *workload) startConsumer(ctx context.Context, clientID string, open func(*client.Session) (*client.Consumer, error), h *history.History, phase string, pair bool) error {
	conn, err := w.dial(ctx, client.ReconnectAll, clientID)
	if err != nil {
		return err
	}
	mode := client.ClientAck
	if w.cfg.transactions {
		mode = client.Transacted
	}
	s, err := conn.Session(mode)
	if err != nil {
		return err
	}
	ks := make([]*client.Consumer, 1, 2)
	if ks[0], err = open(s); err != nil {
		return err
	}
	if pair {
		k, err := open(s)
		if err != nil {
			return err
		}
		ks = append(ks, k)
	}
	w.sessions = append(w.sessions, s)
	w.wg.Go(func() { w.consume(s, ks, open, h, phase) })
	return nil
}

// finish waits for the workload's end and closes the consumers' sessions:
// what they held returns, marked redelivered.
func (w *workload) finish() {
	w.wg.Wait()
	for _, s := range w.sessions {
		_ = s.Close()
	}
}

func (w *workload) close() {
	w.stop()
	for _, c := range w.all {
		_ = c.Close()
	}
}

// sendLog records sends: a queue's history, or every subscription's.
type sendLog interface {
	Sending(id string)
	Sent(id string, err error)
	SentInTx(txID, id string)
	Committed(txID string, err error)
}

// end ends transaction tx of session s: committed, or rolled back when it
// is one to roll back on purpose (n) or failed already (failed); it
// records the outcome in h.
func (w *workload) end(s *client.Session, h interface{ Committed(string, error) }, tx string, n int, failed error) {
	var err error
	switch {
	case failed != nil:
		err = errors.Join(fmt.Errorf("%w: %v", client.ErrTransactionRolledBack, failed), s.Rollback(context.Background()))
	case n%rollbackEvery == rollbackEvery-1:
		// A rollback that fails for a lost connection rolled back all
		// the same: nothing of the transaction was committed.
		_ = s.Rollback(context.Background())
		h.Committed(tx, fmt.Errorf("%w: rolled back on purpose", client.ErrTransactionRolledBack))
		w.rec.log(event{Op: "rollback", Tx: tx, Outcome: "rolled-back"})
		return
	default:
		err = s.Commit(context.Background())
	}
	h.Committed(tx, err)
	w.outcome(event{Op: "commit", Tx: tx}, err)
}

// produce sends (publishes, with --topics) until the workload ends: one
// message at a time, or transactions of one to three.
func (w *workload) produce(conn *client.Connection, h sendLog, i int) {
	cfg := w.cfg
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
	for n := 0; w.ctx.Err() == nil; n++ {
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
			w.outcome(event{Op: "send", ID: id, Tx: tx}, err)
			if tx == "" {
				h.Sent(id, err)
			} else if err != nil {
				sendErr = err
				break
			}
		}
		if tx != "" {
			w.end(s, h, tx, n, sendErr)
		}
	}
}

// consume receives with the session's consumers, by turns, and
// acknowledges (or commits) until the workload ends. A subscriber refused
// after a reconnect because its subscription still counts its consumer
// from before (ErrSubscriptionInUse) is made again with open a moment
// later, as an application would.
func (w *workload) consume(s *client.Session, ks []*client.Consumer, open func(*client.Session) (*client.Consumer, error), h *history.History, phase string) {
	ctx := w.ctx
	for n := 0; ctx.Err() == nil; n++ {
		tx := ""
		size := 1
		if w.cfg.transactions {
			tx = fmt.Sprintf("%s-tx%d", phase, n)
			size = 1 + rand.IntN(3)
		}
		for j := range size {
			i := (n + j) % len(ks)
			m, err := ks[i].ReceiveTimeout(200 * time.Millisecond)
			if m == nil {
				switch {
				case errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrDestinationDeleted):
					return
				case errors.Is(err, client.ErrSubscriptionInUse):
					_ = ks[i].Close()
					if ks[i] = reopen(ctx, s, open); ks[i] == nil {
						return
					}
				case err != nil:
					sleepCtx(ctx, 100*time.Millisecond) // a reconnect: no busy loop
				}
				break
			}
			w.rec.log(event{Op: "receive", ID: m.ID, Tx: tx, Phase: phase, Outcome: "ok", Redelivered: m.Redelivered, DeliveryCount: m.DeliveryCount})
			if tx != "" {
				h.ReceivedInTx(tx, phase, m)
				continue
			}
			r := h.Received(phase, m)
			err = m.Ack()
			h.Acked(r, err)
			w.outcome(event{Op: "ack", ID: m.ID, Phase: phase}, err)
		}
		if tx != "" {
			w.end(s, h, tx, n, nil)
		}
	}
}

// drain consumes every member of dest (a queue, or a subscription
// TOPIC::ID) until holds says it holds nothing and nothing came for a
// while, recording each message in the drain phase.
func (w *workload) drain(ctx context.Context, dest string, members int, h *history.History, holds func(context.Context) (client.QueueInfo, error)) error {
	o := w.cfg.opts
	o.ReconnectPolicy = client.ReconnectAll
	conn, err := client.Dial(ctx, w.cfg.servers, o)
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
		var ids []string
		for _, k := range ks {
			for range 256 {
				m, err := k.ReceiveNoWait()
				if err != nil || m == nil {
					break
				}
				batch = append(batch, h.Received(history.DrainPhase, m))
				ids = append(ids, m.ID)
				w.rec.log(event{Op: "receive", ID: m.ID, Phase: history.DrainPhase, Outcome: "ok", Redelivered: m.Redelivered, DeliveryCount: m.DeliveryCount})
			}
		}
		if len(batch) > 0 {
			lastGot = time.Now()
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.Acknowledge(actx)
			cancel()
			outcome, msg := verifyOutcome(err)
			for i, r := range batch {
				h.Acked(r, err)
				w.rec.log(event{Op: "ack", ID: ids[i], Phase: history.DrainPhase, Outcome: outcome, Error: msg})
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
