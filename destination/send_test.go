package destination

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cairnmq/cairn/fsm"
)

var (
	errNoHost   = MarkNotSent(errors.New("no host"))
	errNoAnswer = fmt.Errorf("stream broke: %w", ErrOutcomeUnknown)
	errFull     = errors.New("queue full")
)

// drive runs a plan as the front-end does (Node.enqueue), with answer
// standing in for relaying try number k to member: the members tried, in
// order, and the send's error. The send's time is up after limit tries.
func drive(cands []Candidate, addressed int, idempotent bool, dedupID string, limit int, answer func(k, member int) error) (tried []int, err error) {
	p := PlanSend(cands, addressed, idempotent, dedupID)
	for k := 0; ; k++ {
		m, patient := p.Next(cands, uint64(k))
		if patient != (addressed >= 0 || idempotent) {
			return tried, fmt.Errorf("try %d patient = %v", k, patient)
		}
		tried = append(tried, m)
		step, err := p.After(answer(k, m), len(tried) >= limit)
		if step == Done {
			return tried, err
		}
	}
}

func three() []Candidate {
	return []Candidate{{Index: 0, Available: true}, {Index: 1, Available: true}, {Index: 2, Available: true}}
}

// always answers every try with err.
func always(err error) func(int, int) error { return func(int, int) error { return err } }

// firstThen answers the first try with first, the others with then.
func firstThen(first, then error) func(int, int) error {
	return func(k, _ int) error {
		if k == 0 {
			return first
		}
		return then
	}
}

func TestSendPlan_Specification(t *testing.T) {
	idem := DedupMember(three(), "d-1")
	cases := []struct {
		name       string
		addressed  int
		idempotent bool
		limit      int
		answer     func(k, member int) error
		// want checks the members tried and the send's error.
		want func(tried []int, err error) string
	}{
		{"a stored send is tried once", -1, false, 10, always(nil), func(tried []int, err error) string {
			return expect(len(tried) == 1 && err == nil, "one try, no error")
		}},
		{"an unknown outcome is never sent to another member", -1, false, 10, always(errNoAnswer), func(tried []int, err error) string {
			return expect(len(tried) == 1 && OutcomeOf(err) == Unknown, "one try, unknown")
		}},
		{"an idempotent send of unknown outcome goes to the same member again", -1, true, 10, firstThen(errNoAnswer, nil), func(tried []int, err error) string {
			return expect(slices.Equal(tried, []int{idem, idem}) && err == nil, fmt.Sprintf("tries %v, no error", []int{idem, idem}))
		}},
		{"once unknown, the send stays unknown whatever later tries say", -1, true, 4, firstThen(errNoAnswer, errNoHost), func(tried []int, err error) string {
			return expect(len(tried) == 4 && !slices.ContainsFunc(tried, func(m int) bool { return m != idem }) && OutcomeOf(err) == Unknown,
				fmt.Sprintf("4 tries of member %d, unknown", idem))
		}},
		{"once unknown, a later refusal is reported unknown", -1, true, 10, firstThen(errNoAnswer, errFull), func(tried []int, err error) string {
			return expect(len(tried) == 2 && OutcomeOf(err) == Unknown && errors.Is(err, ErrOutcomeUnknown), "two tries, unknown")
		}},
		{"a certainly-not-sent send goes to the next member", -1, false, 10, firstThen(errNoHost, nil), func(tried []int, err error) string {
			return expect(len(tried) == 2 && tried[0] != tried[1] && err == nil, "two members tried, no error")
		}},
		{"each member once a round while none takes the send", -1, false, 7, always(errNoHost), func(tried []int, err error) string {
			rounds := [][]int{slices.Sorted(slices.Values(tried[0:3])), slices.Sorted(slices.Values(tried[3:6]))}
			return expect(slices.Equal(rounds[0], []int{0, 1, 2}) && slices.Equal(rounds[1], []int{0, 1, 2}) && OutcomeOf(err) == NotSent,
				"every member once in each round, then not sent")
		}},
		{"an idempotent send always goes to the member its dedup id hashes to", -1, true, 5, always(errNoHost), func(tried []int, err error) string {
			return expect(!slices.ContainsFunc(tried, func(m int) bool { return m != idem }), fmt.Sprintf("only member %d", idem))
		}},
		// Its one try waits for the member's host for the whole window.
		{"an addressed send goes only to its member", 2, false, 5, always(errNoHost), func(tried []int, err error) string {
			return expect(slices.Equal(tried, []int{2}) && OutcomeOf(err) == NotSent, "one try of member 2, not sent")
		}},
		{"a refusal ends the send", -1, false, 10, always(errFull), func(tried []int, err error) string {
			return expect(len(tried) == 1 && errors.Is(err, errFull), "one try, the refusal")
		}},
		{"a sealed member's refusal moves the send on", -1, false, 10, firstThen(fsm.ErrSealed, nil), func(tried []int, err error) string {
			return expect(len(tried) == 2 && tried[0] != tried[1] && err == nil, "two members tried, no error")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tried, err := drive(three(), c.addressed, c.idempotent, "d-1", c.limit, c.answer)
			if why := c.want(tried, err); why != "" {
				t.Fatalf("tried %v, error %v; want %s", tried, err, why)
			}
		})
	}
}

func expect(ok bool, want string) string {
	if ok {
		return ""
	}
	return want
}

func TestSendPlan_ADrainingMemberTakesNoSends(t *testing.T) {
	cands := three()
	cands[1].Draining = true
	cands[1].Local = true // hosted here, and the emptiest: still not chosen
	cands[0].Pending, cands[2].Pending = 100, 100
	for k := range 20 {
		tried, err := drive(cands, -1, k%2 == 0, fmt.Sprint("d-", k), 10, always(nil))
		if err != nil || slices.Contains(tried, 1) {
			t.Fatalf("send %d tried %v (error %v); member 1 drains", k, tried, err)
		}
	}
	if i, ok := ForMove(cands, 0, 0); ok && i == 1 {
		t.Fatal("ForMove chose the draining member")
	}
	if Pin(cands, 0) == 1 {
		t.Fatal("Pin chose the draining member")
	}
}

func TestDedupMember_SameOnEveryNode(t *testing.T) {
	// Two front-ends see different hosts and loads; the member is the same.
	a, b := three(), three()
	a[0].Local, a[1].Pending = true, 500
	b[2].Local, b[0].Available = true, false
	for k := range 100 {
		id := fmt.Sprint("id-", k)
		if x, y := DedupMember(a, id), DedupMember(b, id); x != y {
			t.Fatalf("dedup id %s names member %d on one node, %d on another", id, x, y)
		}
	}
	all := three()
	for i := range all {
		all[i].Draining = true
	}
	if got := DedupMember(all, "x"); got != -1 {
		t.Fatalf("with every member draining, DedupMember = %d, want -1", got)
	}
}

func TestPin_TheMemberItsNodeHostsThenAnother(t *testing.T) {
	cands := three()
	cands[1].Local = true
	cands[0].Pending, cands[2].Pending = 500, 500 // more needed there, but not here
	for r := range uint64(3) {
		if got := Pin(cands, r); got != 1 {
			t.Fatalf("rotation %d: Pin = %d, want 1, the member this node hosts", r, got)
		}
	}
	// The member moves to another node's host: the next consumer goes to
	// the one that needs it most.
	cands[1].Local, cands[0].Consumers = false, 1
	if got := Pin(cands, 0); got != 2 {
		t.Fatalf("after the local member left, Pin = %d, want 2 (no consumers, 500 pending)", got)
	}
	// No member has a host (an election): any one not draining, to wait.
	for i := range cands {
		cands[i].Available = false
	}
	cands[0].Draining = true
	for r := range uint64(3) {
		if got := Pin(cands, r); got == 0 {
			t.Fatalf("rotation %d: with no host anywhere, Pin chose the draining member", r)
		}
	}
}

func TestForMove_StrandedMessagesGoOnlyWhereConsumersAre(t *testing.T) {
	cands := three()
	cands[2].Consumers = 1
	if got, ok := ForMove(cands, 0, 0); !ok || got != 2 {
		t.Fatalf("ForMove from 0 = %d, %v; want 2, the only member with consumers", got, ok)
	}
	cands[2].Consumers = 0
	if got, ok := ForMove(cands, 0, 0); ok {
		t.Fatalf("ForMove chose %d with no consumer anywhere; stranded messages stay", got)
	}
	cands[0].Draining = true
	if got, ok := ForMove(cands, 0, 0); !ok || got == 0 {
		t.Fatalf("a draining member's messages go anywhere else: ForMove = %d, %v", got, ok)
	}
}

func TestOutcomeOf(t *testing.T) {
	cases := []struct {
		err  error
		want Outcome
	}{
		{nil, Stored},
		{errNoHost, NotSent},
		{fmt.Errorf("relay: %w", errNoHost), NotSent},
		{fmt.Errorf("member q#0: %w", fsm.ErrSealed), NotSent},
		{errNoAnswer, Unknown},
		{errFull, Refused},
	}
	for _, c := range cases {
		if got := OutcomeOf(c.err); got != c.want {
			t.Errorf("OutcomeOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if got := MarkNotSent(errors.New("no leader")).Error(); got != "no leader" {
		t.Errorf("MarkNotSent changed the message to %q", got)
	}
}

func TestPlanRepeat_AnUnansweredTryIsMadeAgain(t *testing.T) {
	cases := []struct {
		name    string
		answers []error
		expired bool // the last answer comes after the window
		want    Outcome
	}{
		{"answered at the third try", []error{errNoAnswer, errNoAnswer, nil}, false, Stored},
		{"refused after an unanswered try", []error{errNoAnswer, errFull}, false, Unknown},
		{"no host until the window's end, after an unanswered try", []error{errNoAnswer, errNoHost}, true, Unknown},
		{"refused at once", []error{errFull}, false, Refused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := PlanRepeat()
			for k, a := range c.answers {
				last := k == len(c.answers)-1
				step, err := p.After(a, last && c.expired)
				if !last {
					if step != Pause {
						t.Fatalf("try %d: step %v, want a pause and another try", k, step)
					}
					continue
				}
				if step != Done || OutcomeOf(err) != c.want {
					t.Fatalf("last try: step %v, error %v; want done, outcome %v", step, err, c.want)
				}
			}
		})
	}
	if err := PlanRepeat().Abandon(errFull); !errors.Is(err, errFull) || OutcomeOf(err) == Unknown {
		t.Fatalf("abandoned before any unanswered try: %v, want the cause as it is", err)
	}
	p := PlanRepeat()
	p.After(errNoAnswer, false)
	if err := p.Abandon(errFull); OutcomeOf(err) != Unknown {
		t.Fatalf("abandoned after an unanswered try: %v, want unknown", err)
	}
}
