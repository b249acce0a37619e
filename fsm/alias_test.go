package fsm_test

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// aliasSeeds are Enqueue payloads of every shape the aliasing decoder
// treats apart: the common one, a body repeated, a body of the wrong wire
// type, unknown fields, properties and broken bytes.
func aliasSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	marshal := func(e *fsmpb.Enqueue) []byte {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	full := &fsmpb.Message{Id: "ID:1", Body: []byte("hello"), Properties: map[string]string{"k": "v", "a": "b"}, Priority: 7,
		Expiration: 99, DedupId: "d", EnqueuedAt: 5, DeliveryCount: 2, Redelivered: true}
	plain := marshal(&fsmpb.Enqueue{Now: 3, Messages: []*fsmpb.Message{full, {Id: "ID:2", Body: []byte("x")}, {Id: "ID:3"}}})
	msgBytes := func(fields ...[]byte) []byte {
		var m []byte
		for _, f := range fields {
			m = append(m, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), m)
	}
	id := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "ID:9")
	body := func(s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), s)
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 77, protowire.VarintType), 1)
	return map[string][]byte{
		"common":                       plain,
		"empty":                        nil,
		"empty body":                   marshal(&fsmpb.Enqueue{Messages: []*fsmpb.Message{{Id: "ID:4", Body: []byte{}}}}),
		"body first":                   msgBytes(body("first"), id),
		"body twice, the last wins":    msgBytes(id, body("one"), body("two")),
		"body as a varint":             msgBytes(id, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 5)),
		"unknown fields around a body": msgBytes(unknown, id, body("b"), unknown),
		"unknown field in the enqueue": append(plain, unknown...),
		"properties after the body":    msgBytes(id, body("b"), protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte("\x0a\x01k\x12\x01v"))),
		"invalid UTF-8 id":             msgBytes(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff"), body("b")),
		"invalid UTF-8 after the body": msgBytes(id, body("b"), protowire.AppendString(protowire.AppendTag(nil, 6, protowire.BytesType), "\xff")),
		"truncated message":            msgBytes(id, body("body"))[:8],
		"truncated body":               append(protowire.AppendTag(nil, 2, protowire.BytesType), 9, 0x12, 5, 'a'),
		"bad tag":                      {0xff, 0xff, 0xff},
	}
}

// checkAliasingDecode holds the aliasing decoder to proto.Unmarshal: the
// same message or an error from both. (That bodies alias the payload is
// TestDecodeEnqueueAliasing_BodiesAreSlicesOfThePayload's.)
func checkAliasingDecode(t *testing.T, payload []byte) {
	t.Helper()
	got, err := fsm.DecodeEnqueueAliasing(payload)
	var want fsmpb.Enqueue
	wantErr := proto.Unmarshal(payload, &want)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("aliasing decoder error %v, proto.Unmarshal error %v: they disagree", err, wantErr)
	}
	if err != nil {
		return
	}
	if !proto.Equal(got, &want) {
		t.Fatalf("aliasing decoder = %v\nproto.Unmarshal  = %v", got, &want)
	}
}

// within reports whether b's bytes lie in buf's.
func within(b, buf []byte) bool {
	if len(b) == 0 || len(buf) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(buf))
}

func TestDecodeEnqueueAliasing_MatchesProtoUnmarshal(t *testing.T) {
	for name, payload := range aliasSeeds(t) {
		t.Run(name, func(t *testing.T) { checkAliasingDecode(t, payload) })
	}
}

func TestDecodeEnqueueAliasing_BodiesAreSlicesOfThePayload(t *testing.T) {
	seeds := aliasSeeds(t)
	for _, name := range []string{"common", "body first", "unknown fields around a body", "properties after the body"} {
		e, err := fsm.DecodeEnqueueAliasing(seeds[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, m := range e.Messages {
			if len(m.Body) > 0 && !within(m.Body, seeds[name]) {
				t.Errorf("%s: the body of %s was copied", name, m.Id)
			}
			if cap(m.Body) != len(m.Body) {
				t.Errorf("%s: the body of %s can be appended into the payload's next bytes (cap %d, len %d)", name, m.Id, cap(m.Body), len(m.Body))
			}
		}
	}
}

// FuzzDecodeEnqueueAliasing: the aliasing decoder decodes what
// proto.Unmarshal decodes, the same way, and refuses what it refuses.
func FuzzDecodeEnqueueAliasing(f *testing.F) {
	for _, p := range aliasSeeds(f) {
		f.Add(p)
	}
	f.Fuzz(checkAliasingDecode)
}

// A member that tracks its bodies keeps an Enqueue's bodies as slices of
// its entry only until PutBodiesAway: what it keeps in memory then is its
// own, so the entry's bytes may change or go without changing a message.
func TestMember_KeepsNoEntryAfterPuttingBodiesAway(t *testing.T) {
	f := newMember(t)
	f.m.TrackBodies()
	f.open("s")
	var batch []*fsmpb.Message
	for i := range 6 {
		batch = append(batch, msg(fmt.Sprintf("m%d", i), body(fmt.Sprintf("body-%d", i))))
	}
	data := entry(t, &fsmpb.Enqueue{Now: 1, Messages: batch}, &fsmpb.Deliver{Session: "s", Now: 1, MessageIds: []string{"m0"}})
	f.idx++
	res, err := f.m.Apply(f.idx, data)
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("apply: %v %+v", err, res)
	}
	if st := f.lookup("m3"); !within(st.Message.Body, data) {
		t.Fatal("m3's body was copied out of its entry: the member tracks its bodies, so it should alias them until PutBodiesAway")
	}
	// A delivery may wait in a consumer's buffers for long: its body is
	// its own from the start.
	delivered := res[1].Delivered[0].Message
	if delivered.Id != "m0" || within(delivered.Body, data) {
		t.Fatalf("delivery of %s aliases its entry", delivered.Id)
	}
	// Keep 3 bodies' worth: m0 (delivered), m1, m2 stay, m3..m5 go away.
	shelf := newBodyShelf(t)
	if err := f.m.PutBodiesAway(18, shelf.put); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 0xAA
	}
	if string(delivered.Body) != "body-0" {
		t.Errorf("delivery of m0 has body %q after its entry changed", delivered.Body)
	}
	for i := range 6 {
		id := fmt.Sprintf("m%d", i)
		st := f.lookup(id)
		b := st.Message.Body
		if st.Body.Away() {
			if b, _ = shelf.read(st.Body, nil); i < 3 {
				t.Errorf("%s: put away, want it kept", id)
			}
		}
		if want := fmt.Sprintf("body-%d", i); string(b) != want {
			t.Errorf("%s: body %q after its entry changed, want %q", id, b, want)
		}
	}
	// And a member restored from its snapshot holds the same.
	img := f.m.Capture()
	img.SetBodyReader(shelf.read)
	var snap bytes.Buffer
	if _, err := img.WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	r, err := fsm.RestoreMember(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := r.Lookup("m4"); !ok || string(st.Message.Body) != "body-4" {
		t.Fatalf("restored m4: %v %q", ok, st.Message.GetBody())
	}
}
