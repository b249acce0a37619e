package raftgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A fake log of the given entries, for deleteHead.
type fakeLog struct {
	entries []uint64 // ascending
	calls   [][2]uint64
}

func (l *fakeLog) first() (uint64, error) {
	if len(l.entries) == 0 {
		return 0, nil
	}
	return l.entries[0], nil
}

func (l *fakeLog) del(lo, hi uint64) error {
	l.calls = append(l.calls, [2]uint64{lo, hi})
	l.entries = slices.DeleteFunc(l.entries, func(i uint64) bool { return i >= lo && i <= hi })
	return nil
}

func indexes(ranges ...[2]uint64) []uint64 {
	var out []uint64
	for _, r := range ranges {
		for i := r[0]; i <= r[1]; i++ {
			out = append(out, i)
		}
	}
	return out
}

func TestDeleteHead(t *testing.T) {
	for _, c := range []struct {
		name     string
		entries  []uint64
		lo, hi   uint64
		calls    string
		leftFrom uint64 // the first entry left, 0 for none
	}{
		{"head in chunks", indexes([2]uint64{1, 3000}), 1, 2500, "[[1 1024] [1025 2048] [2049 2500]]", 2501},
		{"the whole log", indexes([2]uint64{1, 1024}), 1, 1024, "[[1 1024]]", 0},
		{"from before the first entry", indexes([2]uint64{5, 10}), 1, 7, "[[5 7]]", 8},
		{"the tail in one", indexes([2]uint64{1, 3000}), 100, 3000, "[[100 3000]]", 1},
		// A follower's bolt log after it installed a snapshot at 1,000,000.
		{"across a gap", indexes([2]uint64{1, 10}, [2]uint64{1_000_001, 1_000_010}), 1, 1_000_005, "[[1 1024] [1000001 1000005]]", 1_000_006},
	} {
		l := &fakeLog{entries: c.entries}
		if err := deleteHead(c.lo, c.hi, 1024, l.first, l.del); err != nil {
			t.Fatal(err)
		}
		first, _ := l.first()
		if fmt.Sprint(l.calls) != c.calls || first != c.leftFrom {
			t.Errorf("%s: deleted %v and the log begins at %d; want %s and %d", c.name, l.calls, first, c.calls, c.leftFrom)
		}
	}
	l := &fakeLog{entries: indexes([2]uint64{1, 5000})}
	err := deleteHead(1, 5000, 1024, l.first, func(lo, hi uint64) error {
		l.calls = append(l.calls, [2]uint64{lo, hi})
		return errors.New("disk full")
	})
	if err == nil || len(l.calls) != 1 {
		t.Errorf("after a failed chunk: %v, %v", l.calls, err)
	}
}

// Deleting the head and the tail leaves what the plain store would.
func TestBoltStore_DeleteRange(t *testing.T) {
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	s := boltStore{b}
	defer s.Close()
	if err := s.StoreLogs(entries(1, 3000, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 2500); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(2901, 3000); err != nil {
		t.Fatal(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 2501 || last != 2900 {
		t.Errorf("the log holds %d..%d, want 2501..2900", first, last)
	}
	var l raft.Log
	if err := s.GetLog(2501, &l); err != nil || l.Index != 2501 {
		t.Errorf("entry 2501: %v", err)
	}
	if err := s.GetLog(2500, &l); err == nil {
		t.Errorf("entry 2500 is still there")
	}
}
