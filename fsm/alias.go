package fsm

import (
	"bytes"
	"errors"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A member that tracks its bodies decodes an Enqueue with each body a slice
// of the entry, and owns a body (ownBody) only when it keeps it past the
// batch: fsm/DESIGN.md says why and what it saves.

// decodeEnqueueAliasing decodes an Enqueue as proto.Unmarshal does, except
// that the body of each message decoded by hand aliases payload.
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

// errNotPlain: bytes with fields the hand decoders leave to protobuf.
var errNotPlain = errors.New("a shape left to protobuf")

func unmarshalCopying(payload []byte) (*fsmpb.Enqueue, error) {
	e := new(fsmpb.Enqueue)
	if err := proto.Unmarshal(payload, e); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeMessageAliasing decodes a message by hand, the body a slice of b,
// or, when the hand decoder leaves it to protobuf, unmarshals it whole.
func decodeMessageAliasing(b []byte) (*fsmpb.Message, error) {
	if msg := new(fsmpb.Message); decodeMessageByHand(b, msg) {
		return msg, nil
	}
	msg := new(fsmpb.Message)
	return msg, proto.Unmarshal(b, msg)
}

// decodeStoredAliasing decodes a snapshot's message record as
// proto.Unmarshal does, the body a slice of rec when decoded by hand.
func decodeStoredAliasing(rec []byte) (*fsmpb.StoredMessage, error) {
	if sm, ok := decodeStoredByHand(rec); ok {
		return sm, nil
	}
	sm := new(fsmpb.StoredMessage)
	return sm, proto.Unmarshal(rec, sm)
}

// The records this build writes (a Message, a StoredMessage) are decoded
// by hand: protobuf's reflection cost a restore more CPU than the rest of
// the decoding (fsm/DESIGN.md). The hand decoders take only what this
// build writes: every field one they know, of its wire type, with valid
// UTF-8 in its strings. They report false for anything else (an unknown
// field, a mistyped one, broken bytes), and the caller hands the bytes to
// protobuf, which decides what they make or which error. Fuzz tests hold
// them to proto.Unmarshal.

// decodeMessageByHand decodes b into msg, the body a slice of b.
func decodeMessageByHand(b []byte, msg *fsmpb.Message) bool {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		isVarint, isBytes := typ == protowire.VarintType, typ == protowire.BytesType
		switch {
		case num == 1 && isBytes && utf8.Valid(b):
			msg.Id = string(b)
		case num == 2 && isBytes:
			msg.Body = nil
			if len(b) > 0 {
				// The capacity ends with the body, so an append cannot
				// reach the bytes after it.
				msg.Body = b[:len(b):len(b)]
			}
		case num == 3 && isBytes && addPropertyByHand(b, msg):
		case num == 4 && isVarint:
			msg.Priority = uint32(v)
		case num == 5 && isVarint:
			msg.Expiration = int64(v)
		case num == 6 && isBytes && utf8.Valid(b):
			msg.DedupId = string(b)
		case num == 7 && isVarint:
			msg.EnqueuedAt = int64(v)
		case num == 8 && isVarint:
			msg.DeliveryCount = uint32(v)
		case num == 9 && isVarint:
			msg.Redelivered = protowire.DecodeBool(v)
		case num == 10 && isBytes && addTypedPropertyByHand(b, msg):
		case num == 11 && isBytes && utf8.Valid(b):
			msg.CorrelationId = string(b)
		case num == 12 && isBytes && utf8.Valid(b):
			msg.Type = string(b)
		case num == 13 && isBytes && utf8.Valid(b):
			msg.ReplyTo = string(b)
		default:
			return errNotPlain
		}
		return nil
	}) == nil
}

// addTypedPropertyByHand adds the map entry b to msg's typed properties.
// A value that appears twice is merged, as protobuf does: the last of its
// oneof's fields wins.
func addTypedPropertyByHand(b []byte, msg *fsmpb.Message) bool {
	var key string
	value := new(fsmpb.PropertyValue)
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType && utf8.Valid(b):
			key = string(b)
		case num == 2 && typ == protowire.BytesType:
			return eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				switch {
				case num == 1 && typ == protowire.VarintType:
					value.Value = &fsmpb.PropertyValue_Int{Int: int64(v)}
				case num == 2 && typ == protowire.Fixed64Type:
					value.Value = &fsmpb.PropertyValue_Float{Float: math.Float64frombits(v)}
				case num == 3 && typ == protowire.VarintType:
					value.Value = &fsmpb.PropertyValue_Bool{Bool: protowire.DecodeBool(v)}
				default:
					return errNotPlain
				}
				return nil
			})
		default:
			return errNotPlain
		}
		return nil
	})
	if err != nil {
		return false
	}
	if msg.TypedProperties == nil {
		msg.TypedProperties = make(map[string]*fsmpb.PropertyValue)
	}
	msg.TypedProperties[key] = value
	return true
}

// addPropertyByHand adds the map entry b to msg's properties.
func addPropertyByHand(b []byte, msg *fsmpb.Message) bool {
	var key, value string
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		switch {
		case typ != protowire.BytesType || !utf8.Valid(b):
			return errNotPlain
		case num == 1:
			key = string(b)
		case num == 2:
			value = string(b)
		default:
			return errNotPlain
		}
		return nil
	})
	if err != nil {
		return false
	}
	if msg.Properties == nil {
		msg.Properties = make(map[string]string)
	}
	msg.Properties[key] = value
	return true
}

// decodeStoredByHand decodes a snapshot's message record, the body a slice
// of rec. A message field that appears twice is merged, as protobuf does,
// by decoding the second into the first.
func decodeStoredByHand(rec []byte) (*fsmpb.StoredMessage, bool) {
	sm := new(fsmpb.StoredMessage)
	err := eachField(rec, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		isVarint, isBytes := typ == protowire.VarintType, typ == protowire.BytesType
		switch {
		case num == 1 && isBytes:
			if sm.Message == nil {
				sm.Message = new(fsmpb.Message)
			}
			if !decodeMessageByHand(b, sm.Message) {
				return errNotPlain
			}
		case num == 2 && isVarint:
			sm.Seq = v
		case num == 3 && isVarint:
			sm.Redelivered = protowire.DecodeBool(v)
		case num == 4 && isVarint:
			sm.DeliveryCount = uint32(v)
		case num == 5 && isVarint:
			sm.DeliveryId = v
		case num == 6 && isBytes && utf8.Valid(b):
			sm.Session = string(b)
		case num == 7 && isVarint:
			sm.AvailableAt = int64(v)
		case num == 8 && isVarint:
			sm.Dead = protowire.DecodeBool(v)
		case num == 9 && isBytes && utf8.Valid(b):
			sm.MovingTo = string(b)
		case num == 10 && isBytes && utf8.Valid(b):
			sm.Consumer = string(b)
		default:
			return errNotPlain
		}
		return nil
	})
	return sm, err == nil
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
