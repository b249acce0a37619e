package fsm_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
)

func typedMessage(id string) *fsmpb.Message {
	return &fsmpb.Message{
		Id: id, Priority: 7, CorrelationId: "corr-1", Type: "order", ReplyTo: "replies",
		Properties: map[string]string{"color": "blue"},
		TypedProperties: map[string]*fsmpb.PropertyValue{
			"weight": {Value: &fsmpb.PropertyValue_Int{Int: 2600}},
			"ratio":  {Value: &fsmpb.PropertyValue_Float{Float: 0.25}},
			"rush":   {Value: &fsmpb.PropertyValue_Bool{Bool: true}},
		},
	}
}

// Typed properties and the sender's headers are kept as sent, through a
// snapshot too, even on a message with no body (which a record alone would
// otherwise hold, without them).
func TestMember_KeepsTypedPropertiesAndHeaders(t *testing.T) {
	f := newMember(t)
	f.enqueue(1_000_000_000, typedMessage("m"))
	want := typedMessage("m")
	if got := f.lookup("m").Message; !proto.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	r := restore(t, snapshotBytes(t, f.m))
	st, ok := r.Lookup("m")
	if !ok || !proto.Equal(st.Message, want) {
		t.Fatalf("restored %v, want %v", st.Message, want)
	}
	if got, want := fsm.MessageSize(want), int64(len("corr-1order")+len("replies")+len("colorblue")+len("weight")+len("ratio")+len("rush")+3*8); got != want {
		t.Fatalf("MessageSize = %d, want %d", got, want)
	}
}

// A selector reads a stored message's properties by their types and the
// JMS headers by the specification's names.
func TestMessageFields_HeadersAndProperties(t *testing.T) {
	m := typedMessage("ID:1")
	m.EnqueuedAt = 1_700_000_000_123_456_789
	var f fsm.MessageFields
	f.Reset(m)
	for name, want := range map[string]selector.Value{
		"JMSPriority": selector.IntValue(7), "JMSMessageID": selector.StringValue("ID:1"),
		"JMSTimestamp": selector.IntValue(1_700_000_000_123), "JMSCorrelationID": selector.StringValue("corr-1"),
		"JMSType": selector.StringValue("order"), "JMSDeliveryMode": selector.StringValue("PERSISTENT"),
		"color": selector.StringValue("blue"), "weight": selector.IntValue(2600), "ratio": selector.FloatValue(0.25),
		"rush": selector.BoolValue(true), "missing": {}, "JMSReplyTo": {},
	} {
		if got := f.Get(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	f.Reset(&fsmpb.Message{Id: "x"})
	if !f.Get("JMSCorrelationID").IsNull() || !f.Get("JMSType").IsNull() {
		t.Error("unset JMSCorrelationID and JMSType must be NULL")
	}
	for sel, want := range map[string]bool{
		"JMSType = 'order' AND color = 'blue' AND weight > 2500": true,
		"rush AND ratio < 0.5 AND JMSPriority BETWEEN 5 AND 9":   true,
		"weight / 0 > 1 OR missing IS NOT NULL":                  false,
	} {
		s, err := selector.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if fsm.Selects(s, m) != want {
			t.Errorf("%s: Selects = %v", sel, !want)
		}
	}
	if !fsm.Selects(nil, m) {
		t.Error("no selector selects every message")
	}
}

// Browse lists pending messages in delivery order (priority, then
// arrival), only those the selector selects, skipping delivered and
// expired ones, up to its limit.
func TestMember_Browse(t *testing.T) {
	f := newMember(t)
	f.open("s")
	low, high, gone, held := typedMessage("low"), typedMessage("high"), typedMessage("gone"), typedMessage("held")
	low.Priority, high.Priority, gone.Expiration = 1, 9, 50
	plain := &fsmpb.Message{Id: "plain", Priority: 4}
	f.enqueue(10, low, plain, gone, held, high)
	f.deliver("s", 20, "held")
	ids := func(sts []fsm.MessageState) (out []string) {
		for _, st := range sts {
			out = append(out, st.Message.Id)
		}
		return out
	}
	check := func(sel string, limit int, want ...string) {
		t.Helper()
		s, err := selector.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(f.m.Browse(100, s, limit)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Browse(%q, %d) = %v, want %v", sel, limit, got, want)
		}
	}
	check("", 10, "high", "plain", "low")
	check("", 2, "high", "plain")
	check("color = 'blue'", 10, "high", "low")
	check("JMSPriority < 5", 1, "plain")
	check("", 0)
	if st := f.m.Stats(); st.Pending != 4 || st.Delivered != 1 {
		t.Fatalf("browsing changed the member: %+v", st)
	}
}
