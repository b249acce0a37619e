package fsm

import (
	"fmt"
	"reflect"
	"slices"
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
	mustApply(t, m, MustCommand(&fsmpb.Ack{Session: "s", UpTo: r[0].Delivered[n-2].DeliveryID}))
	if len(m.ids.byHash) != 1 {
		t.Fatalf("one message left, %d ids indexed", len(m.ids.byHash))
	}
	before := reflect.ValueOf(m.ids.byHash).UnsafePointer()
	mustApply(t, m, MustCommand(&fsmpb.Ack{Session: "s", UpTo: r[0].Delivered[n-1].DeliveryID}))
	if reflect.ValueOf(m.ids.byHash).UnsafePointer() == before {
		t.Fatal("the drained member kept the id map it grew")
	}
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
	m.ids.mask = 0 // every id hashes to 0: the first holds the hash, the others collide
	store := func(id string) ref {
		mustApply(t, m, MustCommand(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: id, Priority: 4, Expiration: 10}}}))
		return m.find(id)
	}
	drop := func(id string) {
		if r := mustApply(t, m, MustCommand(&fsmpb.Expire{Now: 10, MessageIds: []string{id}})); r[0].Removed != 1 {
			t.Fatalf("expire %s removed %d", id, r[0].Removed)
		}
	}
	want := map[string]ref{}
	check := func(when string) {
		t.Helper()
		for id, r := range want {
			if got := m.find(id); got != r {
				t.Fatalf("%s: find(%s) = %d, want %d", when, id, got, r)
			}
		}
		if m.find("never") != 0 {
			t.Fatalf("%s: found an id never stored", when)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		want[id] = store(id)
	}
	if len(m.ids.byHash) != 1 || len(m.ids.collided) != 2 {
		t.Fatalf("%d ids by hash, %d collided; want 1 and 2", len(m.ids.byHash), len(m.ids.collided))
	}
	check("stored")
	drop("a") // the one holding the hash
	delete(want, "a")
	want["d"] = store("d") // takes the free hash
	check("a gone, d stored")
	drop("c") // a collided one
	delete(want, "c")
	check("c gone")
	drop("d")
	delete(want, "d")
	check("d gone")
	drop("b")
	if len(m.ids.byHash) != 0 || len(m.ids.collided) != 0 {
		t.Fatalf("all gone: %v by hash, %v collided", m.ids.byHash, m.ids.collided)
	}
}

// A restore indexes its records in a pass of their own: ids whose hash is
// taken go to the second map, and an id seen again is found wherever the
// first one went.
func TestIDIndex_RestoredRecordsIndexedAfterwards(t *testing.T) {
	for _, ids := range [][]string{{"a", "b", "c"}, {"a", "b", "a"}, {"a", "b", "c", "b"}} {
		m := NewMember()
		m.ids.mask = 0 // every id hashes to 0
		var made []ref
		for i, id := range ids {
			r, _ := m.newUnindexedRecord(&fsmpb.Message{Id: id, Priority: 4}, uint64(i+1), BodyRef{})
			made = append(made, r)
		}
		dup, ok := m.indexRestored(made)
		if last := len(ids) - 1; slices.Index(ids, ids[last]) != last {
			if ok || dup != made[last] {
				t.Errorf("%v: indexRestored = %d, %v; want the last record refused", ids, dup, ok)
			}
			continue
		}
		if !ok {
			t.Fatalf("%v: record %d refused as a duplicate", ids, dup)
		}
		for i, id := range ids {
			if got := m.find(id); got != made[i] {
				t.Errorf("%v: find(%s) = %d, want %d", ids, id, got, made[i])
			}
		}
	}
}

func TestSlab_FreedSlotLetsItsMessageGo(t *testing.T) {
	m := NewMember()
	mustApply(t, m, MustCommand(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: "a", Body: []byte("x"), Priority: 4, Expiration: 10}, {Id: "b", Priority: 4}}}))
	a := m.find("a")
	if m.full(a) == nil {
		t.Fatal("a message with a body in memory is not kept beside its record")
	}
	mustApply(t, m, MustCommand(&fsmpb.Expire{Now: 10, MessageIds: []string{"a"}}))
	if *m.records.msgAt(a) != nil {
		t.Fatal("the freed slot still points to its message")
	}
}
