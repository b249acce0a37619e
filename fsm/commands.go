package fsm

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// EntryVersion is the newest version of the entry encoding this code reads.
// Encode writes the oldest version that carries an entry's commands as this
// code applies them, so a replica of an older build applies what it
// understands and stops (ErrCorrupt) at the first entry it would apply
// differently, rather than diverge:
//   - 1: every entry but those below;
//   - 2: one with a Recover that names its attempt (an older build, which
//     knows no attempts, would recover again on a repeat that this one
//     ignores);
//   - 3: one with an unseen Return (an older build would mark those
//     messages redelivered and count the delivery);
//   - 4: one of a group shared by several members, whose commands name
//     their member (an older build would apply them all to one member), or
//     one that places members in shared groups (an older build would give
//     each a group of its own);
//   - 5: one with a Configure that sets where delivery ids start (an older
//     build would number a renewed member's deliveries from 1);
//   - 6: one with a Configure whose settings count memory or bound the
//     messages held (an older build would count bodies alone, or not
//     count messages, and admit what this one refuses);
//   - 7: one with a Return that names a consumer (an older build would
//     return none of its deliveries).
//
// A Deliver that names its consumer is of no newer version: an older
// build applies the same deliveries and only forgets their consumer.
const EntryVersion = 7

// Encode wraps typed command bodies into one log entry.
func Encode(cmds ...*fsmpb.Command) ([]byte, error) {
	return proto.Marshal(&fsmpb.Entry{Version: entryVersionOf(cmds), Commands: cmds})
}

// entryVersionOf is the oldest entry version that carries cmds.
func entryVersionOf(cmds []*fsmpb.Command) uint32 {
	v := uint32(1)
	for _, c := range cmds {
		if c.Type == fsmpb.CommandType_COMMAND_TYPE_RETURN && hasField(c.Payload, returnConsumerField) {
			return 7
		}
	}
	for _, c := range cmds {
		if c.Type == fsmpb.CommandType_COMMAND_TYPE_CONFIGURE && limitsMore(c.Payload) {
			return 6
		}
	}
	for _, c := range cmds {
		if c.Type == fsmpb.CommandType_COMMAND_TYPE_CONFIGURE && hasField(c.Payload, configureFirstDeliveryField) {
			return 5
		}
	}
	for _, c := range cmds {
		if c.Member != "" || isGroupCommand(c.Type) || placesInSharedGroup(c) {
			return 4
		}
	}
	for _, c := range cmds {
		switch {
		case c.Type == fsmpb.CommandType_COMMAND_TYPE_RETURN && hasField(c.Payload, returnUnseenField):
			return 3
		case c.Type == fsmpb.CommandType_COMMAND_TYPE_RECOVER && hasField(c.Payload, recoverAttemptField):
			v = 2
		}
	}
	return v
}

// limitsMore reports whether the encoded Configure b sets count_memory or
// max_messages.
func limitsMore(b []byte) bool {
	var c fsmpb.Configure
	return proto.Unmarshal(b, &c) == nil && (c.GetSettings().GetCountMemory() || c.GetSettings().GetMaxMessages() > 0)
}

// placesInSharedGroup reports whether c creates members in shared groups
// (MemberPlacement.group), which an older build would give groups of their
// own.
func placesInSharedGroup(c *fsmpb.Command) bool {
	var members []*fsmpb.MemberPlacement
	switch c.Type {
	case fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION:
		var b fsmpb.CreateDestination
		if proto.Unmarshal(c.Payload, &b) != nil {
			return false
		}
		members = b.GetDestination().GetMembers()
	case fsmpb.CommandType_COMMAND_TYPE_RESIZE_DESTINATION:
		var b fsmpb.ResizeDestination
		if proto.Unmarshal(c.Payload, &b) != nil {
			return false
		}
		members = b.Add
	case fsmpb.CommandType_COMMAND_TYPE_RENEW_MEMBER:
		var b fsmpb.RenewMember
		if proto.Unmarshal(c.Payload, &b) != nil || b.Placement == nil {
			return false
		}
		members = []*fsmpb.MemberPlacement{b.Placement}
	}
	return slices.ContainsFunc(members, func(p *fsmpb.MemberPlacement) bool { return p.Group != "" })
}

// The fields whose presence raises an entry's version.
const (
	recoverAttemptField         = 3 // Recover.attempt
	returnUnseenField           = 4 // Return.unseen
	returnConsumerField         = 5 // Return.consumer
	configureFirstDeliveryField = 2 // Configure.first_delivery_id
)

// hasField reports whether the encoded message b sets field num (proto3
// leaves a zero value out); a payload that does not parse has none.
func hasField(b []byte, num protowire.Number) bool {
	return eachField(b, func(n protowire.Number, _ protowire.Type, _ uint64, _ []byte) error {
		if n == num {
			return errFieldFound
		}
		return nil
	}) == errFieldFound
}

var errFieldFound = errors.New("field found")

// NewCommand builds a command of the type that matches body's Go type.
func NewCommand(body proto.Message) (*fsmpb.Command, error) {
	return NewCommandInto(nil, body)
}

// NewCommandInto is NewCommand with the payload marshalled into buf's
// array when it has room, for a caller that reuses buffers.
func NewCommandInto(buf []byte, body proto.Message) (*fsmpb.Command, error) {
	t, ok := commandTypeOf(body)
	if !ok {
		return nil, fmt.Errorf("fsm: %T is not a command body", body)
	}
	payload, err := proto.MarshalOptions{}.MarshalAppend(buf[:0], body)
	if err != nil {
		return nil, err
	}
	return &fsmpb.Command{Type: t, Payload: payload}, nil
}

// MustCommand is NewCommand for bodies built by this program, which always
// marshal.
func MustCommand(body proto.Message) *fsmpb.Command {
	c, err := NewCommand(body)
	if err != nil {
		panic(err)
	}
	return c
}

func commandTypeOf(body proto.Message) (fsmpb.CommandType, bool) {
	switch body.(type) {
	case *fsmpb.Enqueue:
		return fsmpb.CommandType_COMMAND_TYPE_ENQUEUE, true
	case *fsmpb.Deliver:
		return fsmpb.CommandType_COMMAND_TYPE_DELIVER, true
	case *fsmpb.Ack:
		return fsmpb.CommandType_COMMAND_TYPE_ACK, true
	case *fsmpb.Recover:
		return fsmpb.CommandType_COMMAND_TYPE_RECOVER, true
	case *fsmpb.Release:
		return fsmpb.CommandType_COMMAND_TYPE_RELEASE, true
	case *fsmpb.Expire:
		return fsmpb.CommandType_COMMAND_TYPE_EXPIRE, true
	case *fsmpb.Purge:
		return fsmpb.CommandType_COMMAND_TYPE_PURGE, true
	case *fsmpb.OpenSession:
		return fsmpb.CommandType_COMMAND_TYPE_OPEN_SESSION, true
	case *fsmpb.Return:
		return fsmpb.CommandType_COMMAND_TYPE_RETURN, true
	case *fsmpb.Configure:
		return fsmpb.CommandType_COMMAND_TYPE_CONFIGURE, true
	case *fsmpb.Move:
		return fsmpb.CommandType_COMMAND_TYPE_MOVE, true
	case *fsmpb.Moved:
		return fsmpb.CommandType_COMMAND_TYPE_MOVED, true
	case *fsmpb.Wake:
		return fsmpb.CommandType_COMMAND_TYPE_WAKE, true
	case *fsmpb.Seal:
		return fsmpb.CommandType_COMMAND_TYPE_SEAL, true
	case *fsmpb.TxPrepare:
		return fsmpb.CommandType_COMMAND_TYPE_TX_PREPARE, true
	case *fsmpb.TxDecide:
		return fsmpb.CommandType_COMMAND_TYPE_TX_DECIDE, true
	case *fsmpb.AddMember:
		return fsmpb.CommandType_COMMAND_TYPE_ADD_MEMBER, true
	case *fsmpb.DropMember:
		return fsmpb.CommandType_COMMAND_TYPE_DROP_MEMBER, true
	case *fsmpb.CreateDestination:
		return fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION, true
	case *fsmpb.DeleteDestination:
		return fsmpb.CommandType_COMMAND_TYPE_DELETE_DESTINATION, true
	case *fsmpb.RegisterNode:
		return fsmpb.CommandType_COMMAND_TYPE_REGISTER_NODE, true
	case *fsmpb.RemoveNode:
		return fsmpb.CommandType_COMMAND_TYPE_REMOVE_NODE, true
	case *fsmpb.ReplaceReplica:
		return fsmpb.CommandType_COMMAND_TYPE_REPLACE_REPLICA, true
	case *fsmpb.AddReplica:
		return fsmpb.CommandType_COMMAND_TYPE_ADD_REPLICA, true
	case *fsmpb.PreferReplica:
		return fsmpb.CommandType_COMMAND_TYPE_PREFER_REPLICA, true
	case *fsmpb.ReplicaCaughtUp:
		return fsmpb.CommandType_COMMAND_TYPE_REPLICA_CAUGHT_UP, true
	case *fsmpb.RebuildReplica:
		return fsmpb.CommandType_COMMAND_TYPE_REBUILD_REPLICA, true
	case *fsmpb.DecommissionNode:
		return fsmpb.CommandType_COMMAND_TYPE_DECOMMISSION_NODE, true
	case *fsmpb.ResizeDestination:
		return fsmpb.CommandType_COMMAND_TYPE_RESIZE_DESTINATION, true
	case *fsmpb.RemoveMember:
		return fsmpb.CommandType_COMMAND_TYPE_REMOVE_MEMBER, true
	case *fsmpb.SetReplicas:
		return fsmpb.CommandType_COMMAND_TYPE_SET_REPLICAS, true
	case *fsmpb.RenewMember:
		return fsmpb.CommandType_COMMAND_TYPE_RENEW_MEMBER, true
	case *fsmpb.Publish:
		return fsmpb.CommandType_COMMAND_TYPE_PUBLISH, true
	case *fsmpb.ClaimClientId:
		return fsmpb.CommandType_COMMAND_TYPE_CLAIM_CLIENT_ID, true
	case *fsmpb.ReleaseClientId:
		return fsmpb.CommandType_COMMAND_TYPE_RELEASE_CLIENT_ID, true
	case *fsmpb.PutUser:
		return fsmpb.CommandType_COMMAND_TYPE_PUT_USER, true
	case *fsmpb.DeleteUser:
		return fsmpb.CommandType_COMMAND_TYPE_DELETE_USER, true
	}
	return 0, false
}

// Decode parses a log entry. An error wraps ErrCorrupt.
//
// The envelope is read by hand rather than by proto.Unmarshal, which copies
// every bytes field: each command's Payload here is a slice of data, so a
// message body is copied at most once on its way into the state (when its
// command is decoded; not even then for a member that tracks its bodies,
// fsm/DESIGN.md). The result must not outlive data's
// contents; Raft never changes an entry's data. FuzzDecode holds this
// reader to proto.Unmarshal's answers.
func Decode(data []byte) (*fsmpb.Entry, error) {
	var e fsmpb.Entry
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			e.Version = uint32(v)
		case num == 2 && typ == protowire.BytesType:
			c, err := decodeCommand(b)
			if err != nil {
				return err
			}
			e.Commands = append(e.Commands, c)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if e.Version == 0 || e.Version > EntryVersion {
		return nil, fmt.Errorf("%w: entry version %d, this build reads 1..%d", ErrCorrupt, e.Version, EntryVersion)
	}
	return &e, nil
}

func decodeCommand(data []byte) (*fsmpb.Command, error) {
	var c fsmpb.Command
	err := eachField(data, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			c.Type = fsmpb.CommandType(int32(v))
		case num == 2 && typ == protowire.BytesType:
			c.Payload = b
		case num == 3 && typ == protowire.BytesType:
			if !utf8.Valid(b) {
				return errors.New("member name is not valid UTF-8")
			}
			c.Member = string(b)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// eachField calls f with every field of one protobuf message in data: its
// number, wire type, and its value (v for varints, b for length-delimited
// fields, a slice of data). Fields of other types are checked and skipped.
func eachField(data []byte, f func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if !num.IsValid() {
			return fmt.Errorf("invalid field number %d", num)
		}
		data = data[n:]
		var v uint64
		var b []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(data)
		case protowire.BytesType:
			b, n = protowire.ConsumeBytes(data)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		if err := f(num, typ, v, b); err != nil {
			return err
		}
	}
	return nil
}

// handler applies one decoded command body to a state machine S.
type handler[S any] struct {
	decode func(payload []byte) (proto.Message, error)
	apply  func(s S, body proto.Message) Result
}

// on registers the handler of one command type; the body type is fixed by T.
func on[S any, T proto.Message](table map[fsmpb.CommandType]handler[S], t fsmpb.CommandType, newBody func() T, apply func(S, T) Result) {
	table[t] = handler[S]{
		decode: func(payload []byte) (proto.Message, error) {
			b := newBody()
			return b, proto.Unmarshal(payload, b)
		},
		apply: func(s S, b proto.Message) Result { return apply(s, b.(T)) },
	}
}

// applyEntry decodes data and applies each command through table.
func applyEntry[S any](s S, table map[fsmpb.CommandType]handler[S], data []byte) ([]Result, error) {
	e, err := Decode(data)
	if err != nil {
		return nil, err
	}
	// Decode every body before applying any, so a corrupt entry changes nothing.
	bodies := make([]proto.Message, len(e.Commands))
	hs := make([]handler[S], len(e.Commands))
	for i, c := range e.Commands {
		if c.Member != "" {
			return nil, fmt.Errorf("%w: command %d is for member %q of a shared group, and this state machine is not one", ErrCorrupt, i, c.Member)
		}
		h, ok := table[c.Type]
		if !ok {
			return nil, fmt.Errorf("%w: command %d has type %v, which this state machine does not apply", ErrCorrupt, i, c.Type)
		}
		if bodies[i], err = decodeIn(h, e.Version, i, c); err != nil {
			return nil, err
		}
		hs[i] = h
	}
	results := make([]Result, len(bodies))
	for i, b := range bodies {
		results[i] = hs[i].apply(s, b)
	}
	return results, nil
}

// decodeIn decodes command i of an entry of the given version with h, as
// the build that wrote the entry meant it.
func decodeIn[S any](h handler[S], version uint32, i int, c *fsmpb.Command) (proto.Message, error) {
	b, err := h.decode(c.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: command %d (%v): %v", ErrCorrupt, i, c.Type, err)
	}
	if r, ok := b.(*fsmpb.Recover); ok && version < 2 {
		// Written by an older leader, which forwarded a newer front-end's
		// attempt as a field it did not know and whose replicas recover
		// in full: so must this one.
		r.Attempt = 0
	}
	if r, ok := b.(*fsmpb.Return); ok && version < 3 {
		// Likewise unseen: an older build's replicas mark and count.
		r.Unseen = false
	}
	return b, nil
}

// DecodeMemberCommand decodes one member command for a host to submit; it
// refuses the commands only a leader makes itself (Deliver, Expire, Move,
// Moved, Wake, Seal, Configure) and any that is not a member command.
func DecodeMemberCommand(c *fsmpb.Command) (proto.Message, error) {
	switch c.GetType() {
	case fsmpb.CommandType_COMMAND_TYPE_DELIVER, fsmpb.CommandType_COMMAND_TYPE_EXPIRE, fsmpb.CommandType_COMMAND_TYPE_CONFIGURE,
		fsmpb.CommandType_COMMAND_TYPE_MOVE, fsmpb.CommandType_COMMAND_TYPE_MOVED, fsmpb.CommandType_COMMAND_TYPE_WAKE,
		fsmpb.CommandType_COMMAND_TYPE_SEAL:
		return nil, fmt.Errorf("%w: %v is made by a member's leader, not forwarded to it", ErrMalformed, c.GetType())
	case fsmpb.CommandType_COMMAND_TYPE_PUBLISH:
		return decodeBody(groupHandlers, c)
	}
	return decodeBody(memberHandlers, c)
}

// DecodeMetaCommand decodes one meta command for the meta leader to apply.
func DecodeMetaCommand(c *fsmpb.Command) (proto.Message, error) {
	return decodeBody(metaHandlers, c)
}

func decodeBody[S any](table map[fsmpb.CommandType]handler[S], c *fsmpb.Command) (proto.Message, error) {
	h, ok := table[c.GetType()]
	if !ok {
		return nil, fmt.Errorf("%w: command type %v does not belong here", ErrMalformed, c.GetType())
	}
	b, err := h.decode(c.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %v", ErrMalformed, c.GetType(), err)
	}
	return b, nil
}

// rejections are the rejection errors by name, for carrying a rejection
// between nodes.
var rejections = []error{
	// ErrTxRefused first: it wraps the reason, which is another of these.
	ErrTxRefused,
	ErrUnknownSession, ErrSessionOwned, ErrDuplicateMessageID, ErrMemberFull, ErrSealed, ErrInvalidMessage,
	ErrMalformed, ErrInvalidName, ErrInvalidSettings, ErrDestinationExists, ErrUnknownDestination, ErrUnknownMember,
	ErrClientIDInUse, ErrUserExists, ErrUnknownUser,
}

// RejectionCode names a rejection for the wire ("" if err is none). An
// error that is none of the rejections travels as a malformed command's,
// never as no error at all.
func RejectionCode(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range rejections {
		if errors.Is(err, r) {
			return r.Error()
		}
	}
	return ErrMalformed.Error()
}

// Rejection turns a code and message back into a rejection that matches
// its sentinel with errors.Is and keeps the text.
func Rejection(code, message string) error {
	for _, r := range rejections {
		if r.Error() == code {
			return &rejection{kind: r, message: message}
		}
	}
	return &rejection{kind: ErrMalformed, message: message}
}

type rejection struct {
	kind    error
	message string
}

func (r *rejection) Error() string { return r.message }
func (r *rejection) Unwrap() error { return r.kind }
