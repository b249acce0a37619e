package raftgroup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// Timing holds the Raft timeouts of a group. The defaults suit a LAN; tests
// shorten them.
type Timing struct {
	Heartbeat   time.Duration
	Election    time.Duration
	LeaderLease time.Duration
	Commit      time.Duration
}

// DefaultTiming is hashicorp/raft's LAN timing, halved: a member's clients
// wait out an election, so it should be short, and three nodes on one LAN
// answer heartbeats well inside 500 ms. Commit is how long a leader with
// nothing new to send waits before telling its followers the commit
// index again: every group's leader sends each follower an append at
// that pace, idle or not, so it is 100 ms (hashicorp/raft: 50 ms)
// (member/DESIGN.md, "Members share Raft groups").
var DefaultTiming = Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond, LeaderLease: 250 * time.Millisecond, Commit: 100 * time.Millisecond}

// TestTiming is for tests whose replicas share one machine: a leader is
// elected within a few hundred milliseconds and commits are told at once.
var TestTiming = Timing{Heartbeat: 100 * time.Millisecond, Election: 100 * time.Millisecond, LeaderLease: 50 * time.Millisecond, Commit: 5 * time.Millisecond}

// Snapshot defaults. hashicorp/raft checks the threshold only every
// SnapshotInterval (its default is 120 s), so a busy member would grow its
// log for minutes past the threshold; 5 s keeps the log near the threshold
// at the cost of a cheap index comparison. A snapshot leaves 1024 entries,
// enough for a follower a few seconds behind at full speed (each entry
// carries many messages) to catch up from the log.
const (
	DefaultSnapshotInterval = 5 * time.Second
	DefaultTrailingLogs     = 1024
)

// Config says how to open one Raft group on this node.
type Config struct {
	// Group names the group in logs and on the shared Raft port.
	Group  string
	NodeID string
	// Dir holds the group's log, stable store and snapshots.
	Dir    string
	Stream raft.StreamLayer
	// Peers is the group's first configuration, used only when Dir holds
	// no state yet (every replica bootstraps with the same one).
	Peers  []raft.Server
	Timing Timing
	// NotifyCommit has the leader tell its followers of each commit at
	// once instead of with the next entry or Timing.Commit later (patched
	// hashicorp/raft, third_party/hashicorp-raft/CAIRN.md): for a group
	// whose followers act on what it commits.
	NotifyCommit bool
	// SnapshotThreshold is how many entries since the last snapshot trigger
	// a new one.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// TrailingLogs is how many entries a snapshot leaves in the log, so a
	// briefly lagging follower catches up without a snapshot transfer.
	TrailingLogs uint64
	Logger       *slog.Logger
	// NotifyCh receives true on gaining and false on losing leadership.
	NotifyCh chan<- bool
	// Addresses, if set, finds a server's current Raft address by its id,
	// so a node that comes back at another address is still reached.
	Addresses raft.ServerAddressProvider
	// LogStore is LogStoreBolt (the default when empty) or LogStoreWAL.
	LogStore string
	// SnapshotSends paces the snapshots the group sends to followers
	// (shared by every group of the node); nil paces nothing.
	SnapshotSends *SnapshotSends
	// OnStorageError is called when the log or stable store fails a write
	// (an fsync error): the replica can no longer promise durability and the
	// node must stop. By default it panics.
	OnStorageError func(error)
	// ObserveLogWrite, if set, is told how long each write of entries to
	// the log took, fsync included.
	ObserveLogWrite func(time.Duration)
	// CheckRPC, if set, sees each RPC a connection of the group's Raft
	// port carries before Raft does, with the group's latest
	// configuration; an error drops the connection unanswered (patched
	// hashicorp/raft, third_party/hashicorp-raft/CAIRN.md).
	CheckRPC func(conn net.Conn, command any, latest raft.Configuration) error
}

// Group is an open Raft group and the stores it owns.
type Group struct {
	Raft *raft.Raft
	// startIndex is the last log index on disk when the group opened: what
	// this replica knew before it (re)started.
	startIndex uint64
	logs       raft.LogStore
	store      durableStore
	guard      *storageGuard
	transport  *groupTransport
	dir        string
}

// boltOptions tune the log's bbolt file for a log: a Raft log is appended
// at the end and cut at the front, so the free list is long and changes on
// every write. Writing it on every commit cost more than the entry itself;
// without it, opening rebuilds the list by walking the file once
// (raftgroup/DESIGN.md has the measurements).
func boltOptions() *bbolt.Options {
	return &bbolt.Options{
		Timeout:        time.Second,
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	}
}

// Log stores a group can keep its log and stable store in.
const (
	// LogStoreBolt is raft-boltdb: one bbolt file, two fsyncs per write.
	LogStoreBolt = "bolt"
	// LogStoreWAL is hashicorp/raft-wal: segment files, one fsync per write.
	LogStoreWAL = "wal"
)

// ErrLogStore is wrapped when a group's log store cannot be used as asked:
// an unknown kind, or a directory written by the other kind.
var ErrLogStore = errors.New("log store")

// ErrDamaged is wrapped when a group's data on disk cannot be read back:
// its log store does not open, or hashicorp/raft fails (or panics) reading
// its log or snapshots at the start. A failure of the machine (permissions,
// open files, space, memory, a disk error) or a store another process
// holds is not damage: the same data may open later.
var ErrDamaged = errors.New("the group's data on disk cannot be read")

// damaged wraps err in ErrDamaged unless it is a failure of the machine.
func damaged(err error) error {
	for _, e := range []error{bbolt.ErrTimeout, fs.ErrPermission, syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC, syscall.ENOMEM, syscall.EIO} {
		if errors.Is(err, e) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrDamaged, err)
}

// newRaft is raft.NewRaft, whose panics on a log it cannot read (an entry
// missing, a configuration that does not decode) become errors: it starts
// no goroutine before it has read the log.
func newRaft(conf *raft.Config, f raft.FSM, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("reading the log at the start: %v", p)
		}
	}()
	return raft.NewRaft(conf, f, logs, stable, snaps, trans)
}

// durableStore is a group's log and stable store, fsynced on every write.
type durableStore interface {
	raft.LogStore
	raft.StableStore
	Close() error
}

// HeldStore is the kind of log store a group directory holds: LogStoreBolt,
// LogStoreWAL, or "" for a directory with none yet.
func HeldStore(dir string) string {
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	switch {
	case exists(filepath.Join(dir, "raft.db")):
		return LogStoreBolt
	case exists(filepath.Join(dir, "wal")):
		return LogStoreWAL
	}
	return ""
}

// openStore opens the group's store of the given kind ("": LogStoreBolt).
// A directory holds one kind for good: opening it with the other would
// start from an empty log and forget every acknowledged entry, so that is
// refused.
func openStore(kind, dir string) (durableStore, error) {
	boltPath, walDir := filepath.Join(dir, "raft.db"), filepath.Join(dir, "wal")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	switch kind {
	case "", LogStoreBolt:
		if exists(walDir) {
			return nil, fmt.Errorf("%w: %s holds a wal log; start the node with --log-store wal", ErrLogStore, dir)
		}
		store, err := raftboltdb.New(raftboltdb.Options{Path: boltPath, BoltOptions: boltOptions()})
		if err != nil {
			return nil, heldError(dir, err)
		}
		return boltStore{store}, nil
	case LogStoreWAL:
		if exists(boltPath) {
			return nil, fmt.Errorf("%w: %s holds a bolt log; start the node with --log-store bolt", ErrLogStore, dir)
		}
		if err := walNotHeld(walDir); err != nil {
			return nil, heldError(dir, err)
		}
		store, err := openWAL(walDir, 0)
		if err != nil {
			return nil, err
		}
		return store, nil
	}
	return nil, fmt.Errorf("%w: %q is no log store; use bolt or wal", ErrLogStore, kind)
}

// walNotHeld fails after a second if another process holds the WAL's meta
// database: raft-wal opens it without a timeout, so a second server on the
// same data dir would otherwise wait silently for the first to exit.
func walNotHeld(walDir string) error {
	path := filepath.Join(walDir, metadb.FileName)
	if _, err := os.Stat(path); err != nil {
		return nil // a new WAL: raft-wal creates it
	}
	db, err := bbolt.Open(path, 0o644, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		return err
	}
	return db.Close()
}

// heldError says what a lock timeout on a log store means.
func heldError(dir string, err error) error {
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("%s: another process holds it (is a second cairn server using this --data-dir?): %w", dir, err)
	}
	return err
}

// Open opens (and on first use bootstraps) a Raft group whose log and
// stable store are fsynced on every write (see LogStoreBolt, LogStoreWAL).
func Open(cfg Config, fsm raft.FSM) (*Group, error) {
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("raft group %s: %w", cfg.Group, err)
	}
	store, err := openStore(cfg.LogStore, cfg.Dir)
	if err != nil {
		if !errors.Is(err, ErrLogStore) {
			err = damaged(err)
		}
		return nil, fmt.Errorf("raft group %s: open log store: %w", cfg.Group, err)
	}
	onErr := cfg.OnStorageError
	if onErr == nil {
		onErr = func(err error) { panic(err) }
	}
	guarded := &storageGuard{durableStore: store, observe: cfg.ObserveLogWrite, fail: func(err error) {
		onErr(fmt.Errorf("raft group %s: storage write failed: %w", cfg.Group, err))
	}}
	logs := newLogCache(guarded, logCacheEntries, logCacheBytes)
	hlog := hclogFor(cfg.Logger, cfg.Group)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hlog.Named("snapshots"))
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft group %s: open snapshot store: %w", cfg.Group, err)
	}
	// The Raft the check reads the configuration of: set once it exists
	// (no RPC is served before NewRaft starts consuming them).
	var checked atomic.Pointer[raft.Raft]
	var check func(net.Conn, any) error
	if cfg.CheckRPC != nil {
		check = func(conn net.Conn, command any) error {
			var latest raft.Configuration
			if r := checked.Load(); r != nil {
				latest = r.GetConfiguration().Configuration()
			}
			return cfg.CheckRPC(conn, command, latest)
		}
	}
	trans := newGroupTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		CheckRPC: check,
		Stream:   cfg.Stream,
		MaxPool:  3,
		// Pipelined replication (the default, 2) can deadlock in
		// hashicorp/raft v1.7 when a follower fails under load: the pipeline
		// sender blocks on AppendEntries while the response decoder blocks
		// on the finished channel, and Shutdown then never returns. One RPC
		// in flight turns pipelining off; batching many messages per entry
		// (and many entries per AppendEntries) keeps the throughput. With
		// 2 or 4 in flight the sync and async rows measured no faster
		// (docs/performance.md, "Tried and not kept").
		MaxRPCsInFlight:       1,
		Timeout:               10 * time.Second,
		Logger:                hlog.Named("transport"),
		ServerAddressProvider: cfg.Addresses,
	}), cfg.SnapshotSends)

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	rc.NotifyCh = cfg.NotifyCh
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.NoLegacyTelemetry = true
	if t := cfg.Timing; t.Heartbeat > 0 {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout, rc.CommitTimeout = t.Heartbeat, t.Election, t.LeaderLease, t.Commit
	}
	rc.NotifyCommit = cfg.NotifyCommit
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	rc.SnapshotInterval = cmp.Or(cfg.SnapshotInterval, DefaultSnapshotInterval)
	rc.TrailingLogs = cmp.Or(cfg.TrailingLogs, DefaultTrailingLogs)

	fail := func(err error) (*Group, error) {
		trans.stopWaiting()
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("raft group %s: %w", cfg.Group, err)
	}
	has, err := raft.HasExistingState(logs, guarded, snaps)
	if err != nil {
		return fail(damaged(err))
	}
	if !has && len(cfg.Peers) > 0 {
		if err := raft.BootstrapCluster(rc, logs, guarded, snaps, trans, raft.Configuration{Servers: cfg.Peers}); err != nil {
			return fail(fmt.Errorf("bootstrap: %w", err))
		}
	}
	r, err := newRaft(rc, fsm, logs, guarded, snaps, trans)
	if err != nil {
		return fail(damaged(err))
	}
	checked.Store(r)
	trans.serve(r)
	return &Group{Raft: r, startIndex: r.LastIndex(), logs: logs, store: store, guard: guarded, transport: trans, dir: cfg.Dir}, nil
}

// Entry reads the log entry at index i into l (raft.ErrLogNotFound once
// compacted away).
func (g *Group) Entry(i uint64, l *raft.Log) error { return g.logs.GetLog(i, l) }

// maxCatchUpScan bounds the entries CaughtUp reads; a replica further behind
// is simply not caught up.
const maxCatchUpScan = 1024

// CaughtUp reports whether the state machine, whose last applied command
// entry is fsmApplied, holds every committed command, and the group has
// committed at least what this replica held on disk when it opened (so a
// restarted replica is not caught up before its old log is committed again).
// Raft's AppliedIndex cannot tell: it moves when entries are handed to the
// state machine, not when they are applied, and counts Raft's own entries
// (the no-op of each new term, configurations), which the state machine
// never sees.
func (g *Group) CaughtUp(fsmApplied uint64) bool {
	commit := g.Raft.CommitIndex()
	if commit < g.startIndex || commit > fsmApplied+maxCatchUpScan {
		return false
	}
	for i := fsmApplied + 1; i <= commit; i++ {
		var l raft.Log
		// An entry no longer in the log is in the snapshot the state
		// machine was restored from.
		if err := g.logs.GetLog(i, &l); err == nil && l.Type == raft.LogCommand {
			return false
		}
	}
	return true
}

// Close shuts the group down and closes its stores.
func (g *Group) Close() error {
	g.transport.stopWaiting()
	err := g.Raft.Shutdown().Error()
	g.guard.shut()
	g.transport.Close()
	if cerr := g.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// Destroy closes the group and deletes its data.
func (g *Group) Destroy() error {
	err := g.Close()
	if rerr := os.RemoveAll(g.dir); err == nil {
		err = rerr
	}
	return err
}

// hclogFor routes a library's hclog output into slog, with the group named.
func hclogFor(log *slog.Logger, group string) hclog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Output: io.Discard, Level: hclog.Debug})
	l.RegisterSink(slogSink{log: log.With("group", group)})
	return l
}

type slogSink struct{ log *slog.Logger }

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...interface{}) {
	// One level down: Raft's routine news ("entering leader state") is
	// debug detail for a broker's operator, and its warnings include the
	// election every group starts with.
	var lvl slog.Level
	switch {
	case level <= hclog.Info:
		lvl = slog.LevelDebug
	case level == hclog.Warn:
		lvl = slog.LevelInfo
	default:
		lvl = slog.LevelError
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, lvl) {
		return
	}
	s.log.Log(ctx, lvl, msg, append([]any{"lib", name}, args...)...)
}

// storageGuard stops the node on a failed write. hashicorp/raft answers a
// failed log write by stepping down and trying again later, which after an
// fsync error would let a replica that may have lost acknowledged entries
// keep voting and serving; a failed write is the end of the replica's
// promises, so it ends the process instead (as etcd does).
//
// Once the group is shut down, writes are dropped: Raft.Shutdown does not
// wait for the transport's heartbeat handler, which may still persist a
// newer term it saw (and hashicorp/raft panics if that fails). Nothing acts
// on that term any more, and a restart learns it again from the leader.
type storageGuard struct {
	durableStore
	fail    func(error)
	observe func(time.Duration) // nil: not observed

	mu     sync.RWMutex
	closed bool
}

// shut makes every later write a no-op, after the ones under way.
func (g *storageGuard) shut() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

func (g *storageGuard) write(w func() error) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return nil
	}
	err := w()
	if err != nil {
		g.fail(err)
	}
	return err
}

// IsMonotonic passes on raft-wal's rule that indexes have no gaps: told so,
// hashicorp/raft empties the log when it installs a snapshot; otherwise it
// keeps a log that ends before the snapshot, and the follower's next append
// is refused as non-monotonic.
func (g *storageGuard) IsMonotonic() bool { return isMonotonic(g.durableStore) }

// isMonotonic is what a store says through raft.MonotonicLogStore; false
// for one that does not say.
func isMonotonic(store any) bool {
	m, ok := store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (g *storageGuard) StoreLog(l *raft.Log) error {
	return g.StoreLogs([]*raft.Log{l})
}
func (g *storageGuard) StoreLogs(ls []*raft.Log) error {
	start := time.Now()
	err := g.write(func() error { return g.durableStore.StoreLogs(ls) })
	if g.observe != nil && err == nil {
		g.observe(time.Since(start))
	}
	return err
}
func (g *storageGuard) DeleteRange(min, max uint64) error {
	return g.write(func() error { return g.durableStore.DeleteRange(min, max) })
}
func (g *storageGuard) Set(k, v []byte) error {
	return g.write(func() error { return g.durableStore.Set(k, v) })
}
func (g *storageGuard) SetUint64(k []byte, v uint64) error {
	return g.write(func() error { return g.durableStore.SetUint64(k, v) })
}
