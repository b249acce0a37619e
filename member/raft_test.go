package member

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// A failed write of the Raft log (an fsync error) stops the node instead of
// letting Raft step down and try again.
func TestStorageGuard_FailedWriteStopsTheNode(t *testing.T) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	var failed []error
	g := &storageGuard{BoltStore: store, fail: func(err error) { failed = append(failed, err) }}
	if err := g.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}); err != nil || len(failed) != 0 {
		t.Fatalf("a good write: err %v, fail called %d times", err, len(failed))
	}
	store.Close() // every later write fails, as after an fsync error
	for _, write := range []func() error{
		func() error { return g.StoreLog(&raft.Log{Index: 2, Term: 1}) },
		func() error { return g.SetUint64([]byte("CurrentTerm"), 2) },
		func() error { return g.DeleteRange(1, 1) },
	} {
		if err := write(); err == nil {
			t.Fatal("a write to a closed store succeeded")
		}
	}
	if len(failed) != 3 {
		t.Fatalf("fail called %d times for 3 failed writes", len(failed))
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
	g := &storageGuard{BoltStore: store, fail: func(error) { failed++ }}
	g.shut()
	store.Close()
	if err := g.SetUint64([]byte("CurrentTerm"), 7); err != nil || failed != 0 {
		t.Fatalf("write after shutdown: err %v, fail called %d times", err, failed)
	}
}

// A second server on the same data directory gets an error that says so
// within the lock timeout, instead of waiting for the file lock forever.
func TestOpenRaft_HeldLogStoreIsAnError(t *testing.T) {
	dir := t.TempDir()
	held, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), BoltOptions: boltOptions()})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	g, err := OpenRaft(RaftConfig{Group: "q#0", NodeID: "n1", Dir: dir}, nil)
	if err == nil {
		g.Close()
		t.Fatal("opened a log store another open holds")
	}
	if !errors.Is(err, bbolt.ErrTimeout) || !strings.Contains(err.Error(), "another process holds it") {
		t.Fatalf("err = %v; want bbolt.ErrTimeout, saying another process holds the store", err)
	}
}
