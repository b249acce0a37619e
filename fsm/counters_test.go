package fsm_test

import (
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member counts what it did: each message stored (a duplicate is not),
// delivered (again, marked redelivered), acknowledged (by a session or a
// transaction), expired and moved out; a snapshot keeps the counts, so a
// restored replica goes on from them.
func TestCounters_CountEveryWayAMessageGoes(t *testing.T) {
	f := newMember(t)
	f.enqueue(1, msg("a", dedup("da")), msg("b"), msg("c", expires(50)), msg("d"))
	f.enqueue(2, msg("a2", dedup("da")))
	f.open("s")
	ds := f.deliver("s", 3, "a", "b", "c")
	f.ok(&fsmpb.Ack{Session: "s", DeliveryIds: []uint64{ds[0].DeliveryID}})
	f.ok(&fsmpb.Recover{Session: "s", Now: 4})
	again := f.deliver("s", 5, "b")
	f.ok(&fsmpb.Expire{Now: 60, MessageIds: []string{"c"}})
	f.ok(&fsmpb.Move{Target: "q#1", MessageIds: []string{"d"}})
	f.ok(&fsmpb.Moved{MessageIds: []string{"d"}})
	f.ok(&fsmpb.TxPrepare{Tx: "t1", Primary: "q#0", Session: "s", Now: 6, OnePhase: true,
		Messages: []*fsmpb.Message{msg("e")}, DeliveryIds: []uint64{again[0].DeliveryID}})

	want := fsm.Counters{Sent: 5, Delivered: 4, Redelivered: 1, Acknowledged: 2, Expired: 1, Moved: 1}
	if got := f.m.Counters(); got != want {
		t.Fatalf("Counters = %+v, want %+v", got, want)
	}
	if got := restore(t, snapshotBytes(t, f.m)).Counters(); got != want {
		t.Fatalf("restored Counters = %+v, want %+v", got, want)
	}
}
