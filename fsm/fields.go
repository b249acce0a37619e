package fsm

import (
	"time"

	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
)

// The JMS headers a selector may name (the JMS specification's list).
// Every message is persistent, so JMSDeliveryMode is always 'PERSISTENT';
// JMSTimestamp is when the member stored the message, in Unix milliseconds.
const (
	HeaderPriority      = "JMSPriority"
	HeaderMessageID     = "JMSMessageID"
	HeaderTimestamp     = "JMSTimestamp"
	HeaderCorrelationID = "JMSCorrelationID"
	HeaderType          = "JMSType"
	HeaderDeliveryMode  = "JMSDeliveryMode"
)

// MessageFields reads a message's headers and properties for a selector.
// One reads message after message without allocating: Reset it to each,
// and pass Get to selector.Selector.Match.
type MessageFields struct{ msg *fsmpb.Message }

// Reset makes f read msg.
func (f *MessageFields) Reset(msg *fsmpb.Message) { f.msg = msg }

// Get is the header or property of that name, NULL if the message has none.
func (f *MessageFields) Get(name string) selector.Value {
	m := f.msg
	switch name {
	case HeaderPriority:
		return selector.IntValue(int64(m.Priority))
	case HeaderMessageID:
		return selector.StringValue(m.Id)
	case HeaderTimestamp:
		return selector.IntValue(m.EnqueuedAt / int64(time.Millisecond))
	case HeaderCorrelationID:
		return nullIfEmpty(m.CorrelationId)
	case HeaderType:
		return nullIfEmpty(m.Type)
	case HeaderDeliveryMode:
		return selector.StringValue("PERSISTENT")
	}
	if v, ok := m.Properties[name]; ok {
		return selector.StringValue(v)
	}
	return PropertyValue(m.TypedProperties[name])
}

// PropertyValue is a typed property's value as a selector reads it (NULL
// for nil or an unset value).
func PropertyValue(v *fsmpb.PropertyValue) selector.Value {
	switch x := v.GetValue().(type) {
	case *fsmpb.PropertyValue_Int:
		return selector.IntValue(x.Int)
	case *fsmpb.PropertyValue_Float:
		return selector.FloatValue(x.Float)
	case *fsmpb.PropertyValue_Bool:
		return selector.BoolValue(x.Bool)
	}
	return selector.Value{}
}

func nullIfEmpty(s string) selector.Value {
	if s == "" {
		return selector.Value{}
	}
	return selector.StringValue(s)
}

// Selects reports whether sel selects msg (a nil sel selects every message).
func Selects(sel *selector.Selector, msg *fsmpb.Message) bool {
	if sel == nil {
		return true
	}
	f := MessageFields{msg: msg}
	return sel.Match(f.Get)
}
