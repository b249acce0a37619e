package raftgroup

import (
	"cmp"
	"os"
	"path/filepath"
	"sync"

	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
)

// walDeletingDir is where a group's deleted raft-wal segments wait to be
// unlinked, beside its wal directory (on the same file system, so that
// moving one there is a rename).
const walDeletingDir = "wal-deleting"

// walStore is raft-wal with its segment files unlinked off its write lock,
// and a few megabytes at a time.
//
// A snapshot's compaction deletes the segments it empties while raft-wal
// holds the lock every append takes, and unlinking a 64 MiB segment took
// 35–39 ms on our test machines (ext4 frees the blocks and the cached pages
// in the call): with a queue at 11,000 msgs/s, appends waited 45–147 ms at
// each compaction. Unlinked whole on another goroutine, a segment still
// held up every other file's fdatasync for about 10 ms; cut down 4 MiB at a
// time first, no fdatasync waited more than the 2–3 ms it waits anyway
// (measured with a 4 KiB append and fdatasync loop beside three deletions).
// raft-wal's file system interface lets Delete only say that a file is no
// longer needed, so deletingFS renames the file out of the wal directory
// (microseconds, still under the lock) and deletes it on a goroutine of
// its own.
type walStore struct {
	*wal.WAL
	files *deletingFS
}

// openWAL opens the raft-wal log in walDir, emptying what a stopped process
// left to delete. segmentSize 0 is raft-wal's default (64 MiB).
func openWAL(walDir string, segmentSize int) (*walStore, error) {
	files := &deletingFS{FS: walfs.New(), deleting: filepath.Join(filepath.Dir(walDir), walDeletingDir)}
	if err := os.RemoveAll(files.deleting); err != nil {
		return nil, err
	}
	for _, d := range []string{walDir, files.deleting} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	w, err := wal.Open(walDir, wal.WithSegmentFiler(segment.NewFiler(walDir, files)),
		wal.WithSegmentSize(cmp.Or(segmentSize, wal.DefaultSegmentSize)))
	if err != nil {
		return nil, err
	}
	return &walStore{WAL: w, files: files}, nil
}

// Close closes the log and waits for the deletions under way.
func (s *walStore) Close() error {
	err := s.WAL.Close()
	s.files.close()
	return err
}

// unlinking lets one segment be deleted at a time on this node, whatever
// the groups: each deletion is disk work beside every group's appends.
var unlinking sync.Mutex

// deletingFS is raft-wal's file system with Delete moving the file aside
// and deleting it later.
type deletingFS struct {
	*walfs.FS
	deleting string

	mu      sync.Mutex
	closed  bool
	pending sync.WaitGroup
}

// Delete moves the file aside and deletes it on another goroutine. Once
// the log is closed (raft-wal may still delete a segment when its last
// reader lets go of it), it deletes the file before returning, so that
// nothing runs after Close.
func (d *deletingFS) Delete(dir, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.FS.Delete(dir, name)
	}
	aside := filepath.Join(d.deleting, name)
	if err := os.Rename(filepath.Join(dir, name), aside); err != nil {
		return err
	}
	d.pending.Add(1)
	go func() {
		defer d.pending.Done()
		unlinking.Lock()
		defer unlinking.Unlock()
		// A file that stays behind is removed when the log next opens.
		_ = shrink(aside, deleteStep)
		_ = os.Remove(aside)
	}()
	return nil
}

// close makes later deletions immediate and waits for those under way.
func (d *deletingFS) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.pending.Wait()
}

// deleteStep is how much of a file one truncation frees (walStore).
const deleteStep = 4 << 20

// shrink truncates the file at path to nothing, step bytes at a time.
func shrink(path string, step int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	for size := info.Size(); size > 0; {
		size = max(size-step, 0)
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	return nil
}
