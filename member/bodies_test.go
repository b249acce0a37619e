package member

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// testBodyStore opens a body store in a fresh directory, closed at the end
// of the test.
func testBodyStore(t *testing.T) *bodyStore {
	t.Helper()
	s, err := openBodyStore(filepath.Join(t.TempDir(), "bodies"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// bodyFileName is the name the store gives its file number id.
func bodyFileName(id uint32) string { return fmt.Sprintf("%08d.bodies", id) }

// bodyFiles lists the names in dir, sorted; none when dir does not exist.
func bodyFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func wantBodyFiles(t *testing.T, s *bodyStore, ids ...uint32) {
	t.Helper()
	var want []string
	for _, id := range ids {
		want = append(want, bodyFileName(id))
	}
	if got := bodyFiles(t, s.dir); !slices.Equal(got, want) {
		t.Fatalf("files in the body store %v, want %v", got, want)
	}
}

func mustPut(t *testing.T, s *bodyStore, bodies ...[]byte) []fsm.BodyRef {
	t.Helper()
	refs, err := s.put(bodies)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != len(bodies) {
		t.Fatalf("put %d bodies, got %d places", len(bodies), len(refs))
	}
	for i, ref := range refs {
		if !ref.Away() || int(ref.Len) != len(bodies[i]) {
			t.Fatalf("body %d of %d bytes put at %+v", i, len(bodies[i]), ref)
		}
	}
	return refs
}

func refFile(ref fsm.BodyRef) uint32 {
	id, _ := splitBodyAt(ref.At)
	return id
}

// patterned is n bytes that differ from one body to the next.
func patterned(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7 + i/251)
	}
	return b
}

// A snapshot's read-ahead returns each body as it was, whatever the order
// it is asked in: in order across block boundaries and files, backwards, a
// body larger than a block, and a file that ends before a block would.
func TestBodyStore_ReadAheadReadsEveryBody(t *testing.T) {
	s := testBodyStore(t)
	var bodies [][]byte
	for i := range 5000 {
		bodies = append(bodies, patterned(i, 100+(i%900)*8))
	}
	bodies = append(bodies, patterned(9999, maxBodyRun+10))
	var refs []fsm.BodyRef
	for i := 0; i < len(bodies); i += 100 {
		refs = append(refs, mustPut(t, s, bodies[i:min(i+100, len(bodies))]...)...)
	}
	if refFile(refs[0]) == refFile(refs[len(refs)-1]) {
		t.Fatal("the bodies fit in one file: the test needs several")
	}
	check := func(what string, order []int) {
		t.Helper()
		r := s.readAhead()
		var buf []byte
		for _, i := range order {
			got, err := r.read(refs[i], buf[:0])
			if err != nil {
				t.Fatalf("%s: body %d: %v", what, i, err)
			}
			if !bytes.Equal(got, bodies[i]) {
				t.Fatalf("%s: body %d reads %x..., want %x...", what, i, head(got), head(bodies[i]))
			}
			buf = got
		}
	}
	var forward, backward []int
	for i := range bodies {
		forward = append(forward, i)
		backward = append(backward, len(bodies)-1-i)
	}
	check("in order", forward)
	check("backwards", backward)
	check("skipping about", []int{5, 4999, 5000, 7, 2500, 2501, 0})

	// Bodies asked for out of order do not each cost a megabyte; in order,
	// one read serves many.
	for _, c := range []struct {
		what  string
		order []int
		most  int64
	}{
		{"backwards", backward, int64(len(bodies)) * readAheadStart},
		{"in order", forward, 2 * int64(bodySegmentBytes+maxBodyRun)},
	} {
		r := s.readAhead()
		for _, i := range c.order {
			if _, err := r.read(refs[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		if r.fetched > c.most {
			t.Errorf("%s: read %d bytes from the files for %d bodies, want at most %d", c.what, r.fetched, len(bodies), c.most)
		}
	}
}

// Bodies put away read back as they were, one at a time or all at once,
// whether they lie back to back (in one put or two, beyond one read's run)
// or in different files.
func TestBodyStore_PutReadsBack(t *testing.T) {
	s := testBodyStore(t)
	first := [][]byte{[]byte("a"), patterned(1, 1000), []byte("ccc"), patterned(2, 700<<10), patterned(3, 700<<10), patterned(4, 17)}
	second := [][]byte{patterned(5, 3), patterned(6, 5000)}
	refs := mustPut(t, s, first...)
	refs = append(refs, mustPut(t, s, second...)...)
	for i := 1; i < len(refs); i++ {
		if refs[i].At != refs[i-1].At+uint64(refs[i-1].Len) {
			t.Fatalf("body %d at %#x, body %d at %#x of %d bytes: not back to back", i, refs[i].At, i-1, refs[i-1].At, refs[i-1].Len)
		}
	}
	s.roll()
	third := [][]byte{patterned(7, 40), []byte("last")}
	refs = append(refs, mustPut(t, s, third...)...)
	want := slices.Concat(first, second, third)
	if a, b := refFile(refs[0]), refFile(refs[len(refs)-1]); a == b {
		t.Fatalf("bodies put after a roll are in file %d, as those before", b)
	}
	wantBodyFiles(t, s, 1, 2)

	for i, ref := range refs {
		got, err := s.read(ref, []byte("prefix"))
		if err != nil {
			t.Fatalf("read body %d: %v", i, err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want[i]...)) {
			t.Fatalf("read body %d: %d bytes, not the %d put (after the buffer given)", i, len(got), len(want[i]))
		}
	}
	check := func(name string, refs []fsm.BodyRef, want [][]byte) {
		t.Helper()
		got, err := s.readAll(refs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d bodies for %d places", name, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: body %d is %d bytes %q..., want %d bytes %q...", name, i, len(got[i]), head(got[i]), len(want[i]), head(want[i]))
			}
		}
		// The bodies share a buffer: appending to one must not write over
		// the next.
		for i := range got {
			_ = append(got[i], 0xEE, 0xEE, 0xEE, 0xEE)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: body %d changed by an append to the body before it", name, i)
			}
		}
	}
	check("all in order", refs, want)
	check("the second put alone", refs[6:8], want[6:8])
	rev := slices.Clone(refs)
	slices.Reverse(rev)
	wantRev := slices.Clone(want)
	slices.Reverse(wantRev)
	check("in reverse", rev, wantRev)
	check("one twice", []fsm.BodyRef{refs[1], refs[1]}, [][]byte{want[1], want[1]})
	check("none", nil, nil)
}

func head(b []byte) []byte { return b[:min(len(b), 8)] }

// A put that does not fit in what is left of the segment starts a new file;
// one that fits exactly does not. Dropping every body of a file deletes it,
// unless it is the file being written, which goes at the next roll.
func TestBodyStore_RollsAndDeletesFiles(t *testing.T) {
	s := testBodyStore(t)
	a := mustPut(t, s, []byte("first"))[0]
	b := mustPut(t, s, make([]byte, bodySegmentBytes-10))[0]
	c := mustPut(t, s, []byte("fills"))[0] // exactly what is left
	for _, ref := range []fsm.BodyRef{a, b, c} {
		if refFile(ref) != 1 {
			t.Fatalf("body at %#x: not in the first file, which it fits in", ref.At)
		}
	}
	d := mustPut(t, s, []byte("x"))[0]
	if refFile(d) != 2 {
		t.Fatalf("a body past the segment's end went to file %d, want 2", refFile(d))
	}
	if _, off := splitBodyAt(d.At); off != 0 {
		t.Fatalf("first body of a new file at offset %d", off)
	}
	wantBodyFiles(t, s, 1, 2)

	s.drop([]fsm.BodyRef{a, b})
	wantBodyFiles(t, s, 1, 2)
	if got, err := s.read(c, nil); err != nil || string(got) != "fills" {
		t.Fatalf("body left in a file others left: %q, %v", got, err)
	}
	s.drop([]fsm.BodyRef{c})
	wantBodyFiles(t, s, 2)
	if _, err := s.read(a, nil); !errors.Is(err, errBodyGone) {
		t.Fatalf("read in a deleted file: %v, want errBodyGone", err)
	}
	s.drop([]fsm.BodyRef{a}) // again, its file gone: nothing happens
	wantBodyFiles(t, s, 2)

	// The active file stays, empty of bodies, until the next roll.
	s.drop([]fsm.BodyRef{d})
	wantBodyFiles(t, s, 2)
	e := mustPut(t, s, []byte("still file 2"))[0]
	if refFile(e) != 2 {
		t.Fatalf("put after the active file's bodies left went to file %d", refFile(e))
	}
	s.drop([]fsm.BodyRef{e})
	if next := s.roll(); next != 3 {
		t.Fatalf("roll moves on to file %d, want 3", next)
	}
	wantBodyFiles(t, s) // file 3 comes with the next put
	if f := refFile(mustPut(t, s, []byte("in 3"))[0]); f != 3 {
		t.Fatalf("put after the roll went to file %d, want 3", f)
	}
	wantBodyFiles(t, s, 3)
}

// A pinned store keeps files whose bodies all left readable, for a snapshot
// being written, until every pin is gone.
func TestBodyStore_PinKeepsDroppedFilesReadable(t *testing.T) {
	s := testBodyStore(t)
	refs := mustPut(t, s, []byte("one"), []byte("two"))
	s.roll()
	unpinA := s.pin()
	unpinB := s.pin()
	s.drop(refs)
	wantBodyFiles(t, s, 1)
	if got, err := s.read(refs[0], nil); err != nil || string(got) != "one" {
		t.Errorf("pinned, a file whose bodies left reads %q, %v; want \"one\"", got, err)
	}
	if got, err := s.readAll(refs); err != nil || len(got) != 2 || string(got[1]) != "two" {
		t.Errorf("pinned, a file whose bodies left reads all %q, %v; want [one two]", got, err)
	}
	unpinA()
	unpinA() // once only: B still pins
	wantBodyFiles(t, s, 1)
	unpinB()
	wantBodyFiles(t, s)
	if _, err := s.read(refs[1], nil); !errors.Is(err, errBodyGone) {
		t.Fatalf("read after the last unpin: %v, want errBodyGone", err)
	}
}

// dropFiles deletes the files below a number, or from it on; the store
// goes on putting bodies in a new file.
func TestBodyStore_DropFiles(t *testing.T) {
	s := testBodyStore(t)
	r1 := mustPut(t, s, []byte("in 1"))[0]
	two := s.roll()
	r2 := mustPut(t, s, []byte("in 2"))[0]
	three := s.roll()
	r3 := mustPut(t, s, []byte("in 3"))[0]
	if two != 2 || three != 3 || refFile(r1) != 1 || refFile(r2) != 2 || refFile(r3) != 3 {
		t.Fatalf("rolls gave %d and %d, bodies in files %d %d %d", two, three, refFile(r1), refFile(r2), refFile(r3))
	}
	wantBodyFiles(t, s, 1, 2, 3)

	s.dropFiles(2, true)
	wantBodyFiles(t, s, 2, 3)
	if _, err := s.read(r1, nil); !errors.Is(err, errBodyGone) {
		t.Fatalf("read below the files kept: %v, want errBodyGone", err)
	}
	s.dropFiles(3, false)
	wantBodyFiles(t, s, 2)
	if _, err := s.read(r3, nil); !errors.Is(err, errBodyGone) {
		t.Fatalf("read from the files dropped: %v, want errBodyGone", err)
	}
	if got, err := s.read(r2, nil); err != nil || string(got) != "in 2" {
		t.Fatalf("body in the file kept: %q, %v", got, err)
	}
	r4 := mustPut(t, s, []byte("in 4"))[0]
	if refFile(r4) != 4 {
		t.Fatalf("put after the active file was dropped went to file %d, want 4", refFile(r4))
	}
	if got, err := s.read(r4, nil); err != nil || string(got) != "in 4" {
		t.Fatalf("body put after dropFiles: %q, %v", got, err)
	}
	wantBodyFiles(t, s, 2, 4)
}

// Opening the store empties what a previous run left; closing it removes
// its directory.
func TestBodyStore_OpenEmptiesAndCloseRemoves(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bodies")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{bodyFileName(1), bodyFileName(7), filepath.Join("sub", "x")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("left from the last run"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	s, err := openBodyStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if got := bodyFiles(t, dir); len(got) != 0 {
		t.Fatalf("a store opened on a previous run's directory holds %v", got)
	}
	ref := mustPut(t, s, []byte("new"))[0]
	if got, err := s.read(ref, nil); err != nil || string(got) != "new" {
		t.Fatalf("read %q, %v", got, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, bodyFileName(1))); err != nil || string(data) != "new" {
		t.Fatalf("file 1 holds %q (%v), want only the body put", data, err)
	}
	s.close()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after close, stat of the directory: %v, want it gone", err)
	}
	if _, err := s.read(ref, nil); !errors.Is(err, errBodiesClosed) {
		t.Fatalf("read after close: %v, want errBodiesClosed", err)
	}
}

// variedBody is message i's body: distinct, of sizes from 8 to 400 bytes
// or so.
func variedBody(prefix string, i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("body-%s%d-", prefix, i)), i%50+1)
}

// enqueueVaried enqueues n messages prefix000... with variedBody bodies, in
// batches, and returns their bodies by id.
func enqueueVaried(t *testing.T, r *Replica, prefix string, n int, want map[string][]byte) {
	t.Helper()
	for b := 0; b < n; b += 50 {
		var batch []*fsmpb.Message
		for i := b; i < min(b+50, n); i++ {
			m := &fsmpb.Message{Id: fmt.Sprintf("%s%03d", prefix, i), Body: variedBody(prefix, i), Priority: 4}
			want[m.Id] = m.Body
			batch = append(batch, m)
		}
		if _, err := r.Enqueue(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
}

// checkBodies checks each delivery carries its own message's body, in the
// order of ids, and nothing left to read.
func checkBodies(t *testing.T, got []fsm.Delivery, ids []string, want map[string][]byte) {
	t.Helper()
	if len(got) != len(ids) {
		t.Fatalf("%d deliveries, want %d", len(got), len(ids))
	}
	for i, d := range got {
		if d.Message.Id != ids[i] {
			t.Fatalf("delivery %d is %s, want %s", i, d.Message.Id, ids[i])
		}
		if d.Body != (fsm.BodyRef{}) {
			t.Fatalf("delivery %d (%s) pushed with its body still away at %+v", i, d.Message.Id, d.Body)
		}
		if !bytes.Equal(d.Message.Body, want[d.Message.Id]) {
			t.Fatalf("delivery %d (%s) has body %q, want %q", i, d.Message.Id, d.Message.Body, want[d.Message.Id])
		}
	}
}

func liveBodies(s *bodyStore) (live int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		live += f.live
	}
	return live
}

func largestBody(want map[string][]byte) (n int64) {
	for _, b := range want {
		n = max(n, int64(len(b)))
	}
	return n
}

// With a memory of one byte, a member puts nearly every body away, pushes
// each delivery with its own body read back, and forgets the bodies acked.
func TestReplica_BodiesPutAwayAreDelivered(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := testReplica(t, dir, func(c *Config) { c.BodyMemory = 1 })
	const n = 300
	want := map[string][]byte{}
	enqueueVaried(t, r, "m", n, want)
	if got := bodyFiles(t, filepath.Join(dir, "bodies")); len(got) == 0 {
		t.Fatalf("no file under %s after %d messages over the body memory", filepath.Join(dir, "bodies"), n)
	}
	var held int64
	away := 0
	var ids []string
	r.Read(func(m *fsm.Member) {
		held = m.HeldBodyBytes()
		for i := range n {
			id := fmt.Sprintf("m%03d", i)
			ids = append(ids, id)
			if st, ok := m.Lookup(id); ok && st.Body.Away() {
				away++
				if len(st.Message.Body) != 0 || int(st.Body.Len) != len(want[id]) {
					t.Errorf("%s put away at %+v still holds %d bytes of body", id, st.Body, len(st.Message.Body))
				}
			}
		}
	})
	if held > largestBody(want) {
		t.Fatalf("the state holds %d bytes of bodies with a memory of 1 byte", held)
	}
	if away < n-1 {
		t.Fatalf("%d bodies of %d put away with a memory of 1 byte", away, n)
	}
	if live := liveBodies(r.host.fsm.bodies); live != away {
		t.Fatalf("the store counts %d bodies, the state %d put away", live, away)
	}

	if err := r.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	var c collector
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push}, n); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, fmt.Sprintf("%d deliveries", n), func() bool { return c.count() == n })
	got := c.deliveries()
	checkBodies(t, got, ids, want)

	var dids []uint64
	for _, d := range got {
		dids = append(dids, d.DeliveryID)
	}
	acked, rejected, err := r.Ack(ctx, "s1", dids)
	if err != nil || acked != n || len(rejected) != 0 {
		t.Fatalf("ack: %d acked, rejected %v, err %v", acked, rejected, err)
	}
	wait.For(t, 10*time.Second, "the bodies acked forgotten", func() bool { return liveBodies(r.host.fsm.bodies) == 0 })
	wait.For(t, 10*time.Second, "at most the active body file left", func() bool { return len(bodyFiles(t, filepath.Join(dir, "bodies"))) <= 1 })
	if st := r.Stats(); st.Pending != 0 || st.Delivered != 0 || st.Bytes != 0 {
		t.Fatalf("stats after acking everything: %+v", st)
	}
}

// A snapshot holds the bodies put away; a restart restores them, puts them
// away again, and delivers each with its own body, including deliveries
// committed before the restart and not yet pushed, and also when the member
// restarts keeping every body in memory.
func TestReplica_SnapshotAndRestartWithBodiesPutAway(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tiny := func(c *Config) { c.BodyMemory = 1 }
	want := map[string][]byte{}
	var ids []string
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("a%03d", i))
	}
	for i := range 50 {
		ids = append(ids, fmt.Sprintf("b%03d", i))
	}

	r := testReplica(t, dir, tiny)
	enqueueVaried(t, r, "a", 200, want)
	if err := r.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	var c1 collector
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c1.push}, 5); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "5 deliveries", func() bool { return c1.count() == 5 })
	r.RemoveConsumer("c1")
	checkBodies(t, c1.deliveries(), ids[:5], want)
	if err := r.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	enqueueVaried(t, r, "b", 50, want)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := bodyFiles(t, filepath.Join(dir, "bodies")); len(got) != 0 {
		t.Fatalf("body files %v left after close", got)
	}

	// Restored with a memory of 1 byte: the bodies go back to disk, those of
	// the deliveries made before the restart too.
	r2 := testReplica(t, dir, tiny)
	wait.For(t, 10*time.Second, "state restored and replayed", func() bool {
		st := r2.Stats()
		return st.Pending == 245 && st.Delivered == 5
	})
	var held int64
	var st fsm.MessageState
	r2.Read(func(m *fsm.Member) {
		held = m.HeldBodyBytes()
		st, _ = m.Lookup("a000")
	})
	if held > largestBody(want) {
		t.Fatalf("restored with a memory of 1 byte, the state holds %d bytes of bodies", held)
	}
	if !st.Body.Away() || st.Session != "s1" {
		t.Fatalf("a000, delivered before the restart: %+v; want its body put away by the restore", st)
	}
	// The deliveries made before the restart come first, unseen, to the
	// consumer they were made to.
	var c2 collector
	if err := r2.AttachConsumer(&Consumer{ID: "c1", Session: "s1", Push: c2.push}, len(ids), 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "every message delivered after the restart", func() bool { return c2.count() == len(ids) })
	checkBodies(t, c2.deliveries(), ids, want)
	// A snapshot of the restored state reads the bodies it put away.
	if err := r2.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}

	// Every body in memory, no store.
	r3 := testReplica(t, dir, func(c *Config) { c.BodyMemory = -1 })
	if r3.host.fsm.bodies != nil {
		t.Fatal("a replica with a negative body memory has a body store")
	}
	wait.For(t, 10*time.Second, "state restored", func() bool { return r3.Stats().Delivered == len(ids) })
	var c3 collector
	if err := r3.AttachConsumer(&Consumer{ID: "c1", Session: "s1", Push: c3.push}, len(ids), 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "every delivery pushed again", func() bool { return c3.count() == len(ids) })
	checkBodies(t, c3.deliveries(), ids, want)
	if _, err := os.Stat(filepath.Join(dir, "bodies")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a replica keeping every body in memory has a bodies directory: %v", err)
	}
}

// A restore that puts bodies away holds at most its memory of them (and a
// body), keeps the sizes, and, given the way to read them back, writes the
// snapshot it came from again byte for byte. It reads more records than the
// decoders may hold at once (restoreBudget chunks of restoreChunkRecords),
// so the last are read into the buffers of the first, whose bodies the
// restore keeps in memory: those must be copies.
func TestRestoreMember_PutsBodiesAway(t *testing.T) {
	const n = 6000
	if n <= restoreBudget*restoreChunkRecords {
		t.Fatalf("%d records fit in what the decoders may hold at once", n)
	}
	snap := snapshotOf(t, n)
	const memory = 5000
	const largest = 10 + 99*20 // snapshotOf's largest body
	plain, err := restoreMember(bytes.NewReader(snap), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain.TrackBodies()
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			s := testBodyStore(t)
			put := &restoreBodies{store: s, memory: memory}
			m, err := restoreMember(bytes.NewReader(snap), workers, put)
			if err != nil {
				t.Fatal(err)
			}
			if perr := put.failed.Load(); perr != nil {
				t.Fatalf("putting bodies away failed: %v", *perr)
			}
			m.TrackBodies()
			held := m.HeldBodyBytes()
			if held > memory+largest || held == 0 {
				t.Fatalf("restored holding %d bytes of bodies, want some, at most %d", held, memory+largest)
			}
			if held >= plain.HeldBodyBytes() {
				t.Fatalf("restored holding %d bytes of bodies of %d: none put away", held, plain.HeldBodyBytes())
			}
			if live := liveBodies(s); live == 0 {
				t.Fatal("no body in the store")
			}
			if got, want := m.Stats(), plain.Stats(); got != want {
				t.Fatalf("stats %+v with bodies put away, %+v without", got, want)
			}
			if st, ok := m.Lookup("m05900-099"); !ok || !st.Body.Away() || len(st.Message.Body) != 0 {
				t.Fatalf("the last message: %+v, want its body put away", st)
			}
			if _, err := m.Capture().WriteTo(io.Discard); err == nil {
				t.Fatal("an image with bodies put away and no way to read them was written")
			}
			img := m.Capture()
			img.SetBodyReader(s.read)
			var buf bytes.Buffer
			if _, err := img.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), snap) {
				t.Fatal("the state restored with bodies put away writes other bytes than its snapshot")
			}
		})
	}
}

// fsmHarness applies commands to a memberFSM built by hand.
type fsmHarness struct {
	t     *testing.T
	a     *memberFSM
	index uint64
	// fatal are the errors the memberFSM stopped the node with.
	fatal []error
}

// newFSMHarness builds a memberFSM keeping bodyMemory bytes of bodies in
// memory; a negative bodyMemory keeps them all, with no store, as Config.
func newFSMHarness(t *testing.T, bodyMemory int64) *fsmHarness {
	h := &fsmHarness{t: t}
	h.a = &memberFSM{m: fsm.NewMember(), log: slog.New(slog.DiscardHandler),
		applied: func([]string) {}, corrupt: func(_ uint64, err error) { t.Errorf("corrupt: %v", err) },
		fatal: func(err error) { h.fatal = append(h.fatal, err) }}
	if bodyMemory >= 0 {
		h.a.bodies, h.a.bodyMemory = testBodyStore(t), bodyMemory
		h.a.m.TrackBodies()
	}
	return h
}

func (h *fsmHarness) apply(body proto.Message) fsm.Result {
	h.t.Helper()
	h.index++
	data, err := fsm.Encode(fsm.MustCommand(body))
	if err != nil {
		h.t.Fatal(err)
	}
	out := h.a.ApplyBatch([]*raft.Log{{Index: h.index, Type: raft.LogCommand, Data: data}})
	res, ok := out[0].([]fsm.Result)
	if !ok || len(res) != 1 {
		h.t.Fatalf("apply %T: response %#v", body, out[0])
	}
	if res[0].Err != nil {
		h.t.Fatalf("apply %T: %v", body, res[0].Err)
	}
	return res[0]
}

// enqueueAndDeliver enqueues bodies as m0, m1... and delivers them all to
// session s; their bodies were put away first.
func (h *fsmHarness) enqueueAndDeliver(bodies ...string) []fsm.Delivery {
	h.t.Helper()
	var batch []*fsmpb.Message
	var ids []string
	for i, b := range bodies {
		batch = append(batch, &fsmpb.Message{Id: fmt.Sprintf("m%d", i), Body: []byte(b), Priority: 4})
		ids = append(ids, batch[i].Id)
	}
	h.apply(&fsmpb.Enqueue{Now: 1, Messages: batch})
	h.apply(&fsmpb.OpenSession{Session: "s", Owner: "o"})
	ds := h.apply(&fsmpb.Deliver{Session: "s", Now: 2, MessageIds: ids}).Delivered
	if len(ds) != len(bodies) {
		h.t.Fatalf("%d delivered of %d", len(ds), len(bodies))
	}
	for _, d := range ds {
		if !d.Body.Away() || len(d.Message.Body) != 0 {
			h.t.Fatalf("delivery of %s: body %q at %+v, want it put away", d.Message.Id, d.Message.Body, d.Body)
		}
	}
	return ds
}

// A delivery whose message left the state between the Deliver and the push
// is dropped, not pushed without its body; the others get their bodies.
func TestMemberFSM_DeliveriesOfMessagesThatLeftAreDropped(t *testing.T) {
	h := newFSMHarness(t, 1)
	bodies := []string{"alpha body", "beta body, longer", "gamma"}
	ds := h.enqueueAndDeliver(bodies...)
	if res := h.apply(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{ds[0].DeliveryID}}); res.Acked != 1 {
		t.Fatalf("acked %d", res.Acked)
	}

	if out := h.a.deliveriesWithBodies("", ds[:1]); len(out) != 0 {
		t.Fatalf("the delivery of a message acked since: returned %+v", out)
	}
	out := h.a.deliveriesWithBodies("", ds)
	if len(h.fatal) != 0 {
		t.Fatalf("fatal: %v", h.fatal)
	}
	if len(out) != 2 {
		t.Fatalf("%d deliveries returned, want the 2 still held", len(out))
	}
	for i, d := range out {
		if d.DeliveryID != ds[i+1].DeliveryID || d.Message.Id != ds[i+1].Message.Id {
			t.Fatalf("delivery %d is %d (%s), want %d (%s)", i, d.DeliveryID, d.Message.Id, ds[i+1].DeliveryID, ds[i+1].Message.Id)
		}
		if string(d.Message.Body) != bodies[i+1] || d.Body != (fsm.BodyRef{}) || d.DeliveryCount != 1 {
			t.Fatalf("delivery of %s: body %q at %+v, count %d; want %q read back", d.Message.Id, d.Message.Body, d.Body, d.DeliveryCount, bodies[i+1])
		}
	}
	// The state's message keeps its body away: only the copy got it.
	msg, ref, ok := h.a.m.Delivered(ds[1].DeliveryID)
	if !ok || !ref.Away() || len(msg.Body) != 0 {
		t.Fatalf("the state's delivered message: %v %+v %v; want its body still away", msg, ref, ok)
	}
	// The state's acked message's body is forgotten by the store.
	if live := liveBodies(h.a.bodies); live != 2 {
		t.Fatalf("the store counts %d bodies, want the 2 still in the state", live)
	}
}

// Bodies of messages still in the state that cannot be read stop the node:
// the deliveries are not pushed, nor returned (which would count a
// delivery against the message for a fault of this node's disk).
func TestMemberFSM_UnreadableBodiesAreFatal(t *testing.T) {
	h := newFSMHarness(t, 1)
	ds := h.enqueueAndDeliver("one", "two")
	h.a.bodies.dropFiles(0, false) // every file
	if out := h.a.deliveriesWithBodies("", ds); len(out) != 0 {
		t.Fatalf("returned %+v with their bodies unreadable", out)
	}
	if len(h.fatal) != 1 || !errors.Is(h.fatal[0], errBodyGone) {
		t.Fatalf("fatal %v, want one error: the bodies are gone", h.fatal)
	}
}

// A push racing the replica's stop is not a fault of the disk: the
// deliveries stay with their session, and the node goes on.
func TestMemberFSM_ClosedBodiesAreNotFatal(t *testing.T) {
	h := newFSMHarness(t, 1)
	ds := h.enqueueAndDeliver("one", "two")
	h.a.closeBodies()
	if out := h.a.deliveriesWithBodies("", ds); len(out) != 0 {
		t.Fatalf("returned %+v with the bodies closed", out)
	}
	if len(h.fatal) != 0 {
		t.Fatalf("fatal %v after the replica stopped", h.fatal)
	}
}

// Deliveries with their bodies in the state pass as they are.
func TestMemberFSM_HeldBodiesPassThrough(t *testing.T) {
	h := newFSMHarness(t, 1<<20)
	h.apply(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: "m", Body: []byte("held"), Priority: 4}}})
	h.apply(&fsmpb.OpenSession{Session: "s", Owner: "o"})
	ds := h.apply(&fsmpb.Deliver{Session: "s", Now: 2, MessageIds: []string{"m"}}).Delivered
	if len(ds) != 1 || ds[0].Body.Away() {
		t.Fatalf("deliveries %+v, want one with its body held", ds)
	}
	if out := h.a.deliveriesWithBodies("", ds); len(out) != 1 || string(out[0].Message.Body) != "held" {
		t.Fatalf("returned %+v", out)
	}
	if got := bodyFiles(t, h.a.bodies.dir); len(got) != 0 {
		t.Fatalf("files %v with every body within the memory", got)
	}
}

// bufferSink is a raft.SnapshotSink into memory.
type bufferSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *bufferSink) ID() string    { return "test" }
func (s *bufferSink) Close() error  { s.closed = true; return nil }
func (s *bufferSink) Cancel() error { s.cancelled = true; return nil }

// A snapshot being written reads the bodies of the state it captured, even
// when their messages leave the state, and their file is deleted, while it
// writes.
func TestMemberFSM_SnapshotReadsBodiesThatLeftWhileItWrites(t *testing.T) {
	h := newFSMHarness(t, 1)
	var batch []*fsmpb.Message
	for i := range 20 {
		batch = append(batch, &fsmpb.Message{Id: fmt.Sprintf("m%02d", i), Body: variedBody("m", i), Priority: 4})
	}
	h.apply(&fsmpb.Enqueue{Now: 1, Messages: batch})
	// The bodies' file is no longer the active one, as after a restore or
	// a full segment: it goes once its bodies leave.
	h.a.bodies.roll()
	if live := liveBodies(h.a.bodies); live != len(batch) {
		t.Fatalf("%d bodies in the store, want %d", live, len(batch))
	}
	var want bytes.Buffer
	if _, err := h.a.m.Capture().WriteTo(&bytes.Buffer{}); err == nil {
		t.Fatal("the state's image was written without its bodies put away")
	}
	img := h.a.m.Capture()
	img.SetBodyReader(h.a.bodies.read)
	if _, err := img.WriteTo(&want); err != nil {
		t.Fatal(err)
	}

	snap, err := h.a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if res := h.apply(&fsmpb.Purge{}); res.Removed != len(batch) {
		t.Fatalf("purged %d of %d", res.Removed, len(batch))
	}
	wantBodyFiles(t, h.a.bodies, 1) // pinned by the snapshot
	var sink bufferSink
	if err := snap.Persist(&sink); err != nil {
		t.Errorf("persisting a snapshot whose bodies left the state: %v", err)
	} else if !bytes.Equal(sink.Bytes(), want.Bytes()) || !sink.closed {
		t.Errorf("the snapshot persisted differs from the state captured (closed %v)", sink.closed)
	}
	snap.Release()
	wantBodyFiles(t, h.a.bodies)
}

// A member that put its bodies away persists the same snapshot as one that
// holds them all: where a body is is the replica's own affair.
func TestMemberFSM_SnapshotIsTheSameWithBodiesPutAway(t *testing.T) {
	away := newFSMHarness(t, 1)
	held := newFSMHarness(t, -1)
	var batch []*fsmpb.Message
	var largest int64
	for i := range 40 {
		batch = append(batch, &fsmpb.Message{Id: fmt.Sprintf("m%02d", i), Body: variedBody("m", i), Priority: uint32(i % 10)})
		largest = max(largest, int64(len(batch[i].Body)))
	}
	for _, h := range []*fsmHarness{away, held} {
		h.apply(&fsmpb.Enqueue{Now: 1, Messages: batch})
		h.apply(&fsmpb.OpenSession{Session: "s", Owner: "o"})
		ds := h.apply(&fsmpb.Deliver{Session: "s", Now: 2, MessageIds: []string{"m03", "m05", "m07"}}).Delivered
		h.apply(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{ds[0].DeliveryID}})
	}
	if away.a.m.HeldBodyBytes() > largest || liveBodies(away.a.bodies) == 0 {
		t.Fatalf("holding %d bytes of bodies with a memory of 1 byte", away.a.m.HeldBodyBytes())
	}
	persist := func(h *fsmHarness) []byte {
		t.Helper()
		snap, err := h.a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Release()
		var sink bufferSink
		if err := snap.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		return sink.Bytes()
	}
	if a, b := persist(away), persist(held); !bytes.Equal(a, b) {
		t.Fatalf("snapshot of %d bytes with bodies put away, %d with every body held", len(a), len(b))
	}
}

// A put that fails part way keeps none of its bodies: those it wrote before
// the failure are forgotten, so their file can go once the bodies before
// them leave.
func TestBodyStore_FailedPutKeepsNothing(t *testing.T) {
	s := testBodyStore(t)
	kept := mustPut(t, s, []byte("kept"))
	// The next file cannot be created: the first body fills file 1 past a
	// flush, the second needs file 2.
	if err := os.RemoveAll(s.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.put([][]byte{make([]byte, bodySegmentBytes-100), make([]byte, 200)}); err == nil {
		t.Fatal("put into a store whose directory is gone succeeded")
	}
	if live := liveBodies(s); live != 1 {
		t.Fatalf("the store counts %d bodies after a failed put, want the 1 before it", live)
	}
	if got, err := s.read(kept[0], nil); err != nil || string(got) != "kept" {
		t.Fatalf("the body put before: %q, %v", got, err)
	}
}
