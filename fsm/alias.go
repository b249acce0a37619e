package fsm

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Bodies are most of an entry's bytes, and proto.Unmarshal copies every
// bytes field: decoding an Enqueue made one more copy of each body, on
// every replica, only for the member package to write it to its body files
// a moment later. A member that tracks its bodies therefore decodes an
// Enqueue with each body a slice of the entry's own bytes, and
// PutBodiesAway copies the bodies it keeps in memory (detachAliased), so no
// entry stays in memory for its bodies after the batch that applied it. The
// rest of each message is decoded by proto.Unmarshal, so protobuf's rules
// (UTF-8, maps, unknown fields, the last value of a field winning) hold as
// before; an Enqueue of any other shape is decoded by proto.Unmarshal
// whole.

// decodeEnqueueAliasing decodes an Enqueue as proto.Unmarshal does, except
// that each message's body aliases payload.
func decodeEnqueueAliasing(payload []byte) (*fsmpb.Enqueue, error) {
	e := new(fsmpb.Enqueue)
	for b := payload; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return unmarshalCopying(payload)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return unmarshalCopying(payload)
			}
			e.Now, b = int64(v), b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return unmarshalCopying(payload)
			}
			msg, err := decodeMessageAliasing(v)
			if err != nil {
				return nil, err
			}
			e.Messages, b = append(e.Messages, msg), b[n:]
		default:
			// Unknown fields of a newer version: kept as protobuf keeps them.
			return unmarshalCopying(payload)
		}
	}
	return e, nil
}

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
	start, end, body := -1, -1, []byte(nil)
	for at := 0; at < len(b); {
		num, typ, n := protowire.ConsumeTag(b[at:])
		if n < 0 {
			return msg, proto.Unmarshal(b, msg)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[at+n:])
		if m < 0 {
			return msg, proto.Unmarshal(b, msg)
		}
		if num == 2 {
			if start >= 0 || typ != protowire.BytesType {
				return msg, proto.Unmarshal(b, msg)
			}
			body, _ = protowire.ConsumeBytes(b[at+n:])
			start, end = at, at+n+m
		}
		at += n + m
	}
	if start < 0 {
		return msg, proto.Unmarshal(b, msg)
	}
	merge := proto.UnmarshalOptions{Merge: true}
	if err := merge.Unmarshal(b[:start], msg); err != nil {
		return nil, err
	}
	if err := merge.Unmarshal(b[end:], msg); err != nil {
		return nil, err
	}
	if len(body) > 0 {
		// The capacity ends with the body, so an append cannot reach
		// the entry's next bytes.
		msg.Body = body[:len(body):len(body)]
	}
	return msg, nil
}

// enqueueAliasing applies an Enqueue decoded by decodeEnqueueAliasing.
func (m *Member) enqueueAliasing(c *fsmpb.Enqueue) Result {
	m.bodies.aliasing = true
	defer func() { m.bodies.aliasing = false }()
	return m.enqueue(c)
}

// detachAliased copies the bodies of the messages stored since the last
// call whose bodies alias their entry and that the state still holds.
func (m *Member) detachAliased() {
	t := m.bodies
	for _, msg := range t.aliased {
		if m.messages[msg.msg.Id] == msg && !msg.away.Away() && len(msg.msg.Body) > 0 {
			// A copy, not a change, as in PutBodiesAway.
			msg.msg = WithBody(msg.msg, bytes.Clone(msg.msg.Body))
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
