package client

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Message is a message to send or one received.
type Message struct {
	// ID is set by Send (generated when empty) and on received messages.
	ID   string
	Body []byte
	// Properties are the message's properties, each a string, an int64, a
	// float64 or a bool; selectors read them. On send, Go's other integer
	// and float types are taken as int64 and float64; any other type is
	// refused (ErrInvalidArgument).
	Properties map[string]any
	// The JMS headers JMSCorrelationID, JMSType and JMSReplyTo (the name of
	// a destination to answer to): set by the sender, selectors read the
	// first two.
	CorrelationID string
	Type          string
	ReplyTo       string
	// DedupID, when set, makes the member drop a second message with the
	// same id within its duplicate-detection window.
	DedupID string

	// Set on received messages.
	Priority      int
	Expiration    time.Time // zero: never expires
	Timestamp     time.Time // when the member enqueued it
	Redelivered   bool
	DeliveryCount int
	Destination   string
	// Member is the member the message was sent to or received from.
	Member string

	session    *Session
	deliveryID uint64
	gen        uint64 // the connection's link it came on
}

func (m *Message) ref() *clientpb.DeliveryRef {
	return &clientpb.DeliveryRef{Member: m.Member, DeliveryId: m.deliveryID}
}

// Ack acknowledges the message according to its session's mode: in
// ClientAck mode every message the session has handed out so far, in
// IndividualAck mode this one only; in AutoAck and DupsOK modes the session
// acknowledges by itself and Ack does nothing. An error wrapping
// ErrLostServer means some of the messages were released meanwhile (by a
// recover, or a reconnect of the connection) and will be redelivered.
func (m *Message) Ack() error {
	if m.session == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.session.conn.opts.RequestTimeout)
	defer cancel()
	return m.session.ack(ctx, m)
}

func fromDelivery(d *clientpb.Delivery, s *Session, gen uint64) *Message {
	m := &Message{
		ID: d.Id, Body: d.Body, Properties: fromWire(d.Properties, d.TypedProperties), Priority: int(d.Priority),
		CorrelationID: d.CorrelationId, Type: d.Type, ReplyTo: d.ReplyTo,
		Redelivered: d.Redelivered, DeliveryCount: int(d.DeliveryCount), Destination: d.Destination,
		Member: d.Member, session: s, deliveryID: d.DeliveryId, gen: gen,
	}
	if d.ExpirationUnixMs > 0 {
		m.Expiration = time.UnixMilli(d.ExpirationUnixMs)
	}
	if d.TimestampUnixMs > 0 {
		m.Timestamp = time.UnixMilli(d.TimestampUnixMs)
	}
	return m
}

// wireProperties splits properties into the wire's two maps: strings, and
// the other types.
func wireProperties(props map[string]any) (map[string]string, map[string]*clientpb.PropertyValue, error) {
	var strs map[string]string
	var typed map[string]*clientpb.PropertyValue
	for k, v := range props {
		var pv *clientpb.PropertyValue
		switch x := v.(type) {
		case string:
			if strs == nil {
				strs = make(map[string]string)
			}
			strs[k] = x
			continue
		case bool:
			pv = &clientpb.PropertyValue{Value: &clientpb.PropertyValue_Bool{Bool: x}}
		case float64:
			pv = floatProperty(x)
		case float32:
			pv = floatProperty(float64(x))
		case int:
			pv = intProperty(int64(x))
		case int8:
			pv = intProperty(int64(x))
		case int16:
			pv = intProperty(int64(x))
		case int32:
			pv = intProperty(int64(x))
		case int64:
			pv = intProperty(x)
		case uint8:
			pv = intProperty(int64(x))
		case uint16:
			pv = intProperty(int64(x))
		case uint32:
			pv = intProperty(int64(x))
		default:
			return nil, nil, fmt.Errorf("%w: property %q is a %T; a property is a string, an integer (up to int64), a float or a bool", ErrInvalidArgument, k, v)
		}
		if typed == nil {
			typed = make(map[string]*clientpb.PropertyValue)
		}
		typed[k] = pv
	}
	return strs, typed, nil
}

func intProperty(i int64) *clientpb.PropertyValue {
	return &clientpb.PropertyValue{Value: &clientpb.PropertyValue_Int{Int: i}}
}

func floatProperty(f float64) *clientpb.PropertyValue {
	return &clientpb.PropertyValue{Value: &clientpb.PropertyValue_Float{Float: f}}
}

// fromWire joins a delivery's two property maps (nil if both are empty).
func fromWire(strs map[string]string, typed map[string]*clientpb.PropertyValue) map[string]any {
	if len(strs)+len(typed) == 0 {
		return nil
	}
	out := make(map[string]any, len(strs)+len(typed))
	for k, v := range strs {
		out[k] = v
	}
	for k, v := range typed {
		switch x := v.GetValue().(type) {
		case *clientpb.PropertyValue_Int:
			out[k] = x.Int
		case *clientpb.PropertyValue_Float:
			out[k] = x.Float
		case *clientpb.PropertyValue_Bool:
			out[k] = x.Bool
		}
	}
	return out
}
