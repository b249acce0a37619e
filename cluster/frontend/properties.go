package frontend

import (
	"fmt"

	"github.com/cairnmq/cairn/fsm"

	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// A message's properties travel in two maps, on the wire and as stored:
// strings in properties, every other type (int64, float64, bool) in
// typed_properties. Messages from before typed properties read the same.

// MessageSize checks a sent message's properties and the headers its
// sender set, and returns what it counts against --max-message-bytes: its
// body, each property's name and value (a typed value as 8 bytes), and
// those headers. what names the message in the error.
func MessageSize(m *clientpb.Message, what string) (int, error) {
	size := len(m.Body) + len(m.CorrelationId) + len(m.Type) + len(m.ReplyTo)
	for k, v := range m.Properties {
		if k == "" {
			return 0, fmt.Errorf("%w: message %s has a property with an empty name", transport.ErrInvalidArgument, what)
		}
		size += len(k) + len(v)
	}
	for k, v := range m.TypedProperties {
		switch _, twice := m.Properties[k]; {
		case k == "":
			return 0, fmt.Errorf("%w: message %s has a property with an empty name", transport.ErrInvalidArgument, what)
		case twice:
			return 0, fmt.Errorf("%w: message %s has two properties named %q, a string and a %s", transport.ErrInvalidArgument, what, k, typeName(v))
		case v.GetValue() == nil:
			return 0, fmt.Errorf("%w: message %s has a property %q without a value", transport.ErrInvalidArgument, what, k)
		}
		size += len(k) + 8
	}
	return size, nil
}

func typeName(v *clientpb.PropertyValue) string {
	switch v.GetValue().(type) {
	case *clientpb.PropertyValue_Int:
		return "int"
	case *clientpb.PropertyValue_Float:
		return "float"
	case *clientpb.PropertyValue_Bool:
		return "bool"
	}
	return "value of no type"
}

// StoredProperties are a sent message's typed properties as stored.
func StoredProperties(in map[string]*clientpb.PropertyValue) map[string]*fsmpb.PropertyValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]*fsmpb.PropertyValue, len(in))
	for k, v := range in {
		switch x := v.GetValue().(type) {
		case *clientpb.PropertyValue_Int:
			out[k] = &fsmpb.PropertyValue{Value: &fsmpb.PropertyValue_Int{Int: x.Int}}
		case *clientpb.PropertyValue_Float:
			out[k] = &fsmpb.PropertyValue{Value: &fsmpb.PropertyValue_Float{Float: x.Float}}
		case *clientpb.PropertyValue_Bool:
			out[k] = &fsmpb.PropertyValue{Value: &fsmpb.PropertyValue_Bool{Bool: x.Bool}}
		}
	}
	return out
}

// deliveredProperties are a stored message's typed properties as a
// delivery carries them.
func deliveredProperties(in map[string]*fsmpb.PropertyValue) map[string]*clientpb.PropertyValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]*clientpb.PropertyValue, len(in))
	for k, v := range in {
		switch x := v.GetValue().(type) {
		case *fsmpb.PropertyValue_Int:
			out[k] = &clientpb.PropertyValue{Value: &clientpb.PropertyValue_Int{Int: x.Int}}
		case *fsmpb.PropertyValue_Float:
			out[k] = &clientpb.PropertyValue{Value: &clientpb.PropertyValue_Float{Float: x.Float}}
		case *fsmpb.PropertyValue_Bool:
			out[k] = &clientpb.PropertyValue{Value: &clientpb.PropertyValue_Bool{Bool: x.Bool}}
		}
	}
	return out
}

// delivery is a stored message as the client receives it, for member.
func delivery(member, dest string, d fsm.Delivery) *clientpb.Delivery {
	m := d.Message
	return &clientpb.Delivery{
		Member: member, DeliveryId: d.DeliveryID, Id: m.Id, Body: m.Body, Properties: m.Properties,
		TypedProperties: deliveredProperties(m.TypedProperties), CorrelationId: m.CorrelationId, Type: m.Type, ReplyTo: m.ReplyTo,
		Priority: m.Priority, ExpirationUnixMs: nsToMs(m.Expiration), Redelivered: d.Redelivered,
		DeliveryCount: d.DeliveryCount, TimestampUnixMs: nsToMs(m.EnqueuedAt), Destination: dest,
	}
}
