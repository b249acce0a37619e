package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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
	property := func(entry string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), entry)
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
		"property without a key, then one key twice": msgBytes(id, body("b"), property("\x12\x01v"), property("\x0a\x01k\x12\x01v"), property("\x0a\x01k\x12\x01w")),
		"property with an unknown field":             msgBytes(id, property("\x0a\x01k\x18\x01\x12\x01v"), body("b")),
		"property with invalid UTF-8":                msgBytes(id, body("b"), property("\x0a\x01\xff")),
		"id as a varint":                             msgBytes(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5), body("b")),
		"priority as bytes":                          msgBytes(id, body("b"), protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), []byte("x"))),
		"group field":                                msgBytes(id, body("b"), protowire.AppendTag(nil, 12, protowire.StartGroupType), protowire.AppendTag(nil, 12, protowire.EndGroupType)),
		"invalid UTF-8 id":                           msgBytes(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff"), body("b")),
		"invalid UTF-8 after the body":               msgBytes(id, body("b"), protowire.AppendString(protowire.AppendTag(nil, 6, protowire.BytesType), "\xff")),
		"truncated message":                          msgBytes(id, body("body"))[:8],
		"truncated body":                             append(protowire.AppendTag(nil, 2, protowire.BytesType), 9, 0x12, 5, 'a'),
		"bad tag":                                    {0xff, 0xff, 0xff},
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
	for _, name := range []string{"common", "body first", "body twice, the last wins", "properties after the body"} {
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

// storedSeeds are snapshot message records of every shape
// DecodeStoredMessageAliasing treats apart.
func storedSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	full := &fsmpb.StoredMessage{
		Message: &fsmpb.Message{Id: "ID:1", Body: []byte("hello"), Properties: map[string]string{"k": "v"}, Priority: 7,
			Expiration: 99, DedupId: "d", EnqueuedAt: 5, DeliveryCount: 2, Redelivered: true},
		Seq: 9, Redelivered: true, DeliveryCount: 3, DeliveryId: 12, Session: "s", AvailableAt: 4, Dead: true, MovingTo: "q#1",
	}
	rec, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	message := func(body string) []byte {
		return append(field(1, []byte("ID:2")), field(2, []byte(body))...)
	}
	seq := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 7)
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 77, protowire.VarintType), 1)
	return map[string][]byte{
		"every field":                     rec,
		"message last":                    slices.Concat(seq, field(1, message("b"))),
		"message twice, merged":           slices.Concat(field(1, message("one")), seq, field(1, field(6, []byte("dedup")))),
		"message as a varint":             protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3),
		"no message":                      seq,
		"no body":                         field(1, field(1, []byte("ID:3"))),
		"unknown fields around":           slices.Concat(unknown, field(1, message("b")), unknown),
		"invalid UTF-8 session":           slices.Concat(field(1, message("b")), field(6, []byte("\xff"))),
		"invalid UTF-8 before the field":  slices.Concat(field(9, []byte("\xff")), field(1, message("b"))),
		"priority too high":               field(1, append(message("b"), protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 99)...)),
		"seq as bytes":                    slices.Concat(field(1, message("b")), field(2, []byte("x"))),
		"session as a varint":             slices.Concat(field(1, message("b")), protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 1)),
		"an unknown field in the message": field(1, slices.Concat(message("b"), unknown)),
		"truncated":                       rec[:len(rec)-3],
		"bad tag":                         {0xff, 0xff, 0xff},
	}
}

// checkStoredDecode holds DecodeStoredMessage and
// DecodeStoredMessageAliasing to proto.Unmarshal and ValidateMessage: the
// same message from all three, or an error wrapping ErrCorrupt from both
// decoders where proto.Unmarshal or ValidateMessage refuses the record.
// DecodeStoredMessage's body must not share rec's bytes.
func checkStoredDecode(t *testing.T, rec []byte) {
	t.Helper()
	want := new(fsmpb.StoredMessage)
	wantErr := proto.Unmarshal(rec, want)
	if wantErr == nil {
		wantErr = fsm.ValidateMessage(want.Message)
	}
	decoders := []struct {
		name   string
		decode func([]byte) (*fsmpb.StoredMessage, error)
	}{{"DecodeStoredMessage", fsm.DecodeStoredMessage}, {"DecodeStoredMessageAliasing", fsm.DecodeStoredMessageAliasing}}
	for _, d := range decoders {
		got, err := d.decode(rec)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%s error %v, proto.Unmarshal and ValidateMessage %v: they disagree", d.name, err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, fsm.ErrCorrupt) || got != nil {
				t.Fatalf("%s = %v, %v; want nil and an error wrapping ErrCorrupt", d.name, got, err)
			}
			continue
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%s = %v\nproto.Unmarshal = %v", d.name, got, want)
		}
	}
	if sm, err := fsm.DecodeStoredMessage(rec); err == nil && len(sm.Message.GetBody()) > 0 && within(sm.Message.Body, rec) {
		t.Fatalf("DecodeStoredMessage's body %q shares the record's bytes", sm.Message.Body)
	}
}

func TestDecodeStoredMessage_MatchesProtoUnmarshal(t *testing.T) {
	for name, rec := range storedSeeds(t) {
		t.Run(name, func(t *testing.T) { checkStoredDecode(t, rec) })
	}
}

func TestDecodeStoredMessageAliasing_BodyIsASliceOfTheRecord(t *testing.T) {
	seeds := storedSeeds(t)
	for _, name := range []string{"every field", "message last", "message twice, merged"} {
		sm, err := fsm.DecodeStoredMessageAliasing(seeds[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := sm.Message.Body; !within(b, seeds[name]) || cap(b) != len(b) {
			t.Errorf("%s: body %q is not a slice of the record ending with the body", name, b)
		}
	}
	// A message field twice is one message with the fields of both.
	sm, err := fsm.DecodeStoredMessageAliasing(seeds["message twice, merged"])
	if err != nil || string(sm.Message.Body) != "one" || sm.Message.DedupId != "dedup" {
		t.Fatalf("merged message: %v, %v", sm, err)
	}
}

// FuzzDecodeStoredMessage: both decoders of snapshot records decode what
// proto.Unmarshal decodes, the same way, and refuse what it refuses.
func FuzzDecodeStoredMessage(f *testing.F) {
	for _, rec := range storedSeeds(f) {
		f.Add(rec)
	}
	f.Fuzz(checkStoredDecode)
}

// The hand decoder knows every field of a snapshot record: a field added to
// Message or StoredMessage must be added to it too, or every record that
// carries it goes through protobuf's reflection.
func TestDecodeStoredByHand_KnowsEveryField(t *testing.T) {
	sm := &fsmpb.StoredMessage{Message: &fsmpb.Message{}}
	setEveryField(t, sm.ProtoReflect())
	setEveryField(t, sm.Message.ProtoReflect())
	rec, err := proto.Marshal(sm)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := fsm.DecodeStoredByHand(rec)
	if !ok {
		t.Fatalf("a record with every field set is left to protobuf: %v", sm)
	}
	if !proto.Equal(got, sm) {
		t.Fatalf("decoded by hand: %v\nwant %v", got, sm)
	}
}

// setEveryField gives each scalar and map field of m a value other than
// its zero; message fields are the caller's to set first. A field of
// another kind fails the test, which then needs to learn it, as the hand
// decoder does.
func setEveryField(t *testing.T, m protoreflect.Message) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		var v protoreflect.Value
		switch {
		case fd.IsList():
			t.Fatalf("%s is repeated, which this test cannot set", fd.FullName())
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			pv := &fsmpb.PropertyValue{Value: &fsmpb.PropertyValue_Float{Float: 2.5}}
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfMessage(pv.ProtoReflect()))
			continue
		case fd.IsMap():
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
			continue
		case fd.Kind() == protoreflect.MessageKind:
			if !m.Has(fd) {
				t.Fatalf("%s is a message field the test does not set", fd.FullName())
			}
			continue
		case fd.Kind() == protoreflect.StringKind:
			v = protoreflect.ValueOfString(string(fd.Name()))
		case fd.Kind() == protoreflect.BytesKind:
			v = protoreflect.ValueOfBytes([]byte(fd.Name()))
		case fd.Kind() == protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case fd.Kind() == protoreflect.Uint32Kind:
			v = protoreflect.ValueOfUint32(uint32(fd.Number()))
		case fd.Kind() == protoreflect.Uint64Kind:
			v = protoreflect.ValueOfUint64(uint64(fd.Number()))
		case fd.Kind() == protoreflect.Int64Kind:
			v = protoreflect.ValueOfInt64(int64(fd.Number()))
		default:
			t.Fatalf("%s is of kind %v, which this test cannot set", fd.FullName(), fd.Kind())
		}
		m.Set(fd, v)
	}
}
