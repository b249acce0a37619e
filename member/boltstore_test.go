package member

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func TestInChunks(t *testing.T) {
	for _, c := range []struct {
		lo, hi, n uint64
		want      string
	}{
		{1, 2500, 1024, "[[1 1024] [1025 2048] [2049 2500]]"},
		{1, 1024, 1024, "[[1 1024]]"},
		{5, 5, 1024, "[[5 5]]"},
		{math.MaxUint64 - 2, math.MaxUint64, 2, fmt.Sprintf("[[%d %d] [%d %d]]", uint64(math.MaxUint64-2), uint64(math.MaxUint64-1), uint64(math.MaxUint64), uint64(math.MaxUint64))},
	} {
		var got [][2]uint64
		_ = inChunks(c.lo, c.hi, c.n, func(lo, hi uint64) error { got = append(got, [2]uint64{lo, hi}); return nil })
		if fmt.Sprint(got) != c.want {
			t.Errorf("inChunks(%d, %d, %d) = %v, want %s", c.lo, c.hi, c.n, got, c.want)
		}
	}
	calls := 0
	err := inChunks(1, 5000, 1024, func(lo, hi uint64) error { calls++; return errors.New("disk full") })
	if err == nil || calls != 1 {
		t.Errorf("after a failed chunk: %d calls, %v", calls, err)
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
	var logs []*raft.Log
	for i := uint64(1); i <= 3000; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Data: []byte{byte(i)}})
	}
	if err := s.StoreLogs(logs); err != nil {
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
