package history

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairnmq/cairn/client"
)

// The checker checked: a clean history passes, and each kind of broken
// promise is found.
func TestCheck_FindsEachBrokenPromise(t *testing.T) {
	unknown := fmt.Errorf("%w: reset", client.ErrDeliveryUnknown)
	definite := fmt.Errorf("%w: not sent", client.ErrUnavailable)
	rolledBack := fmt.Errorf("%w: a node was lost", client.ErrTransactionRolledBack)
	msg := func(id string, redelivered bool, count int) *client.Message {
		return &client.Message{ID: id, Redelivered: redelivered, DeliveryCount: count}
	}
	// step is one event: a send (err), a receipt in phase with its marks
	// and ack outcome, or a transaction's send, receipt or commit.
	type step struct {
		id, tx  string
		send    bool
		sendErr error
		phase   string
		redel   bool
		count   int
		ack     AckOutcome
		commit  bool
		err     error
	}
	send := func(id string, err error) step { return step{id: id, send: true, sendErr: err} }
	recv := func(id, phase string, redel bool, count int, ack AckOutcome) step {
		return step{id: id, phase: phase, redel: redel, count: count, ack: ack}
	}
	txSend := func(tx, id string) step { return step{tx: tx, id: id, send: true} }
	txRecv := func(tx, id, phase string, redel bool, count int) step {
		return step{tx: tx, id: id, phase: phase, redel: redel, count: count}
	}
	commit := func(tx string, err error) step { return step{tx: tx, commit: true, err: err} }
	for _, c := range []struct {
		name   string
		strict bool
		steps  []step
		want   []string // violation kinds, in order
	}{
		{"clean", true, []step{
			send("a", nil), send("b", nil), send("c", nil), send("d", unknown), send("e", unknown), send("f", nil),
			recv("a", "p1", false, 1, AckOK),
			recv("b", "p1", false, 1, AckNone), recv("b", "p2", true, 3, AckOK),
			recv("c", "p1", false, 1, AckNone), recv("c", DrainPhase, true, 2, AckNone),
			recv("d", DrainPhase, false, 1, AckNone),
			recv("f", "p1", false, 1, AckFailed),
		}, nil},
		{"clean transactions", true, []step{
			send("in", nil),
			txRecv("t1", "in", "p1", false, 1), txSend("t1", "x"), txSend("t1", "y"), commit("t1", rolledBack),
			txRecv("t2", "in", "p2", true, 2), txSend("t2", "x2"), txSend("t2", "y2"), commit("t2", nil),
			recv("x2", DrainPhase, false, 1, AckNone), recv("y2", DrainPhase, false, 1, AckNone),
			txSend("t3", "u"), txSend("t3", "v"), commit("t3", unknown),
		}, nil},
		{"lost, never received", true, []step{send("a", nil)}, []string{"lost"}},
		{"lost after a receive", true, []step{send("a", nil), recv("a", "p1", false, 1, AckNone)}, []string{"lost"}},
		{"never sent", true, []step{recv("x", DrainPhase, false, 1, AckNone)}, []string{"unexpected"}},
		{"definite send failure received", true, []step{send("a", definite), recv("a", DrainPhase, false, 1, AckNone)}, []string{"unexpected"}},
		{"acknowledged, then again", true, []step{send("a", nil), recv("a", "p1", false, 1, AckOK), recv("a", DrainPhase, true, 2, AckNone)}, []string{"acked-redelivered"}},
		{"a second copy", true, []step{send("a", nil), recv("a", "p1", false, 1, AckNone), recv("a", DrainPhase, false, 1, AckNone)},
			[]string{"wrong-count", "duplicated", "wrongly-marked"}},
		{"again, count not raised", true, []step{send("a", nil), recv("a", "p1", false, 1, AckNone), recv("a", DrainPhase, true, 1, AckNone)},
			[]string{"wrong-count", "wrongly-marked"}},
		{"first receipt marked wrongly", true, []step{send("a", nil), recv("a", DrainPhase, true, 1, AckNone)}, []string{"wrongly-marked"}},
		{"twice in the drain", false, []step{send("a", nil), recv("a", DrainPhase, false, 1, AckNone), recv("a", DrainPhase, true, 2, AckNone)}, []string{"duplicated"}},
		{"twice in a phase, strict", true, []step{send("a", nil), recv("a", "p1", false, 1, AckNone), recv("a", "p1", true, 2, AckOK)}, []string{"duplicated"}},
		{"twice in a phase after a reconnect", false, []step{send("a", nil), recv("a", "p1", false, 1, AckNone), recv("a", "p1", true, 2, AckOK)}, nil},
		{"a rolled-back send received", true, []step{txSend("t", "x"), commit("t", rolledBack), recv("x", DrainPhase, false, 1, AckNone)}, []string{"unexpected"}},
		{"a committed send lost", true, []step{txSend("t", "x"), commit("t", nil)}, []string{"lost"}},
		{"a transaction half visible", true, []step{txSend("t", "x"), txSend("t", "y"), commit("t", unknown), recv("x", DrainPhase, false, 1, AckNone)},
			[]string{"partial-transaction"}},
		// A commit of unknown outcome is applied whole or not at all, sends
		// and acknowledgements alike, however many it holds.
		{"unknown, applied whole", true, []step{send("in", nil), txRecv("t", "in", "p1", false, 1), txSend("t", "x"), commit("t", unknown),
			recv("x", DrainPhase, false, 1, AckNone)}, nil},
		{"unknown, undone whole", true, []step{send("in", nil), txRecv("t", "in", "p1", false, 1), txSend("t", "x"), commit("t", unknown),
			recv("in", DrainPhase, true, 2, AckNone)}, nil},
		{"unknown, its one send visible, its receive back", true, []step{send("in", nil), txRecv("t", "in", "p1", false, 1), txSend("t", "x"), commit("t", unknown),
			recv("in", DrainPhase, true, 2, AckNone), recv("x", DrainPhase, false, 1, AckNone)}, []string{"partial-transaction"}},
		{"unknown, its receive acknowledged, its one send not", true, []step{send("in", nil), txRecv("t", "in", "p1", false, 1), txSend("t", "x"), commit("t", unknown)},
			[]string{"partial-transaction"}},
		{"unknown, one of two receives back", true, []step{send("a", nil), send("b", nil), txRecv("t", "a", "p1", false, 1), txRecv("t", "b", "p1", false, 1), commit("t", unknown),
			recv("b", DrainPhase, true, 2, AckNone)}, []string{"partial-transaction"}},
		{"a committed receive again", true, []step{send("in", nil), txRecv("t", "in", "p1", false, 1), commit("t", nil), recv("in", DrainPhase, true, 2, AckNone)},
			[]string{"acked-redelivered"}},
	} {
		h := New()
		h.StrictPhases = c.strict
		for _, s := range c.steps {
			switch {
			case s.commit:
				h.Committed(s.tx, s.err)
			case s.send && s.tx != "":
				h.SentInTx(s.tx, s.id)
			case s.send:
				h.Sending(s.id)
				h.Sent(s.id, s.sendErr)
			case s.tx != "":
				h.ReceivedInTx(s.tx, s.phase, msg(s.id, s.redel, s.count))
			default:
				r := h.Received(s.phase, msg(s.id, s.redel, s.count))
				switch s.ack {
				case AckOK:
					h.Acked(r, nil)
				case AckFailed:
					h.Acked(r, unknown)
				}
			}
		}
		var got []string
		for _, v := range h.Check() {
			got = append(got, v.Kind)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: violations %v, want %v (%v)", c.name, got, c.want, h.Check())
		}
	}
}

func TestReport_GroupsByKindWithExamples(t *testing.T) {
	vs := []Violation{{"lost", "a", "x"}, {"lost", "b", "y"}, {"lost", "c", "z"}, {"unexpected", "d", "w"}}
	var b strings.Builder
	if n := Report(&b, vs, 2); n != 4 {
		t.Fatalf("Report = %d", n)
	}
	want := "3 lost\n  a: x\n  b: y\n  ... and 1 more\n1 unexpected\n  d: w\n"
	if b.String() != want {
		t.Fatalf("report:\n%s\nwant:\n%s", b.String(), want)
	}
}

// A non-durable subscriber's history: a message that never came, or came
// and went with the subscription unacknowledged, is not lost, nor is a
// transaction partly received; a second copy that comes unmarked is still
// a duplicate.
func TestCheck_NonDurableMayMissButNeverGetsAnUnmarkedCopy(t *testing.T) {
	msg := func(id string, redelivered bool, count int) *client.Message {
		return &client.Message{ID: id, Redelivered: redelivered, DeliveryCount: count}
	}
	for _, durable := range []bool{true, false} {
		h := New()
		h.NonDurable = !durable
		for _, id := range []string{"missed", "held", "twice"} {
			h.Sending(id)
			h.Sent(id, nil)
		}
		h.SentInTx("tx", "tx-got")
		h.SentInTx("tx", "tx-missed")
		h.Committed("tx", nil)
		h.Acked(h.Received("p1", msg("tx-got", false, 1)), nil)
		h.Received("p1", msg("held", false, 1))
		h.Acked(h.Received("p1", msg("twice", false, 1)), nil)
		h.Received("p2", msg("twice", false, 1))
		var got []string
		for _, v := range h.Check() {
			got = append(got, v.Kind+" "+v.ID)
		}
		want := "[wrong-count twice duplicated twice acked-redelivered twice wrongly-marked twice]"
		if durable {
			want = "[lost held lost missed wrong-count twice duplicated twice acked-redelivered twice wrongly-marked twice lost twice lost tx-missed partial-transaction tx]"
		}
		if fmt.Sprint(got) != want {
			t.Errorf("durable %v: violations %v, want %s", durable, got, want)
		}
	}
}
