package member

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cairnmq/cairn/fsm"
)

// DefaultBodyMemory is how many bytes of message bodies a member keeps in
// memory before it puts the newest waiting ones away on disk
// (member/DESIGN.md, "Bodies out of the heap").
const DefaultBodyMemory = 16 << 20

// bodySegmentBytes is the size at which the store starts a new file. A file
// is deleted once none of its bodies is in the state, so a message that
// stays behind keeps at most this much disk.
const bodySegmentBytes = 16 << 20

// maxBodyRun bounds one read of bodies that lie back to back;
// readAheadStart is a snapshot's first read at a place out of order.
const (
	maxBodyRun     = 1 << 20
	readAheadStart = 64 << 10
)

// errBodyGone is a read of a body whose file was deleted: its message left
// the state. errBodiesClosed is a read after the replica stopped.
var (
	errBodyGone     = errors.New("member: message body no longer stored")
	errBodiesClosed = errors.New("member: the replica stopped; its message bodies are closed")
)

// bodyStore keeps the bodies a member put away, in files of its own under
// the member's directory. Nothing in it is durable or replicated: the Raft
// log and the snapshots hold every body, and the store starts empty at each
// start, refilled by the restore and the replay. A body's place
// (fsm.BodyRef.At) is its file's number in the high 32 bits and its offset
// in the low.
type bodyStore struct {
	dir string

	mu     sync.Mutex
	files  map[uint32]*bodyFile
	active *bodyFile
	nextID uint32
	// While snapshots being written hold pins, files whose bodies all left
	// the state wait in doomed: the snapshot may still read them.
	pins   int
	doomed map[uint32]*bodyFile
	buf    []byte
	closed bool
}

type bodyFile struct {
	id   uint32
	f    *os.File
	size int64
	live int
}

// openBodyStore empties dir, left over from a previous run, and keeps
// bodies there.
func openBodyStore(dir string) (*bodyStore, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clearing the message bodies left from the last run in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating %s for message bodies: %w", dir, err)
	}
	return &bodyStore{dir: dir, files: map[uint32]*bodyFile{}, doomed: map[uint32]*bodyFile{}, nextID: 1}, nil
}

// put writes bodies back to back, in files of about bodySegmentBytes, a
// megabyte at a time, and returns their places. When it fails, none of the
// bodies is kept.
func (s *bodyStore) put(bodies [][]byte) ([]fsm.BodyRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := make([]fsm.BodyRef, len(bodies))
	written, queued := 0, 0
	flush := func() error {
		if queued == written {
			return nil
		}
		f := s.active
		if _, err := f.f.WriteAt(s.buf, f.size); err != nil {
			return fmt.Errorf("putting message bodies away in %s: %w", f.f.Name(), err)
		}
		f.size += int64(len(s.buf))
		f.live += queued - written
		s.buf, written = s.buf[:0], queued
		return nil
	}
	fail := func(err error) ([]fsm.BodyRef, error) {
		s.buf = s.buf[:0]
		s.dropLocked(refs[:written])
		return nil, err
	}
	for i, b := range bodies {
		if s.active == nil || (s.active.size+int64(len(s.buf)) > 0 && s.active.size+int64(len(s.buf)+len(b)) > bodySegmentBytes) {
			if err := flush(); err != nil {
				return fail(err)
			}
			if err := s.rollLocked(); err != nil {
				return fail(err)
			}
		}
		f := s.active
		refs[i] = fsm.BodyRef{At: uint64(f.id)<<32 | uint64(f.size+int64(len(s.buf))), Len: uint32(len(b))}
		s.buf = append(s.buf, b...)
		queued++
		if len(s.buf) >= maxBodyRun {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	if cap(s.buf) > 2*maxBodyRun {
		s.buf = nil
	}
	return refs, nil
}

// roll makes the bodies put from now on go to new files, numbered from the
// one it returns; the first is created by the next put.
func (s *bodyStore) roll() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.active; old != nil {
		s.active = nil
		if old.live == 0 {
			s.deleteLocked(old)
		}
	}
	return s.nextID
}

func (s *bodyStore) rollLocked() error {
	name := filepath.Join(s.dir, fmt.Sprintf("%08d.bodies", s.nextID))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("starting a file for message bodies: %w", err)
	}
	if old := s.active; old != nil && old.live == 0 {
		s.deleteLocked(old)
	}
	s.active = &bodyFile{id: s.nextID, f: f}
	s.files[s.nextID] = s.active
	s.nextID++
	return nil
}

// read appends the body at ref to buf.
func (s *bodyStore) read(ref fsm.BodyRef, buf []byte) ([]byte, error) {
	id, off := splitBodyAt(ref.At)
	start := len(buf)
	buf = slices.Grow(buf, int(ref.Len))[:start+int(ref.Len)]
	if err := s.readAt(id, buf[start:], off); err != nil {
		return buf[:start], err
	}
	return buf, nil
}

// readUpTo reads from file id at off into p, up to p's length or the
// file's end. It returns how many bytes it read.
func (s *bodyStore) readUpTo(id uint32, p []byte, off int64) (int, error) {
	s.mu.Lock()
	f, err := s.fileLocked(id)
	var size int64
	if f != nil {
		size = f.size
	}
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n := min(int64(len(p)), size-off)
	if n <= 0 {
		return 0, fmt.Errorf("reading message bodies from %s at %d: the file holds %d bytes", f.f.Name(), off, size)
	}
	return int(n), s.readFile(f, p[:n], off)
}

// fileLocked finds file id, readable while pinned though its bodies left.
func (s *bodyStore) fileLocked(id uint32) (*bodyFile, error) {
	if s.closed {
		return nil, errBodiesClosed
	}
	if f := s.files[id]; f != nil {
		return f, nil
	}
	if f := s.doomed[id]; f != nil {
		return f, nil
	}
	return nil, errBodyGone
}

// readAt fills p from file id at off.
func (s *bodyStore) readAt(id uint32, p []byte, off int64) error {
	s.mu.Lock()
	f, err := s.fileLocked(id)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.readFile(f, p, off)
}

// readFile fills p from f at off; f may be closed under it.
func (s *bodyStore) readFile(f *bodyFile, p []byte, off int64) error {
	if _, err := f.f.ReadAt(p, off); err != nil {
		if errors.Is(err, os.ErrClosed) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.closed {
				return errBodiesClosed
			}
			return errBodyGone
		}
		return fmt.Errorf("reading message bodies from %s: %w", f.f.Name(), err)
	}
	return nil
}

// bodyReadAhead reads bodies for a snapshot being written, which asks for
// them in the order they were mostly put away: it serves the bodies from a
// block it read, one pread a megabyte rather than one a body while the
// bodies come in file order; a body elsewhere starts a block of 64 KiB, so
// that bodies asked for out of order do not each cost a megabyte.
type bodyReadAhead struct {
	s     *bodyStore
	file  uint32
	start int64
	block []byte
	// fetched counts the bytes read from the files.
	fetched int64
}

func (s *bodyStore) readAhead() *bodyReadAhead { return &bodyReadAhead{s: s} }

// read appends the body at ref to buf.
func (r *bodyReadAhead) read(ref fsm.BodyRef, buf []byte) ([]byte, error) {
	id, off := splitBodyAt(ref.At)
	end := off + int64(ref.Len)
	if id != r.file || off < r.start || end > r.start+int64(len(r.block)) {
		if int(ref.Len) > maxBodyRun {
			return r.s.read(ref, buf)
		}
		if r.block == nil {
			r.block = make([]byte, maxBodyRun)
		}
		size := max(int(ref.Len), readAheadStart)
		if id == r.file && off >= r.start && off <= r.start+int64(len(r.block)) {
			size = maxBodyRun // on through the file
		}
		n, err := r.s.readUpTo(id, r.block[:size], off)
		if err == nil && int64(n) < int64(ref.Len) {
			err = fmt.Errorf("a body of %d bytes at %d in a file holding %d after it", ref.Len, off, n)
		}
		if err != nil {
			r.block = r.block[:0]
			return buf, err
		}
		r.file, r.start, r.block = id, off, r.block[:n]
		r.fetched += int64(n)
	}
	return append(buf, r.block[off-r.start:end-r.start]...), nil
}

// readAll returns the bodies at refs, reading those that lie back to back
// at once; they share buffers, which the caller must not modify.
func (s *bodyStore) readAll(refs []fsm.BodyRef) ([][]byte, error) {
	out := make([][]byte, len(refs))
	for i := 0; i < len(refs); {
		// A run: the same file, each body right after the one before.
		id, start := splitBodyAt(refs[i].At)
		end := start + int64(refs[i].Len)
		j := i + 1
		for ; j < len(refs); j++ {
			nid, off := splitBodyAt(refs[j].At)
			if nid != id || off != end || end-start+int64(refs[j].Len) > maxBodyRun {
				break
			}
			end += int64(refs[j].Len)
		}
		run := make([]byte, end-start)
		if err := s.readAt(id, run, start); err != nil {
			return nil, err
		}
		for k := i; k < j; k++ {
			_, off := splitBodyAt(refs[k].At)
			out[k] = run[off-start : off-start+int64(refs[k].Len) : off-start+int64(refs[k].Len)]
		}
		i = j
	}
	return out, nil
}

func splitBodyAt(at uint64) (file uint32, off int64) {
	return uint32(at >> 32), int64(at & (1<<32 - 1))
}

// drop forgets bodies whose messages left the state, deleting each file
// none of whose bodies is left.
func (s *bodyStore) drop(refs []fsm.BodyRef) {
	if len(refs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(refs)
}

func (s *bodyStore) dropLocked(refs []fsm.BodyRef) {
	for _, ref := range refs {
		id, _ := splitBodyAt(ref.At)
		f := s.files[id]
		if f == nil {
			continue
		}
		f.live--
		if f.live <= 0 && f != s.active {
			s.deleteLocked(f)
		}
	}
}

// dropFiles deletes the files numbered below from (below true) or from it
// on (below false): a restore's new state replaced, or failed to replace,
// the old one.
func (s *bodyStore) dropFiles(from uint32, below bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, f := range s.files {
		if (id < from) == below {
			s.deleteLocked(f)
		}
	}
}

// deleteLocked deletes f now, or once no snapshot being written may read it.
func (s *bodyStore) deleteLocked(f *bodyFile) {
	delete(s.files, f.id)
	if f == s.active {
		s.active = nil
	}
	if s.pins > 0 {
		s.doomed[f.id] = f
		return
	}
	f.remove()
}

func (f *bodyFile) remove() {
	f.f.Close()
	os.Remove(f.f.Name())
}

// pin keeps every file readable, even one whose bodies all left the
// state, until the returned function is called: a snapshot being written
// reads the bodies of the state it captured.
func (s *bodyStore) pin() (unpin func()) {
	s.mu.Lock()
	s.pins++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pins--; s.pins == 0 {
				for _, f := range s.doomed {
					f.remove()
				}
				clear(s.doomed)
			}
		})
	}
}

// close deletes every file: the next start begins empty.
func (s *bodyStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		f.f.Close()
	}
	for _, f := range s.doomed {
		f.f.Close()
	}
	s.files, s.active, s.doomed, s.closed = map[uint32]*bodyFile{}, nil, map[uint32]*bodyFile{}, true
	os.RemoveAll(s.dir)
}
