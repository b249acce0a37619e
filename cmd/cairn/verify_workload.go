package main

import (
	"context"
	"sync"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// workload is verify's producers and consumers: their connections,
// sessions and goroutines, which stop when --duration ends.
type workload struct {
	cfg  verifyConfig
	ctx  context.Context // ends with --duration
	stop context.CancelFunc
	wg   sync.WaitGroup

	dialed   int
	all      []*client.Connection
	sessions []*client.Session // the consumers'
}

func newWorkload(ctx context.Context, cfg verifyConfig) *workload {
	w := &workload{cfg: cfg}
	w.ctx, w.stop = context.WithTimeout(ctx, cfg.duration)
	return w
}

// dial opens the next connection, each starting on another node so that
// the load spreads.
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
	}
	return c, err
}

// startProducers starts --producers producers, each on its connection,
// recording their sends in h.
func (w *workload) startProducers(ctx context.Context, h sendLog, rec *recorder) error {
	for i := range w.cfg.producers {
		conn, err := w.dial(ctx, client.ReconnectProducer, "")
		if err != nil {
			return err
		}
		w.wg.Go(func() { produce(w.ctx, conn, w.cfg, h, rec, i) })
	}
	return nil
}

// startConsumer opens a connection (with clientID, if any), a session and
// the consumer open makes, before it returns, and has it consume until the
// workload ends, recording in h as phase.
func (w *workload) startConsumer(ctx context.Context, clientID string, open func(*client.Session) (*client.Consumer, error), h *history.History, rec *recorder, phase string) error {
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
	k, err := open(s)
	if err != nil {
		return err
	}
	w.sessions = append(w.sessions, s)
	w.wg.Go(func() { consume(w.ctx, s, k, open, w.cfg, h, rec, phase) })
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
