package raftgroup

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/cairnmq/cairn/transport/raftmux"
)

// A failed write of the Raft log (an fsync error) stops the node instead of
// letting Raft step down and try again; with either log store.
func TestStorageGuard_FailedWriteStopsTheNode(t *testing.T) {
	for _, kind := range []string{LogStoreBolt, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			store, err := openStore(kind, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var failed []error
			g := &storageGuard{durableStore: store, fail: func(err error) { failed = append(failed, err) }}
			if err := g.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}); err != nil || len(failed) != 0 {
				t.Fatalf("a good write: err %v, fail called %d times", err, len(failed))
			}
			store.Close() // every later write fails, as after an fsync error
			for _, write := range []func() error{
				func() error { return g.StoreLog(&raft.Log{Index: 2, Term: 1}) },
				func() error { return g.SetUint64([]byte("CurrentTerm"), 2) },
			} {
				if err := write(); err == nil {
					t.Fatal("a write to a closed store succeeded")
				}
			}
			if len(failed) != 2 {
				t.Fatalf("fail called %d times for 2 failed writes", len(failed))
			}
		})
	}
}

// A group directory keeps the log store it was written with: opening it
// with the other kind would start from an empty log, so it is refused, and
// an unknown kind is refused too.
func TestOpenStore_KindIsKept(t *testing.T) {
	for _, c := range []struct{ first, then string }{{LogStoreBolt, LogStoreWAL}, {LogStoreWAL, LogStoreBolt}} {
		dir := t.TempDir()
		s, err := openStore(c.first, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := openStore(c.then, dir); !errors.Is(err, ErrLogStore) {
			t.Errorf("a %s directory opened as %s: %v, want ErrLogStore", c.first, c.then, err)
		}
		again, err := openStore(c.first, dir)
		if err != nil {
			t.Fatalf("reopening a %s directory: %v", c.first, err)
		}
		if last, _ := again.LastIndex(); last != 1 {
			t.Errorf("reopened %s store: last index %d, want 1", c.first, last)
		}
		again.Close()
	}
	if _, err := openStore("rocks", t.TempDir()); !errors.Is(err, ErrLogStore) {
		t.Errorf("unknown kind: %v, want ErrLogStore", err)
	}
}

// After its group shut down, a late write (the transport's heartbeat
// handler persisting a newer term) is dropped: it neither stops the node
// nor fails, which would make hashicorp/raft panic.
func TestStorageGuard_WritesAfterShutdownAreDropped(t *testing.T) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	g := &storageGuard{durableStore: store, fail: func(error) { failed++ }}
	g.shut()
	store.Close()
	if err := g.SetUint64([]byte("CurrentTerm"), 7); err != nil || failed != 0 {
		t.Fatalf("write after shutdown: err %v, fail called %d times", err, failed)
	}
}

// A second server on the same data directory gets an error that says so
// within the lock timeout, instead of waiting for the file lock forever;
// with either log store.
func TestOpenRaft_HeldLogStoreIsAnError(t *testing.T) {
	for _, kind := range []string{LogStoreBolt, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			held, err := openStore(kind, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			g, err := Open(Config{Group: "q#0", NodeID: "n1", Dir: dir, LogStore: kind}, nil)
			if err == nil {
				g.Close()
				t.Fatal("opened a log store another open holds")
			}
			if !errors.Is(err, bbolt.ErrTimeout) || !strings.Contains(err.Error(), "another process holds it") {
				t.Fatalf("err = %v; want bbolt.ErrTimeout, saying another process holds the store", err)
			}
		})
	}
}

// A follower whose log suffix is cut after a leader change (DeleteRange at
// the tail) opens again with everything before the cut. raft-wal v0.4.0
// failed this twice over: its Close left the meta database locked, and the
// cut sealed the tail segment without its index, so the next start panicked
// reading index 1 (hashicorp/raft-wal#31, fixed in v0.4.1).
func TestOpenStore_TailTruncationSurvivesRestart(t *testing.T) {
	for _, kind := range []string{LogStoreBolt, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			s, err := openStore(kind, dir)
			if err != nil {
				t.Fatal(err)
			}
			var logs []*raft.Log
			for i := uint64(1); i <= 5; i++ {
				logs = append(logs, &raft.Log{Index: i, Term: 1, Data: []byte{byte(i)}})
			}
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteRange(4, 5); err != nil {
				t.Fatal(err)
			}
			if err := s.StoreLogs([]*raft.Log{{Index: 4, Term: 2, Data: []byte{40}}}); err != nil {
				t.Fatal(err)
			}
			s.Close()

			again, err := openStore(kind, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if last, _ := again.LastIndex(); last != 4 {
				t.Fatalf("last index %d after the cut and one more write, want 4", last)
			}
			for i, want := range map[uint64]raft.Log{1: {Term: 1, Data: []byte{1}}, 3: {Term: 1, Data: []byte{3}}, 4: {Term: 2, Data: []byte{40}}} {
				var got raft.Log
				if err := again.GetLog(i, &got); err != nil {
					t.Fatalf("index %d after restart: %v", i, err)
				}
				if got.Term != want.Term || string(got.Data) != string(want.Data) {
					t.Errorf("index %d: term %d data %v, want term %d data %v", i, got.Term, got.Data, want.Term, want.Data)
				}
			}
		})
	}
}

// raft-wal needs hashicorp/raft to know its indexes cannot have gaps, through
// the guard and the log cache; bolt does not.
func TestStorageGuard_KeepsTheStoresMonotonicity(t *testing.T) {
	for kind, want := range map[string]bool{LogStoreBolt: false, LogStoreWAL: true} {
		store, err := openStore(kind, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cache := newLogCache(&storageGuard{durableStore: store}, 8, 1<<20)
		if got := cache.IsMonotonic(); got != want {
			t.Errorf("%s: IsMonotonic %v through the guard, want %v", kind, got, want)
		}
		store.Close()
	}
}

// A group whose log on disk cannot be read back opens with an error
// wrapping ErrDamaged, never a panic: hashicorp/raft panics at the start on
// a configuration entry that does not decode, and on an entry missing
// between its snapshot and its last index. Its caller rebuilds such a
// replica from the others; with either log store.
func TestOpen_DamagedLogIsAnErrorNotAPanic(t *testing.T) {
	for _, kind := range []string{LogStoreBolt, LogStoreWAL} {
		for name, damage := range map[string]func(durableStore) error{
			"junk configuration entry": func(s durableStore) error {
				return s.StoreLogs([]*raft.Log{{Index: 4, Term: 1, Type: raft.LogConfiguration, Data: []byte{0xc1, 0xc1, 0xc1}}})
			},
			"an entry missing": func(s durableStore) error {
				if bs, ok := s.(boltStore); ok {
					return bs.DeleteRange(2, 2) // bolt deletes any range; raft-wal only ends
				}
				return s.DeleteRange(1, 2) // the head, with no snapshot covering it
			},
		} {
			t.Run(kind+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				s, err := openStore(kind, dir)
				if err != nil {
					t.Fatal(err)
				}
				var logs []*raft.Log
				for i := uint64(1); i <= 3; i++ {
					logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
				}
				if err := s.StoreLogs(logs); err != nil {
					t.Fatal(err)
				}
				if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
					t.Fatal(err)
				}
				if err := damage(s); err != nil {
					t.Fatal(err)
				}
				s.Close()
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				mux := raftmux.New(ln, nil, nil, nil)
				defer mux.Close()
				layer, err := mux.Layer("q#0")
				if err != nil {
					t.Fatal(err)
				}
				g, err := Open(Config{Group: "q#0", NodeID: "n1", Dir: dir, LogStore: kind, Stream: layer}, &logFSM{})
				if err == nil {
					g.Close()
					t.Fatal("a damaged log opened")
				}
				if !errors.Is(err, ErrDamaged) {
					t.Fatalf("err = %v; want ErrDamaged", err)
				}
			})
		}
	}
}
