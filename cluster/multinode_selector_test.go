package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
)

// Typed properties and the sender's headers arrive as sent, and a
// consumer's selector is evaluated by the member's host, for a consumer on
// the host's node and for one on another node: each gets only what it
// selects, and what nobody selects stays pending. A malformed selector is
// refused with its position, and nothing is created.
func TestCluster_SelectorsOnTypedProperties(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	host := tc.CreateSpread(ctx, map[string]int{"sel": 1})["sel"][0]
	front := tc.Others(host)[0]

	p := mustProducer(t, mustSession(t, tc.Dial(front), client.AutoAck), "sel")
	for i := range 6 {
		color := []string{"blue", "red"}[i%2]
		m := &client.Message{Body: []byte(fmt.Sprint(i)), CorrelationID: fmt.Sprintf("corr-%d", i), Type: "order", ReplyTo: "replies",
			Properties: map[string]any{"n": i, "color": color, "ratio": float32(i) / 2, "even": i%2 == 0}}
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.Send(ctx, &client.Message{Properties: map[string]any{"x": []int{1}}})
	wantErr(t, "a property of type []int", err, client.ErrInvalidArgument)

	remote := mustConsumer(t, ctx, mustSession(t, tc.Dial(front), client.AutoAck), "sel", client.WithSelector("color = 'blue' AND n >= 2 AND JMSType = 'order'"))
	local := mustConsumer(t, ctx, mustSession(t, tc.Dial(host), client.AutoAck), "sel", client.WithSelector("NOT even AND ratio > 0.4"))
	got := recvN(t, remote, 2)
	sameSet(t, "selected on "+front+" (the host is "+host+")", bodiesOf(got), []string{"2", "4"})
	sameSet(t, "selected on the host "+host, bodiesOf(recvN(t, local, 3)), []string{"1", "3", "5"})
	expectNothing(t, remote, 200*time.Millisecond)
	checkQueue(t, tc.Admin(host), "sel", 1, 0) // "0": blue, but n < 2, and even

	m := got[0]
	if m.Body[0] == '4' {
		m = got[1]
	}
	want := map[string]any{"n": int64(2), "color": "blue", "ratio": float64(1), "even": true}
	if fmt.Sprint(m.Properties) != fmt.Sprint(want) || m.CorrelationID != "corr-2" || m.Type != "order" || m.ReplyTo != "replies" {
		t.Fatalf("received %v %q %q %q; want %v corr-2 order replies", m.Properties, m.CorrelationID, m.Type, m.ReplyTo, want)
	}
	for k, v := range want {
		if fmt.Sprintf("%T", m.Properties[k]) != fmt.Sprintf("%T", v) {
			t.Errorf("property %s is a %T, want a %T", k, m.Properties[k], v)
		}
	}

	s := mustSession(t, tc.Dial(front), client.AutoAck)
	for _, sel := range []string{"color = ", "color = 'blue", "n > 'x'", "NOT 5"} {
		_, err := s.Consumer(ctx, "unmade", client.WithSelector(sel))
		if !errors.Is(err, client.ErrInvalidSelector) || !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "position") {
			t.Fatalf("selector %q: %v; want ErrInvalidSelector naming the position", sel, err)
		}
	}
	if names := queueNames(t, tc.Admin(front)); slices.Contains(names, "unmade") {
		t.Fatalf("a consumer refused for its selector created its queue: %v", names)
	}
}

// Browsing shows every member's pending messages, wherever its host is,
// member after member in delivery order, with their properties; not those
// in a consumer's hands; and it changes no count. A selector, a member
// address and a count narrow it.
func TestCluster_BrowseShowsPendingMessagesAndChangesNothing(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	tc.CreateSpread(ctx, map[string]int{"br": 3})
	p := mustProducer(t, mustSession(t, tc.Dial("n1"), client.AutoAck), "br")
	for i := range 6 {
		if _, err := p.Send(ctx, &client.Message{Body: []byte(fmt.Sprint("m", i)), Properties: map[string]any{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	// One message on each member, by its address.
	pm := make([]*client.Producer, 3)
	for i := range pm {
		pm[i] = mustProducer(t, mustSession(t, tc.Dial("n2"), client.AutoAck), fmt.Sprintf("br#%d", i))
		if _, err := pm[i].Send(ctx, &client.Message{Body: []byte(fmt.Sprintf("at%d", i)), Properties: map[string]any{"at": i}}); err != nil {
			t.Fatal(err)
		}
	}
	held := mustConsumer(t, ctx, mustSession(t, tc.Dial("n3"), client.ClientAck), "br#2", client.WithSelector("at = 2"))
	if m := recv(t, held); string(m.Body) != "at2" {
		t.Fatalf("the held consumer got %q", m.Body)
	}
	a := tc.Admin("n3")
	before := showQueue(t, a, "br")

	all, err := a.BrowseQueue(ctx, "br", client.BrowseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var shown []string
	lastMember := ""
	for _, m := range all {
		if m.Member < lastMember {
			t.Fatalf("browse went back from %s to %s", lastMember, m.Member)
		}
		lastMember = m.Member
		shown = append(shown, string(m.Body))
		if m.Redelivered || m.DeliveryCount != 0 || m.Properties == nil {
			t.Errorf("browsed %s: redelivered %v, delivery count %d, properties %v", m.Body, m.Redelivered, m.DeliveryCount, m.Properties)
		}
	}
	if len(shown) != 8 || slices.Contains(shown, "at2") {
		t.Fatalf("browse showed %v; want the 8 pending messages, not at2, which a consumer holds", shown)
	}
	one, err := a.BrowseQueue(ctx, "br#1", client.BrowseOptions{Selector: "at IS NOT NULL"})
	if err != nil || len(one) != 1 || string(one[0].Body) != "at1" || one[0].Member != "br#1" {
		t.Fatalf("browse br#1 with a selector: %v, %v; want at1 on br#1", bodiesOf(one), err)
	}
	if two, err := a.BrowseQueue(ctx, "br", client.BrowseOptions{Count: 2}); err != nil || len(two) != 2 {
		t.Fatalf("browse --count 2: %v, %v", bodiesOf(two), err)
	}
	if after := showQueue(t, a, "br"); after.Pending != before.Pending || after.Delivered != before.Delivered || after.Pending != 8 {
		t.Fatalf("browsing changed the queue: %d pending, %d delivered before; %d and %d after", before.Pending, before.Delivered, after.Pending, after.Delivered)
	}
	_, err = a.BrowseQueue(ctx, "br", client.BrowseOptions{Selector: "at >"})
	wantErr(t, "a malformed selector", err, client.ErrInvalidSelector)
	_, err = a.BrowseQueue(ctx, "nope", client.BrowseOptions{})
	wantErr(t, "an unknown queue", err, client.ErrUnknownDestination)
	_, err = a.BrowseQueue(ctx, "br", client.BrowseOptions{Count: 10_001})
	wantErr(t, "a count over 10,000", err, client.ErrInvalidArgument)
}
