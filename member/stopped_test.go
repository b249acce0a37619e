package member

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// An entry the state machine cannot apply stops it: corrupt is told once,
// with the entry's index; the entries after it, in the same batch or
// later, change nothing and are answered with an unknown outcome (the
// other replicas apply them: a command in one must not be sent again as
// if it had not been); and it refuses to
// snapshot, since its state is no longer the group's.
func TestMemberFSM_UnappliableEntryStopsTheReplica(t *testing.T) {
	var told []uint64
	a := &memberFSM{m: fsm.NewMember(), log: slog.New(slog.DiscardHandler), applied: func([]string) {},
		corrupt: func(index uint64, err error) {
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Errorf("corrupt told %v; want an error wrapping fsm.ErrCorrupt", err)
			}
			told = append(told, index)
		},
		fatal: func(err error) { t.Errorf("fatal: %v", err) }}
	enqueue := func(id string) []byte {
		data, err := fsm.Encode(fsm.MustCommand(&fsmpb.Enqueue{Now: 1, Messages: []*fsmpb.Message{{Id: id, Body: []byte(id)}}}))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	out := a.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: enqueue("m1")},
		{Index: 2, Type: raft.LogCommand, Data: []byte{0xff, 0xff, 0xff}},
		{Index: 3, Type: raft.LogCommand, Data: enqueue("m3")},
	})
	if _, ok := out[0].([]fsm.Result); !ok {
		t.Fatalf("entry 1: %#v; want it applied", out[0])
	}
	for i := 1; i < 3; i++ {
		if err, _ := out[i].(error); !errors.Is(err, destination.ErrOutcomeUnknown) || errors.Is(err, ErrStopped) {
			t.Fatalf("entry %d: %#v; want destination.ErrOutcomeUnknown, not ErrStopped (which the front-end sends elsewhere)", i+1, out[i])
		}
	}
	later := a.ApplyBatch([]*raft.Log{{Index: 4, Type: raft.LogCommand, Data: enqueue("m4")}})
	if err, _ := later[0].(error); !errors.Is(err, destination.ErrOutcomeUnknown) {
		t.Fatalf("entry 4, after the stop: %#v; want destination.ErrOutcomeUnknown", later[0])
	}
	if len(told) != 1 || told[0] != 2 {
		t.Fatalf("corrupt told %v; want once, entry 2", told)
	}
	if n := a.m.Applied(); n != 1 {
		t.Fatalf("state applied up to entry %d; want 1 (only the entry before the bad one)", n)
	}
	if _, err := a.Snapshot(); !errors.Is(err, ErrStopped) {
		t.Fatalf("snapshot of a stopped replica: %v; want ErrStopped", err)
	}
}
