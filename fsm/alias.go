package fsm

import (
	"bytes"
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member that tracks its bodies decodes an Enqueue with each body a slice
// of the entry, and owns a body (ownBody) only when it keeps it past the
// batch: fsm/DESIGN.md says why and what it saves.

// decodeEnqueueAliasing decodes an Enqueue as proto.Unmarshal does, except
// that each message's body aliases payload.
func decodeEnqueueAliasing(payload []byte) (*fsmpb.Enqueue, error) {
	e := new(fsmpb.Enqueue)
	err := eachField(payload, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			e.Now = int64(v)
		case num == 2 && typ == protowire.BytesType:
			msg, err := decodeMessageAliasing(b)
			if err != nil {
				return err
			}
			e.Messages = append(e.Messages, msg)
		default:
			return errNotPlain
		}
		return nil
	})
	if err != nil {
		// Broken bytes, or fields of a newer version: protobuf decides
		// what they make, or which error.
		return unmarshalCopying(payload)
	}
	return e, nil
}

// errNotPlain: an Enqueue with fields decodeEnqueueAliasing leaves to protobuf.
var errNotPlain = errors.New("not a plain enqueue")

func unmarshalCopying(payload []byte) (*fsmpb.Enqueue, error) {
	e := new(fsmpb.Enqueue)
	if err := proto.Unmarshal(payload, e); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeMessageAliasing decodes a message whose body field appears once
// by unmarshalling the bytes on either side of that field, which protobuf
// defines as unmarshalling the whole, and taking the body as a slice of b.
// Any other message is unmarshalled whole.
func decodeMessageAliasing(b []byte) (*fsmpb.Message, error) {
	msg := new(fsmpb.Message)
	start, end, body, ok := oneField(b, 2)
	if !ok {
		return msg, proto.Unmarshal(b, msg)
	}
	if err := unmarshalAround(b, start, end, msg); err != nil {
		return nil, err
	}
	if len(body) > 0 {
		// The capacity ends with the body, so an append cannot reach
		// the bytes after it.
		msg.Body = body[:len(body):len(body)]
	}
	return msg, nil
}

// decodeStoredAliasing decodes a snapshot's message record as
// proto.Unmarshal does, except that the body aliases rec when the message
// field appears once and its body once.
func decodeStoredAliasing(rec []byte) (*fsmpb.StoredMessage, error) {
	sm := new(fsmpb.StoredMessage)
	start, end, msg, ok := oneField(rec, 1)
	if !ok {
		return sm, proto.Unmarshal(rec, sm)
	}
	if err := unmarshalAround(rec, start, end, sm); err != nil {
		return nil, err
	}
	var err error
	sm.Message, err = decodeMessageAliasing(msg)
	return sm, err
}

// oneField finds field num of b when it appears exactly once and is
// length-delimited: b[start:end] is the field, val its value. ok is false
// for any other b (the field missing, repeated or of another wire type, or b
// broken), which the caller leaves to protobuf.
func oneField(b []byte, num protowire.Number) (start, end int, val []byte, ok bool) {
	start = -1
	for at := 0; at < len(b); {
		n, typ, tagLen := protowire.ConsumeTag(b[at:])
		if tagLen < 0 {
			return 0, 0, nil, false
		}
		valLen := protowire.ConsumeFieldValue(n, typ, b[at+tagLen:])
		if valLen < 0 {
			return 0, 0, nil, false
		}
		if n == num {
			if start >= 0 || typ != protowire.BytesType {
				return 0, 0, nil, false
			}
			val, _ = protowire.ConsumeBytes(b[at+tagLen:])
			start, end = at, at+tagLen+valLen
		}
		at += tagLen + valLen
	}
	return start, end, val, start >= 0
}

// unmarshalAround unmarshals into msg the bytes of b before start and from
// end on: all of b but the field between.
func unmarshalAround(b []byte, start, end int, msg proto.Message) error {
	merge := proto.UnmarshalOptions{Merge: true}
	if start > 0 {
		if err := merge.Unmarshal(b[:start], msg); err != nil {
			return err
		}
	}
	if end < len(b) {
		return merge.Unmarshal(b[end:], msg)
	}
	return nil
}

// enqueueAliasing applies an Enqueue decoded by decodeEnqueueAliasing.
func (m *Member) enqueueAliasing(c *fsmpb.Enqueue) Result {
	m.bodies.aliasing = true
	defer func() { m.bodies.aliasing = false }()
	return m.enqueue(c)
}

// ownBody gives a message a body of its own if it aliased its entry's: one
// the state keeps past the batch that stored it. A copy, not a change, as
// in PutBodiesAway.
func (m *Member) ownBody(r ref, rec *record) {
	if rec.has(flagAliased) {
		msg := m.full(r)
		*m.records.msgAt(r) = WithBody(msg, bytes.Clone(msg.Body))
		rec.set(flagAliased, false)
	}
}

// detachAliased owns the bodies of the messages stored since the last call
// that the state still holds in memory.
func (m *Member) detachAliased() {
	t := m.bodies
	for _, msg := range t.aliased {
		if m.holds(msg) {
			m.ownBody(msg.r, m.rec(msg.r))
		}
	}
	clear(t.aliased)
	t.aliased = t.aliased[:0]
	if cap(t.aliased) > maxKeptFresh {
		t.aliased = nil
	}
}

// aliasingMemberHandlers are memberHandlers with an Enqueue's bodies
// aliasing its entry, for a member that tracks its bodies.
var aliasingMemberHandlers = func() map[fsmpb.CommandType]handler[*Member] {
	t := make(map[fsmpb.CommandType]handler[*Member], len(memberHandlers))
	for k, h := range memberHandlers {
		t[k] = h
	}
	t[fsmpb.CommandType_COMMAND_TYPE_ENQUEUE] = handler[*Member]{
		decode: func(payload []byte) (proto.Message, error) { return decodeEnqueueAliasing(payload) },
		apply:  func(m *Member, b proto.Message) Result { return m.enqueueAliasing(b.(*fsmpb.Enqueue)) },
	}
	return t
}()
