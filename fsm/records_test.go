package fsm

import (
	"fmt"
	"hash/maphash"
	"testing"
	"unsafe"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

func TestRecord_Is128Bytes(t *testing.T) {
	// maxInlineID is chosen for this size; a field added to record should
	// take its room from the id, or be a decision.
	if n := unsafe.Sizeof(record{}); n != 128 {
		t.Fatalf("a record is %d bytes, want 128", n)
	}
}

// mustApply applies commands at the next index; none may be rejected.
func mustApply(t *testing.T, m *Member, cmds ...*fsmpb.Command) []Result {
	t.Helper()
	data, err := Encode(cmds...)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := m.Apply(m.Applied()+1, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return rs
}

func TestSlab_DrainedMemberGivesBackItsChunks(t *testing.T) {
	m := NewMember()
	mustApply(t, m, MustCommand(&fsmpb.OpenSession{Session: "s", Owner: "fe"}))
	const n = 3*slabChunk + 10
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("ID:%032d", i)
		mustApply(t, m, MustCommand(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: ids[i], Priority: 4}}}))
	}
	if len(m.records.chunks) != 4 || m.full(m.find(ids[n-1])) != nil {
		t.Fatalf("%d messages: %d chunks, want 4, each message in its record alone", n, len(m.records.chunks))
	}
	r := mustApply(t, m, MustCommand(&fsmpb.Deliver{Session: "s", Now: 1, MessageIds: ids}))
	if len(r[0].Delivered) != n {
		t.Fatalf("delivered %d of %d", len(r[0].Delivered), n)
	}
	mustApply(t, m, MustCommand(&fsmpb.Ack{Session: "s", UpTo: r[0].Delivered[n-1].DeliveryID}))
	if m.records.live != 0 || len(m.records.chunks) != 1 || len(m.records.chunks[0]) != firstChunk || len(m.ids.byHash) != 0 {
		t.Fatalf("drained: %d live, %d chunks, first of %d, %d ids", m.records.live, len(m.records.chunks), len(m.records.chunks[0]), len(m.ids.byHash))
	}
	// The slots are reused from the start.
	mustApply(t, m, MustCommand(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: "again", Priority: 4}}}))
	if got := m.find("again"); got != 1 || m.idOf(got) != "again" {
		t.Fatalf("stored again in slot %d", got)
	}
}

func TestIDIndex_IDsWhoseHashIsTaken(t *testing.T) {
	m := NewMember()
	store := func(id string) ref {
		mustApply(t, m, MustCommand(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: id, Priority: 4}}}))
		return m.find(id)
	}
	a := store("a")
	// No two ids are known to share a 64-bit hash: make "b"'s slot taken
	// by "a", as a collision would.
	hb := maphash.String(m.ids.seed, "b")
	m.ids.byHash[hb] = a
	b := store("b")
	if b == 0 || b == a || m.ids.collided["b"] != b {
		t.Fatalf("b stored in %d, a in %d, collided %v", b, a, m.ids.collided)
	}
	if m.find("a") != a || m.find("b") != b || m.find("c") != 0 {
		t.Fatalf("find: a %d, b %d, c %d", m.find("a"), m.find("b"), m.find("c"))
	}
	mustApply(t, m, MustCommand(&fsmpb.Purge{}))
	if len(m.ids.collided) != 0 || m.find("b") != 0 || m.find("a") != 0 {
		t.Fatalf("after purge: collided %v, a %d, b %d", m.ids.collided, m.find("a"), m.find("b"))
	}
}
