package member

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
	"github.com/cairnmq/cairn/test/wait"
)

func ids(ds []fsm.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Message.Id
	}
	slices.Sort(out)
	return out
}

func propertied(id, color string, weight int64) *fsmpb.Message {
	return &fsmpb.Message{Id: id, Priority: 4, Properties: map[string]string{"color": color},
		TypedProperties: map[string]*fsmpb.PropertyValue{"weight": {Value: &fsmpb.PropertyValue_Int{Int: weight}}}}
}

// A consumer with a selector is dealt only the messages it selects, in the
// deal of a send and in the dispatcher's rounds; a message no consumer
// selects stays pending until one that selects it comes.
func TestReplica_SelectorsChooseWhoTakesAMessage(t *testing.T) {
	ctx := context.Background()
	r := testReplica(t, t.TempDir())
	consumer := func(session, sel string) *collector {
		t.Helper()
		s, err := selector.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.OpenSession(ctx, session, "owner"); err != nil {
			t.Fatal(err)
		}
		var c collector
		if err := r.AddConsumer(&Consumer{ID: session, Session: session, Selector: s, Push: c.push}, 10); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	blue := consumer("blue", "color = 'blue'")
	heavy := consumer("heavy", "weight > 10")
	// Waiting consumers with credit: the send's own entry deals them.
	if _, err := r.Enqueue(ctx, []*fsmpb.Message{
		propertied("blue-light", "blue", 1), propertied("red-heavy", "red", 20),
		propertied("red-light", "red", 1), propertied("blue-heavy", "blue", 30),
	}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "3 messages delivered", func() bool { return blue.count()+heavy.count() == 3 })
	b, h := ids(blue.deliveries()), ids(heavy.deliveries())
	if !slices.Contains(b, "blue-light") || !slices.Contains(h, "red-heavy") || slices.Contains(b, "red-heavy") || slices.Contains(h, "blue-light") {
		t.Fatalf("blue got %v, heavy got %v; each must get only what its selector selects", b, h)
	}
	if n := len(slices.Concat(b, h)); n != 3 || !slices.Contains(slices.Concat(b, h), "blue-heavy") {
		t.Fatalf("blue got %v, heavy got %v; blue-heavy goes to exactly one of them", b, h)
	}
	wait.Holds(t, 300*time.Millisecond, "red-light stays pending", func() bool {
		st, ok := lookup(r, "red-light")
		return ok && st.Pending && blue.count()+heavy.count() == 3
	})
	// A consumer that selects it comes: the dispatcher's round deals it.
	red := consumer("red", "color IN ('red', 'green') AND weight BETWEEN 0 AND 5")
	wait.For(t, 10*time.Second, "red-light delivered to red", func() bool { return slices.Equal(ids(red.deliveries()), []string{"red-light"}) })
}

func lookup(r *Replica, id string) (st fsm.MessageState, ok bool) {
	r.Read(func(m *fsm.Member) { st, ok = m.Lookup(id) })
	return st, ok
}
