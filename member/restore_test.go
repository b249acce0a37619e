package member

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// snapshotOf writes a state of n messages spread over several chunks: most
// pending, some delivered to a session, some with properties and an
// expiration.
func snapshotOf(t *testing.T, n int) []byte {
	t.Helper()
	m := fsm.NewMember()
	var index uint64
	apply := func(body proto.Message) {
		t.Helper()
		index++
		data, err := fsm.Encode(fsm.MustCommand(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Apply(index, data)
		if err != nil || res[0].Err != nil {
			t.Fatalf("apply %T: %v %v", body, err, res[0].Err)
		}
	}
	apply(&fsmpb.OpenSession{Session: "s", Owner: "o"})
	for i := 0; i < n; i += 100 {
		batch := msgs(min(100, n-i), fmt.Sprintf("m%05d-", i))
		for j, x := range batch {
			x.Body = bytes.Repeat([]byte{byte(j)}, 10+j*20)
			if j%7 == 0 {
				x.Properties = map[string]string{"k": fmt.Sprint(j)}
				x.Expiration = int64(1e18 + j)
			}
		}
		apply(&fsmpb.Enqueue{Now: int64(i), Messages: batch})
		if i%300 == 0 {
			apply(&fsmpb.Deliver{Session: "s", Now: int64(i), MessageIds: []string{batch[0].Id, batch[1].Id}})
		}
	}
	var buf bytes.Buffer
	if _, err := m.Capture().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Decoding a snapshot's records on several goroutines restores the same
// state as decoding them one after the other: both write the same bytes.
func TestRestoreMember_WorkersRestoreTheSameState(t *testing.T) {
	snap := snapshotOf(t, 3000)
	if !bytes.Equal(rewrite(t, snap, 1), snap) {
		t.Fatal("a state restored and written again differs from the snapshot it came from")
	}
	for _, workers := range []int{2, 3, 8} {
		if !bytes.Equal(rewrite(t, snap, workers), snap) {
			t.Errorf("restored with %d workers, the state writes other bytes than the snapshot", workers)
		}
	}
}

func rewrite(t *testing.T, snap []byte, workers int) []byte {
	t.Helper()
	m, err := restoreMember(bytes.NewReader(snap), workers, nil)
	if err != nil {
		t.Fatalf("restore with %d workers: %v", workers, err)
	}
	var buf bytes.Buffer
	if _, err := m.Capture().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The decoders hand the messages back in the order they were written: by
// sequence.
func TestRestoreMember_DecodersKeepTheOrder(t *testing.T) {
	snap, err := fsm.OpenMemberSnapshot(bytes.NewReader(snapshotOf(t, 3000)))
	if err != nil {
		t.Fatal(err)
	}
	d := decodeRecords(snap, 3, nil)
	defer d.close()
	var last uint64
	for i := range 3000 {
		sm, _, err := d.next()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if sm.Seq <= last {
			t.Fatalf("message %d has sequence %d, after %d", i, sm.Seq, last)
		}
		last = sm.Seq
	}
}

// A snapshot cut short, damaged in its middle, or whose state does not
// hold together fails as corrupt, with the same error whether its records
// are decoded on several goroutines or on one.
func TestRestoreMember_DamagedSnapshotFailsAlike(t *testing.T) {
	snap := snapshotOf(t, 3000)
	damaged := bytes.Clone(snap)
	// The end of a record in the middle of a chunk: an invalid field tag.
	at := bytes.Index(damaged, []byte("m01500-"))
	for i := range 8 {
		damaged[at-12+i] = 0xff
	}
	for name, data := range map[string][]byte{
		"cut short":       snap[:len(snap)/2],
		"damaged":         damaged,
		"session missing": withoutSessions(t, snap),
	} {
		_, seqErr := restoreMember(bytes.NewReader(data), 1, nil)
		_, parErr := restoreMember(bytes.NewReader(data), 2, nil)
		if !errors.Is(seqErr, fsm.ErrCorrupt) || !errors.Is(parErr, fsm.ErrCorrupt) {
			t.Errorf("%s: errors %v and %v; want both corrupt", name, seqErr, parErr)
			continue
		}
		if seqErr.Error() != parErr.Error() {
			t.Errorf("%s: one goroutine says %q, several %q", name, seqErr, parErr)
		}
	}
}

// withoutSessions is snap with no session in its header, while some of its
// messages are delivered to one: the state fails to build part way through
// the records, with the reader and the decoders still at work.
func withoutSessions(t *testing.T, snap []byte) []byte {
	t.Helper()
	size, n := protowire.ConsumeVarint(snap)
	if n < 0 {
		t.Fatal("no header length")
	}
	var h fsmpb.MemberSnapshot
	if err := proto.Unmarshal(snap[n:n+int(size)], &h); err != nil {
		t.Fatal(err)
	}
	h.Sessions = nil
	header, err := proto.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	out := protowire.AppendVarint(nil, uint64(len(header)))
	return append(append(out, header...), snap[n+int(size):]...)
}
