package raftgroup

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
)

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wal") {
			names = append(names, e.Name())
		}
	}
	return names
}

// A compaction takes the emptied segments out of the log's directory; they
// are unlinked afterwards, and the log reopens with what was kept.
func TestWALStore_CompactionDeletesSegmentsAfterwards(t *testing.T) {
	dir := t.TempDir()
	walDir := filepath.Join(dir, "wal")
	s, err := openWAL(walDir, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	data := func(i uint64) []byte { return bytes.Repeat([]byte{byte(i)}, 4<<10) }
	logs := entries(1, 200, 4<<10)
	for i := 0; i < len(logs); i += 10 {
		if err := s.StoreLogs(logs[i : i+10]); err != nil {
			t.Fatal(err)
		}
	}
	before := segmentFiles(t, walDir)
	if len(before) < 8 {
		t.Fatalf("800 KiB of entries made %d segments of 64 KiB", len(before))
	}
	if err := s.DeleteRange(1, 150); err != nil {
		t.Fatal(err)
	}
	after := segmentFiles(t, walDir)
	if len(after) >= len(before)-4 {
		t.Fatalf("deleting 150 of 200 entries left %d of %d segments", len(after), len(before))
	}
	s.files.close()
	if left, _ := os.ReadDir(filepath.Join(dir, walDeletingDir)); len(left) != 0 {
		t.Errorf("%d files still wait to be deleted after the unlinks ended", len(left))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = openWAL(walDir, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if first, _ := s.FirstIndex(); first != 151 {
		t.Errorf("reopened log begins at %d, want 151", first)
	}
	for i := uint64(151); i <= 200; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, data(i)) {
			t.Fatalf("entry %d after reopening: %v", i, err)
		}
	}
}

// Delete moves the file aside before it returns, and unlinks it later.
func TestDeletingFS_DeleteMovesAsideThenUnlinks(t *testing.T) {
	dir := t.TempDir()
	d := &deletingFS{FS: walfs.New(), deleting: filepath.Join(dir, walDeletingDir)}
	if err := os.Mkdir(d.deleting, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1.wal"), []byte("entries"), 0o640); err != nil {
		t.Fatal(err)
	}
	unlinking.Lock() // holds the unlink back
	if err := d.Delete(dir, "1.wal"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "1.wal")); !os.IsNotExist(err) {
		t.Errorf("the deleted file is still in the log's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.deleting, "1.wal")); err != nil {
		t.Errorf("the deleted file is not waiting aside: %v", err)
	}
	unlinking.Unlock()
	d.close()
	if _, err := os.Stat(filepath.Join(d.deleting, "1.wal")); !os.IsNotExist(err) {
		t.Errorf("the file is still aside after the unlink: %v", err)
	}

	// After close, nothing is left to a goroutine.
	if err := os.WriteFile(filepath.Join(dir, "2.wal"), []byte("entries"), 0o640); err != nil {
		t.Fatal(err)
	}
	unlinking.Lock()
	defer unlinking.Unlock()
	if err := d.Delete(dir, "2.wal"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "2.wal"), filepath.Join(d.deleting, "2.wal")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after close, Delete left %s: %v", p, err)
		}
	}
}

// Files a stopped process left aside are removed when the log opens again.
func TestWALStore_OpenRemovesWhatWasLeftAside(t *testing.T) {
	dir := t.TempDir()
	aside := filepath.Join(dir, walDeletingDir)
	if err := os.Mkdir(aside, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(aside, "00000000000000000001-0000000000000000.wal"), []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := openWAL(filepath.Join(dir, "wal"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if left, _ := os.ReadDir(aside); len(left) != 0 {
		t.Errorf("%d files left aside survived the opening", len(left))
	}
}

func TestShrink_TruncatesToNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg.wal")
	if err := os.WriteFile(path, make([]byte, 10<<10), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := shrink(path, 3<<10); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Size() != 0 {
		t.Fatalf("after shrinking: %v, %v", info, err)
	}
}
