// Package bench is the workload behind `cairn bench`: producers and
// consumers on one queue of any cluster, or publishers and the subscribers
// of a topic's subscriptions, measured with HDR histograms, and checked at
// the end. Every message carries its producer, its sequence
// number and its send time in the first 20 bytes of its body, so the run
// knows which messages were sent, which came, and how long each took from
// send to receipt; a run that lost a message, or consumed one twice, says
// so in its result, and a benchmark that loses messages has no result.
package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/cairnmq/cairn/client"
)

// Send modes.
const (
	// Sync sends one message at a time per producer: each waits for the
	// quorum's store before the next leaves.
	Sync = "sync"
	// Async keeps a window of unconfirmed sends per producer in flight.
	Async = "async"
)

// Acknowledge modes of the consumers.
const (
	AckAuto   = "auto"
	AckClient = "client" // Message.Ack on every message, waited for
	AckDupsOK = "dups-ok"
)

// HeaderBytes is the part of each body the run uses for its bookkeeping
// (send time, producer, sequence); the rest is filler.
const HeaderBytes = 20

// ErrConfig is wrapped by every refusal of a configuration.
var ErrConfig = errors.New("bench: invalid configuration")

// Config is one run.
type Config struct {
	Servers []string
	// Base is what every connection starts from: how it reaches the nodes
	// and proves itself to them (TLS, User, Password).
	Base client.Options
	// Dest is the queue; empty: a fresh queue, deleted at the end. A named
	// queue is created when it does not exist, and kept.
	Dest string
	// Members of a queue the run creates (0: the server's default, one per
	// node).
	Members   int
	Producers int
	Consumers int
	// Size of each message body in bytes (at least HeaderBytes).
	Size int
	// Count is how many messages in all; 0: as many as fit in Duration.
	Count    int
	Duration time.Duration
	Mode     string
	// Window is the number of unconfirmed sends per producer (Async).
	Window int
	Ack    string
	// Transacted, when positive, sends and consumes in transactions of
	// that many messages.
	Transacted int
	// Rate is the offered load in messages per second over all producers;
	// 0: as fast as they go. Send latency is measured from each message's
	// scheduled time, so a stalled send counts against every message it
	// held back (no coordinated omission).
	Rate int
	// Prefetch per consumer (0: the client's default).
	Prefetch int
	// NoDirectSends sends through each connection's node only, never
	// straight to the member's host (client.Options.NoDirectSends).
	NoDirectSends bool
	// ConsumersOnHost connects each consumer to its member's host
	// (client.Options.PreferHostOf) rather than to the next node in turn.
	ConsumersOnHost bool
	// ConsumeAfter starts the consumers only when every send is done, so
	// the consume rate is that of a backlog, not bounded by the producers.
	ConsumeAfter bool
	// Topic runs against a topic (Dest, or a fresh one): the producers
	// publish, and each of Subscriptions durable shared subscriptions,
	// made by the run and deleted at its end, is to receive every message;
	// the Consumers are dealt over the subscriptions in turn.
	Topic         bool
	Subscriptions int
	// DrainTimeout is how long consumers wait for the next message once the
	// producers are done, before the missing ones count as lost (default
	// 30 s).
	DrainTimeout time.Duration
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Result is one run's figures: the JSON of `cairn bench --json`.
type Result struct {
	Dest       string `json:"dest"`
	Members    int    `json:"members"`
	Producers  int    `json:"producers"`
	Consumers  int    `json:"consumers"`
	Size       int    `json:"size"`
	Mode       string `json:"mode"`
	Window     int    `json:"window,omitempty"`
	Ack        string `json:"ack"`
	Transacted int    `json:"transacted,omitempty"`
	Rate       int    `json:"rate,omitempty"`
	// ConsumeAfter: consumers started after the sends, on a backlog.
	ConsumeAfter bool `json:"consume_after,omitempty"`
	// NoDirectSends: every send went through its connection's node.
	NoDirectSends bool `json:"no_direct_sends,omitempty"`
	// ConsumersOnHost: each consumer connected to its member's host.
	ConsumersOnHost bool `json:"consumers_on_host,omitempty"`
	// Topic: Dest is a topic; Consumed counts every subscription's
	// receipts, so a message reaching four subscriptions counts four times.
	Topic         bool    `json:"topic,omitempty"`
	Subscriptions int     `json:"subscriptions,omitempty"`
	SendRate      float64 `json:"send_rate"`
	ConsumeRate   float64 `json:"consume_rate"`
	SendMiBs      float64 `json:"send_mib_s"`
	ConsumeMiBs   float64 `json:"consume_mib_s"`
	SendLatency   Latency `json:"send_latency_ms"`
	E2ELatency    Latency `json:"e2e_latency_ms"`
	Sent          int64   `json:"sent"`
	Consumed      int64   `json:"consumed"`
	Lost          int64   `json:"lost"`
	Duplicates    int64   `json:"duplicates"`
	// SendErrors are sends that failed or whose outcome is unknown; their
	// messages are not counted as sent, nor as lost or unexpected.
	SendErrors int64 `json:"send_errors"`
	// Unexpected are messages consumed that no successful send produced
	// (nor one with an unknown outcome).
	Unexpected  int64   `json:"unexpected"`
	SendSeconds float64 `json:"send_seconds"`
	// ConsumeSeconds runs from the first message counted consumed (its
	// acknowledgement or commit returned ok) to the last.
	ConsumeSeconds float64 `json:"consume_seconds"`
}

// OK says whether the run lost, duplicated or invented nothing.
func (r Result) OK() bool { return r.Lost == 0 && r.Duplicates == 0 && r.Unexpected == 0 }

// Progress is what a run reports while it goes.
type Progress struct {
	Sent, Consumed int64
	Elapsed        time.Duration
	// Fraction done, 0 to 1: sent of Count, or elapsed of Duration, then
	// consumed of sent while draining.
	Fraction float64
	Draining bool
}

func (c *Config) check() error {
	switch {
	case c.Producers < 1:
		return fmt.Errorf("%w: --producers must be at least 1", ErrConfig)
	case c.Consumers < 0:
		return fmt.Errorf("%w: --consumers must not be negative", ErrConfig)
	case c.Size < HeaderBytes:
		return fmt.Errorf("%w: --size %d: each message carries its send time, producer and sequence in its first %d bytes; use --size %d or more", ErrConfig, c.Size, HeaderBytes, HeaderBytes)
	case c.Count < 0 || (c.Count == 0 && c.Duration <= 0):
		return fmt.Errorf("%w: give --count (messages in all) or a positive --duration", ErrConfig)
	case c.Mode != Sync && c.Mode != Async:
		return fmt.Errorf("%w: --mode %q: use sync or async", ErrConfig, c.Mode)
	case c.Mode == Async && c.Window < 1:
		return fmt.Errorf("%w: --window must be at least 1", ErrConfig)
	case c.Ack != AckAuto && c.Ack != AckClient && c.Ack != AckDupsOK:
		return fmt.Errorf("%w: --ack %q: use auto, client or dups-ok", ErrConfig, c.Ack)
	case c.Transacted < 0:
		return fmt.Errorf("%w: --transacted must not be negative", ErrConfig)
	case c.Transacted > 0 && c.Mode == Async:
		return fmt.Errorf("%w: --transacted sends wait for their commit; use --mode sync", ErrConfig)
	case c.Rate < 0:
		return fmt.Errorf("%w: --rate must not be negative", ErrConfig)
	case c.Members < 0:
		return fmt.Errorf("%w: --members must not be negative", ErrConfig)
	case c.Subscriptions < 0:
		return fmt.Errorf("%w: --subscriptions must not be negative", ErrConfig)
	case c.Subscriptions > 0 && !c.Topic:
		return fmt.Errorf("%w: --subscriptions %d needs --topic: a queue has no subscriptions", ErrConfig, c.Subscriptions)
	case c.Topic && c.Subscriptions == 0:
		return fmt.Errorf("%w: --topic needs --subscriptions N (1 or more): a topic keeps nothing that no subscription takes", ErrConfig)
	case c.Topic && c.Consumers > 0 && c.Consumers < c.Subscriptions:
		return fmt.Errorf("%w: each of the %d subscriptions needs a consumer; use --consumers %d or more", ErrConfig, c.Subscriptions, c.Subscriptions)
	case !c.Topic && c.Consumers > 0 && c.Consumers < c.Members:
		return errTooFewConsumers(c.Members)
	}
	if c.Window < 1 {
		c.Window = 1
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	return nil
}

// run is the state of one run.
type run struct {
	cfg  Config
	dest target
	// members of a queue: what consumer i consumes is members[i%len].
	members []string
	t       trackers
	// histograms in microseconds, one per worker, merged at the end.
	histMu   sync.Mutex
	sendHist *hdrhistogram.Histogram
	e2eHist  *hdrhistogram.Histogram

	sent, consumed, sendErrors atomic.Int64
	firstRecv, lastRecv        atomic.Int64 // unix nanos
	producersDone              chan struct{}
	stopConsumers              chan struct{}
}

func newHist() *hdrhistogram.Histogram {
	// 1 µs to 10 minutes, 3 significant digits.
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

// Run runs the benchmark. progress, when not nil, is called about four
// times a second from one goroutine.
func Run(ctx context.Context, cfg Config, progress func(Progress)) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	a, err := client.NewAdmin(cfg.Servers, cfg.Base)
	if err != nil {
		return Result{}, err
	}
	defer a.Close()
	tg, err := prepare(ctx, a, cfg)
	if err != nil {
		return Result{}, err
	}
	members := tg.members
	tooFew := !tg.topic && cfg.Consumers > 0 && cfg.Consumers < members
	defer tg.remove(a, cfg.Dest != "" && !(tg.created && tooFew))
	if tooFew {
		return Result{}, errTooFewConsumers(members)
	}
	r := &run{cfg: cfg, dest: tg, t: newTrackers(cfg.Subscriptions, cfg.Producers), sendHist: newHist(), e2eHist: newHist(),
		producersDone: make(chan struct{}), stopConsumers: make(chan struct{})}
	if members <= 1 || cfg.Consumers == 0 {
		r.members = []string{tg.name}
	} else {
		for i := range members {
			r.members = append(r.members, fmt.Sprintf("%s#%d", tg.name, i))
		}
	}
	d := &dialer{cfg: cfg}
	defer d.close()
	if tg.topic {
		if err := r.subscribe(ctx, d, tg); err != nil {
			return Result{}, err
		}
	}

	// Unless they are to meet a backlog, consumers attach before the first
	// send, so end-to-end latency is not a queue's backlog.
	var cwg sync.WaitGroup
	startConsumers := func() error { return r.startConsumers(ctx, d, &cwg) }
	if !cfg.ConsumeAfter {
		if err := startConsumers(); err != nil {
			return Result{}, err
		}
	}
	psessions, producers, err := openProducers(ctx, d, tg)
	if err != nil {
		return Result{}, err
	}

	start := time.Now()
	var pwg sync.WaitGroup
	var sendEnd atomic.Int64
	for i, p := range producers {
		pwg.Go(func() { r.produce(ctx, i, psessions[i], p, start) })
	}
	go func() {
		pwg.Wait()
		sendEnd.Store(time.Now().UnixNano())
		close(r.producersDone)
	}()
	onSent := func() error { return nil }
	if cfg.ConsumeAfter {
		onSent = startConsumers
	}
	if err := r.watch(ctx, start, progress, onSent); err != nil {
		return Result{}, err
	}
	close(r.stopConsumers)
	cwg.Wait()
	d.closeSessions()
	res := r.result(tg.name, members, time.Duration(sendEnd.Load()-start.UnixNano()))
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// dialer opens a run's connections, each starting on another node, and
// closes them, with the consumers' sessions, at the end.
type dialer struct {
	cfg      Config
	conns    []*client.Connection
	sessions []*client.Session // the consumers'
}

// dial connects connection i; preferHost, when set, names the destination
// whose host it connects to instead.
func (d *dialer) dial(ctx context.Context, i int, preferHost string) (*client.Connection, error) {
	n := len(d.cfg.Servers)
	addrs := append(append([]string{}, d.cfg.Servers[i%n:]...), d.cfg.Servers[:i%n]...)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	o := d.cfg.Base
	o.Prefetch, o.ReconnectPolicy, o.NoDirectSends, o.PreferHostOf = d.cfg.Prefetch, client.ReconnectAll, d.cfg.NoDirectSends, preferHost
	c, err := client.Dial(dctx, addrs, o)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *dialer) closeSessions() {
	for _, s := range d.sessions {
		_ = s.Close()
	}
}

func (d *dialer) close() {
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// startConsumers attaches the run's consumers (attach says to what), each
// consuming on a goroutine of wg.
func (r *run) startConsumers(ctx context.Context, d *dialer, wg *sync.WaitGroup) error {
	for i := range r.cfg.Consumers {
		preferHost := ""
		if r.cfg.ConsumersOnHost {
			preferHost = r.members[i%len(r.members)]
		}
		conn, err := d.dial(ctx, i, preferHost)
		if err != nil {
			return err
		}
		s, err := conn.Session(consumerMode(r.cfg))
		if err != nil {
			return err
		}
		k, t, err := r.attach(ctx, s, i)
		if err != nil {
			return err
		}
		d.sessions = append(d.sessions, s)
		wg.Go(func() { r.consume(ctx, s, k, t) })
	}
	return nil
}

// openProducers opens the run's producers (publishers of a topic), each on
// a connection and session of its own.
func openProducers(ctx context.Context, d *dialer, tg target) ([]*client.Session, []*client.Producer, error) {
	var sessions []*client.Session
	var producers []*client.Producer
	for i := range d.cfg.Producers {
		conn, err := d.dial(ctx, i, "")
		if err != nil {
			return nil, nil, err
		}
		mode := client.AutoAck
		if d.cfg.Transacted > 0 {
			mode = client.Transacted
		}
		s, err := conn.Session(mode)
		if err != nil {
			return nil, nil, err
		}
		p, err := s.Producer(tg.name)
		if tg.topic {
			p, err = s.Publisher(tg.name)
		}
		if err != nil {
			return nil, nil, err
		}
		sessions = append(sessions, s)
		producers = append(producers, p)
	}
	return sessions, producers, nil
}

// result is what the run measured, its producers having sent for sending.
func (r *run) result(queue string, members int, sending time.Duration) Result {
	cfg := r.cfg
	res := Result{Dest: queue, Members: members, Producers: cfg.Producers, Consumers: cfg.Consumers, Size: cfg.Size,
		Mode: cfg.Mode, Ack: cfg.Ack, Transacted: cfg.Transacted, Rate: cfg.Rate, ConsumeAfter: cfg.ConsumeAfter, NoDirectSends: cfg.NoDirectSends, ConsumersOnHost: cfg.ConsumersOnHost,
		Topic: cfg.Topic, Subscriptions: cfg.Subscriptions,
		Sent: r.sent.Load(), Consumed: r.consumed.Load(), SendErrors: r.sendErrors.Load()}
	if cfg.Mode == Async {
		res.Window = cfg.Window
	}
	res.SendSeconds = sending.Seconds()
	if res.SendSeconds > 0 {
		res.SendRate = float64(res.Sent) / res.SendSeconds
	}
	if f, l := r.firstRecv.Load(), r.lastRecv.Load(); f > 0 && l > f {
		res.ConsumeSeconds = time.Duration(l - f).Seconds()
		res.ConsumeRate = float64(res.Consumed) / res.ConsumeSeconds
	}
	res.SendMiBs = res.SendRate * float64(cfg.Size) / (1 << 20)
	res.ConsumeMiBs = res.ConsumeRate * float64(cfg.Size) / (1 << 20)
	res.SendLatency = latency(r.sendHist)
	res.E2ELatency = latency(r.e2eHist)
	if cfg.Consumers > 0 {
		res.Lost, res.Duplicates, res.Unexpected = r.t.verdict()
	}
	return res
}

// errTooFewConsumers refuses a run that would leave members unconsumed:
// each consumer takes one member, so that no message waits for the
// forwarding of a member without consumers.
func errTooFewConsumers(members int) error {
	return fmt.Errorf("%w: the queue has %d members and each needs a consumer; use --consumers %d or more, or --members 1", ErrConfig, members, members)
}

// prepareQueue creates the run's queue, or finds the named one.
func prepareQueue(ctx context.Context, a *client.Admin, name string, members int) (client.QueueInfo, bool, error) {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if name == "" {
		name = "bench-" + client.NewMessageID()[3:11]
	} else if q, err := a.ShowQueue(actx, name); err == nil {
		return q, false, nil
	} else if !errors.Is(err, client.ErrUnknownDestination) {
		return client.QueueInfo{}, false, err
	}
	q, err := a.CreateQueue(actx, name, client.QueueOptions{Members: members})
	if err != nil {
		return client.QueueInfo{}, false, fmt.Errorf("creating queue %s: %w", name, err)
	}
	return q, true, nil
}

func consumerMode(cfg Config) client.AckMode {
	switch {
	case cfg.Transacted > 0:
		return client.Transacted
	case cfg.Ack == AckClient:
		return client.ClientAck
	case cfg.Ack == AckDupsOK:
		return client.DupsOK
	}
	return client.AutoAck
}

func latency(h *hdrhistogram.Histogram) Latency {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max())}
}

// watch reports progress until the producers are done (then it calls
// onSent) and then the consumers have everything (or nothing came for
// DrainTimeout).
func (r *run) watch(ctx context.Context, start time.Time, progress func(Progress), onSent func() error) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	draining := false
	lastConsumed, lastChange := int64(-1), time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.producersDone:
			draining = true
			r.producersDone = nil // fired once
			if err := onSent(); err != nil {
				return err
			}
			lastChange = time.Now()
		case <-tick.C:
		}
		sent, consumed := r.sent.Load(), r.consumed.Load()
		p := Progress{Sent: sent, Consumed: consumed, Elapsed: time.Since(start), Draining: draining}
		switch {
		case draining && sent > 0:
			p.Fraction = float64(consumed) / float64(sent)
		case r.cfg.Count > 0:
			p.Fraction = float64(sent) / float64(r.cfg.Count)
		default:
			p.Fraction = float64(p.Elapsed) / float64(r.cfg.Duration)
		}
		if progress != nil {
			progress(p)
		}
		if !draining {
			continue
		}
		if r.cfg.Consumers == 0 || r.t.allConsumed() {
			return nil
		}
		if consumed != lastConsumed {
			lastConsumed, lastChange = consumed, time.Now()
		} else if time.Since(lastChange) > r.cfg.DrainTimeout {
			return nil
		}
	}
}
