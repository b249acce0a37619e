package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
)

// ErrStopped is returned by a replica that has been closed: it took no
// command, which may be sent to the member's new host
// (destination.ErrNotSent).
var ErrStopped = destination.MarkNotSent(errors.New("member: replica stopped"))

// Replica is this node's replica of one member: its Raft group, the
// proposer that batches commands into entries, and, while it leads the
// group, the dispatcher that feeds consumers and the expiry loop.
type Replica struct {
	cfg Config
	log *slog.Logger
	// host runs the member's Raft group: its own, or one it shares with
	// other members (shared, not nil), in whose state machine key names it.
	host   *raftHost
	shared *Shared
	key    string

	notify  chan bool
	wake    chan struct{}
	leading atomic.Bool
	// ledCh is closed when the replica starts leading and replaced when it
	// stops, for WaitLeading.
	ledMu sync.Mutex
	ledCh chan struct{}
	// leaderGen counts leadership changes, so a stale takeover gives up.
	leaderGen atomic.Uint64
	// strandedSince is when the member's pending messages began to wait
	// with no consumer, for moveTick; ticking is set while a shared
	// group's tick runs the member's (Shared.tick).
	strandedSince time.Time
	ticking       atomic.Bool

	mu        sync.Mutex
	consumers map[string]*consumerState
	order     []string
	next      int
	// reserved are message ids in Deliver commands not yet applied.
	reserved map[string]struct{}
	// returning are delivery ids given back unseen and not yet applied: an
	// attachment made meanwhile must not push them again (GiveBack).
	returning map[uint64]struct{}
	// ahead counts the commands submitted and not yet applied that may
	// make pending messages the replica cannot name (a Recover, a
	// Release, ...): while there are any, a new Enqueue's messages wait
	// their turn (submitEnqueue).
	ahead int
	// undealt are the messages of the Enqueues submitted and not yet
	// applied that were not dealt as they were proposed, in the order
	// submitted: a later Enqueue deals them before its own.
	undealt []*undealt
	// submitMu keeps each decision to deliver messages next to its
	// proposal: dealt in one order, the Delivers are logged in it.
	submitMu sync.Mutex

	stop     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// Open starts the replica of a member in a Raft group of its own,
// bootstrapping the group on first use.
func Open(cfg Config) (*Replica, error) {
	r := newReplica(cfg)
	a := &memberFSM{m: fsm.NewMember(), applied: func([]string) { r.kick() }}
	h, err := openHost(r.cfg, a, r.notify)
	if err != nil {
		return nil, err
	}
	r.start(h)
	return r, nil
}

// newReplica fills cfg's defaults into a replica not started yet.
func newReplica(cfg Config) *Replica {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.ExpiryInterval <= 0 {
		cfg.ExpiryInterval = time.Second
	}
	if cfg.TxTimeout <= 0 {
		cfg.TxTimeout = DefaultTxTimeout
	}
	if cfg.OwnerLive == nil {
		cfg.OwnerLive = func(string) bool { return true }
	}
	if cfg.Settings == nil {
		cfg.Settings = fsm.DefaultSettings()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Replica{
		cfg:       cfg,
		log:       cfg.Logger.With("member", cfg.Name),
		notify:    make(chan bool, 16),
		wake:      make(chan struct{}, 1),
		consumers: make(map[string]*consumerState),
		reserved:  make(map[string]struct{}),
		returning: make(map[uint64]struct{}),
		stop:      make(chan struct{}),
		ledCh:     make(chan struct{}),
	}
}

// start runs the replica's loops on host.
func (r *Replica) start(h *raftHost) {
	r.host = h
	r.wg.Add(2)
	go r.watchLeadership()
	go r.dispatchLoop()
	if r.shared == nil {
		r.every(r.cfg.ExpiryInterval, r.expireTick)
		r.every(r.cfg.ExpiryInterval, r.moveTick)
	}
}

// every runs tick at each interval, on a goroutine of its own, until the
// replica stops.
func (r *Replica) every(interval time.Duration, tick func()) {
	runEvery(&r.wg, r.stop, interval, tick)
}

// Name is the member's address.
func (r *Replica) Name() string { return r.cfg.Name }

// Raft exposes the group for status and membership changes.
func (r *Replica) Raft() *raft.Raft { return r.host.group.Raft }

// Shared is the shared group the member is in; nil for a group of its own.
func (r *Replica) Shared() *Shared { return r.shared }

// Applied is the index of the last entry the group's state machine
// applied on this replica.
func (r *Replica) Applied() uint64 { return r.host.fsm.appliedIndex() }

// Leading reports whether this replica is the member's host: leader, caught
// up, and done with its takeover.
func (r *Replica) Leading() bool { return r.leading.Load() }

func (r *Replica) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Replica) now() time.Time { return r.cfg.Clock() }

func (r *Replica) watchLeadership() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		case isLeader := <-r.notify:
			if r.shared == nil {
				r.host.refreshSnapshotPace()
			}
			r.ledMu.Lock()
			gen := r.leaderGen.Add(1)
			r.ledMu.Unlock()
			if !isLeader {
				r.setLeading(false, 0)
				continue
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.takeOver(gen)
			}()
		}
	}
}

// takeOver readies a new leader: it waits until every committed entry is
// applied, proposes the wanted settings, releases the sessions of dead
// front-ends, and only then starts dispatching.
func (r *Replica) takeOver(gen uint64) {
	for attempt := 0; r.leaderGen.Load() == gen; attempt++ {
		err := r.prepareLeadership()
		if err == nil {
			break
		}
		if errors.Is(err, ErrStopped) {
			return
		}
		r.log.Warn("member takeover failed; retrying", "err", err, "attempt", attempt)
		select {
		case <-r.stop:
			return
		case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second)):
		}
	}
	if r.host.group.Raft.State() != raft.Leader || !r.setLeading(true, gen) {
		return
	}
	r.log.Debug("member host ready")
	r.kick()
}

// setLeading records whether this replica hosts the member. Gaining it
// (gen > 0) only counts if no leadership change came since the takeover
// began; the check and the change are one step under ledMu, which also
// guards the generation's increments.
func (r *Replica) setLeading(leading bool, gen uint64) bool {
	r.ledMu.Lock()
	if leading && r.leaderGen.Load() != gen {
		r.ledMu.Unlock()
		return false
	}
	changed := r.leading.Swap(leading) != leading
	if changed {
		if leading {
			close(r.ledCh)
		} else {
			r.ledCh = make(chan struct{})
		}
	}
	r.ledMu.Unlock()
	if changed && !leading {
		r.dropConsumers()
	}
	if changed && r.cfg.OnLeaderChange != nil {
		r.cfg.OnLeaderChange(leading)
	}
	return true
}

// WaitLeading waits until this replica hosts the member, or ctx ends.
func (r *Replica) WaitLeading(ctx context.Context) error {
	for {
		r.ledMu.Lock()
		ch, leading := r.ledCh, r.leading.Load()
		r.ledMu.Unlock()
		if leading {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stop:
			return ErrStopped
		}
	}
}

func (r *Replica) prepareLeadership() error {
	if r.shared != nil {
		if err := r.shared.barrier(r.stop); err != nil {
			return err
		}
	} else if err := barrier(r.host.group.Raft, r.stop); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !r.host.fsm.holds(r.key) {
		// A shared group's new member: its first host adds it.
		if err := r.propose(ctx, &fsmpb.AddMember{}); err != nil {
			return fmt.Errorf("add to its group: %w", err)
		}
	}
	var current *fsmpb.MemberSettings
	var next uint64
	r.host.fsm.read(r.key, func(m *fsm.Member) { current, next = m.Settings(), m.NextDeliveryID() })
	if !proto.Equal(current, r.cfg.Settings) || next < r.cfg.FirstDeliveryID {
		if err := r.propose(ctx, &fsmpb.Configure{Settings: r.cfg.Settings, FirstDeliveryId: r.cfg.FirstDeliveryID}); err != nil {
			return fmt.Errorf("configure: %w", err)
		}
	}
	return r.SweepSessions(ctx)
}

// barrier waits until every entry committed before it is applied, or stop
// is closed. A barrier still queued when Raft shuts down is never answered
// (hashicorp/raft#498), so it waits for the barrier or for the stop,
// whichever first; in the second case the waiting goroutine ends with the
// process.
func barrier(rf *raft.Raft, stop <-chan struct{}) error {
	done := make(chan error, 1)
	go func() { done <- rf.Barrier(10 * time.Second).Error() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		return nil
	case <-stop:
		return ErrStopped
	}
}

// Submit proposes one command without waiting. done is called once with its
// result (a rejection is in Result.Err), in the order of submission, on the
// proposer's goroutine: it must not block. Commands submitted by one caller
// apply in the order submitted. A command that fails before it is queued
// (it does not encode, or the replica is closing) gets its done on the
// caller's goroutine, inside Submit: done must not call Submit itself.
//
// Commands that need the time are stamped here with the leader's: an
// Enqueue or a Publish for the dedup window and the messages' arrival; a Recover,
// Release or Return for the redelivery delay.
func (r *Replica) Submit(body proto.Message, done func(fsm.Result, error)) {
	select {
	case <-r.stop:
		// A shared group's proposer outlives its members' replicas.
		done(fsm.Result{}, ErrStopped)
		return
	default:
	}
	now := r.now().UnixNano()
	done = r.timedSend(body, done)
	switch c := body.(type) {
	case *fsmpb.Enqueue:
		c.Now = now
		for _, m := range c.Messages {
			if m.EnqueuedAt == 0 {
				m.EnqueuedAt = now
			}
		}
		r.submitEnqueue(c, done)
		return
	case *fsmpb.Publish:
		c.Now = now
		for _, m := range c.Messages {
			if m.EnqueuedAt == 0 {
				m.EnqueuedAt = now
			}
		}
	case *fsmpb.Recover:
		c.Now = now
	case *fsmpb.Release:
		c.Now = now
	case *fsmpb.Return:
		c.Now = now
	}
	if !addsPending(body) {
		r.host.prop.submit(command{member: r.key, body: body, done: r.tracked(false, done)})
		return
	}
	// Counted and queued under submitMu, so a send dealt meanwhile cannot
	// overtake it in the log without seeing it.
	r.submitMu.Lock()
	defer r.submitMu.Unlock()
	r.host.prop.submit(command{member: r.key, body: body, done: r.tracked(true, done)})
}

// tracked wraps a submitted command's done to kick the dispatcher after the
// result; a counted command counts in ahead until then.
func (r *Replica) tracked(counted bool, done func(fsm.Result, error)) func(fsm.Result, error) {
	if counted {
		r.mu.Lock()
		r.ahead++
		r.mu.Unlock()
	}
	return func(res fsm.Result, err error) {
		if counted {
			r.mu.Lock()
			r.ahead--
			r.mu.Unlock()
		}
		done(res, err)
		r.kick()
	}
}

// propose runs one command and returns its rejection, if any, as the error.
func (r *Replica) propose(ctx context.Context, body proto.Message) error {
	_, err := r.proposeResult(ctx, body)
	return err
}

func (r *Replica) proposeResult(ctx context.Context, body proto.Message) (fsm.Result, error) {
	type outcome struct {
		r   fsm.Result
		err error
	}
	ch := make(chan outcome, 1)
	r.Submit(body, func(res fsm.Result, err error) { ch <- outcome{res, err} })
	select {
	case o := <-ch:
		if o.err != nil {
			return o.r, o.err
		}
		return o.r, o.r.Err
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	}
}

// Enqueue stores messages; it returns once they are committed. The leader
// decides the time that ages the dedup window and stamps the messages.
func (r *Replica) Enqueue(ctx context.Context, msgs []*fsmpb.Message) ([]fsm.Enqueued, error) {
	res, err := r.proposeResult(ctx, &fsmpb.Enqueue{Messages: msgs})
	return res.Enqueued, err
}

// OpenSession registers a session owned by owner before consumers of it attach.
func (r *Replica) OpenSession(ctx context.Context, session, owner string) error {
	var open bool
	r.host.fsm.read(r.key, func(m *fsm.Member) { open = m.HasSession(session) })
	if open {
		return nil
	}
	return r.propose(ctx, &fsmpb.OpenSession{Session: session, Owner: owner})
}

// Ack acknowledges deliveries of a session; rejected lists those the session
// no longer held.
func (r *Replica) Ack(ctx context.Context, session string, deliveryIDs []uint64) (acked int, rejected []uint64, err error) {
	res, err := r.proposeResult(ctx, &fsmpb.Ack{Session: session, DeliveryIds: deliveryIDs})
	return res.Acked, res.Rejected, err
}

// Release ends a session on this member.
func (r *Replica) Release(ctx context.Context, session string) error {
	err := r.propose(ctx, &fsmpb.Release{Session: session})
	r.kick()
	return err
}

// GiveBack takes back, in the background, deliveries of a session that
// never reached its consumer, as if they had not been made
// (fsmpb.Return.unseen). A consumer of the session that attached again
// meanwhile was pushed the session's deliveries it found applied: those
// are the session's now, not given back. One attaching until the return
// is applied is not pushed them: it would hold them while they are pending
// again. Both are decided under r.mu, so each delivery goes one way.
func (r *Replica) GiveBack(session string, deliveryIDs []uint64) {
	r.mu.Lock()
	for _, c := range r.consumers {
		if c.Session == session {
			deliveryIDs = slices.DeleteFunc(deliveryIDs, func(id uint64) bool { return id <= c.attachPushed })
		}
	}
	for _, id := range deliveryIDs {
		r.returning[id] = struct{}{}
	}
	r.mu.Unlock()
	if len(deliveryIDs) == 0 {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := r.propose(ctx, &fsmpb.Return{Session: session, DeliveryIds: deliveryIDs, Unseen: true})
		r.mu.Lock()
		for _, id := range deliveryIDs {
			delete(r.returning, id)
		}
		r.mu.Unlock()
		if err != nil {
			r.log.Debug("giving back deliveries that never reached their consumer", "session", session, "err", err)
		}
		r.kick()
	}()
}

// Purge removes every pending message.
func (r *Replica) Purge(ctx context.Context) (int, error) {
	res, err := r.proposeResult(ctx, &fsmpb.Purge{})
	return res.Removed, err
}

// Browse returns up to limit of the member's pending messages that sel
// selects (nil: every one), in delivery order, with their bodies, as this
// replica has applied them. It changes nothing.
func (r *Replica) Browse(sel *selector.Selector, limit int) ([]fsm.MessageState, error) {
	return r.host.fsm.browse(r.key, r.now().UnixNano(), sel, limit)
}

// Close stops the replica; its data stays for the next start.
func (r *Replica) Close() error {
	return r.shutdown(false)
}

// Destroy stops the replica and deletes its data.
func (r *Replica) Destroy() error {
	return r.shutdown(true)
}

func (r *Replica) shutdown(destroy bool) error {
	var err error
	r.stopOnce.Do(func() {
		close(r.stop)
		r.setLeading(false, 0)
		if r.shared != nil {
			r.wg.Wait()
			err = r.shared.leave(r, destroy)
			return
		}
		err = r.host.close(destroy)
		r.wg.Wait()
		r.host.fsm.closeBodies()
	})
	return err
}
