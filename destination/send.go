package destination

import (
	"fmt"
	"slices"
	"time"
)

// RouteWindow bounds how long a command keeps looking for its member's
// host through an election: a host failure is detected, a new leader
// elected and its takeover done well within it.
const RouteWindow = 10 * time.Second

// SendPlan is one send's routing, try after try. The front-end asks Next
// for the member of each try, carries the try out (waiting for the
// member's host only when Next says patient), and hands its error to
// After, which says what to do next. The rules:
//   - a send addressed to a member (NAME#I) goes only to it;
//   - an idempotent send goes only to DedupMember's member, and is sent
//     again there while its host is missing or its outcome unknown;
//   - any other send takes the router's choice (ForSend) and, when a try
//     certainly was not sent, the next member at once, pausing only once
//     every member failed;
//   - a send of unknown outcome is never sent to another member, and to
//     its own again only if idempotent; once any try's outcome was
//     unknown, the send's stays unknown whatever later tries say.
type SendPlan struct {
	addressed   int // -1: the router chooses
	idempotent  bool
	resendTo    int    // the one member tries go to (-1: none yet)
	failed      []bool // members whose try was certainly not sent, this round
	last        int    // the member of the latest try
	mayBeStored bool   // a try's outcome was unknown
}

// Step is what the front-end does after a try.
type Step int

const (
	// Done: the send is over; After's error is its result.
	Done Step = iota
	// Again: try the next member at once.
	Again
	// Pause: wait a little (or for the caller's end: Abandon), then try
	// again.
	Pause
)

// PlanSend plans a send to the destination cands describes: to member
// addressed (-1: the router chooses), idempotent if every message carries
// a dedup id, the first being dedupID.
func PlanSend(cands []Candidate, addressed int, idempotent bool, dedupID string) *SendPlan {
	p := &SendPlan{addressed: addressed, idempotent: idempotent, resendTo: -1, failed: make([]bool, len(cands)), last: -1}
	if idempotent && addressed < 0 {
		p.resendTo = DedupMember(cands, dedupID)
	}
	return p
}

// PlanRepeat plans a command to one member that the member applies once
// however often it comes (a Recover naming its attempt): a try of unknown
// outcome is made again, so a failover costs a slower answer rather than
// an error the client cannot act on. Only After and Abandon are used.
func PlanRepeat() *SendPlan {
	return &SendPlan{addressed: 0, idempotent: true, resendTo: -1, last: 0}
}

// Next is the member of the next try, from the members as they are now
// (in the order PlanSend got them). patient says whether the try waits
// for the member's host to appear; an impatient try reports NotSent at
// once if there is none, so that another member may take the send.
func (p *SendPlan) Next(cands []Candidate, rotation uint64) (member int, patient bool) {
	switch {
	case p.addressed >= 0:
		p.last = p.addressed
	case p.resendTo >= 0:
		p.last = p.resendTo
	default:
		if len(p.failed) != len(cands) {
			p.failed = make([]bool, len(cands)) // the members changed: a new round
		}
		open := slices.Clone(cands)
		for i := range open {
			open[i].Available = open[i].Available && !p.failed[i]
		}
		i, ok := ForSend(open, rotation)
		if !ok {
			i = anyMember(cands, p.failed, rotation)
		}
		p.last = i
		return i, false
	}
	return p.last, true
}

// After takes the latest try's error (nil: stored) and whether the send's
// time is up (its deadline passed or its caller left), and says what to do
// next; with Done, the error is the send's.
func (p *SendPlan) After(err error, expired bool) (Step, error) {
	step, err := p.after(err, expired)
	if step == Done && err != nil && p.mayBeStored && OutcomeOf(err) != Unknown {
		err = fmt.Errorf("%w: an earlier try got no answer, then: %v", ErrOutcomeUnknown, err)
	}
	return step, err
}

func (p *SendPlan) after(err error, expired bool) (Step, error) {
	o := OutcomeOf(err)
	switch {
	case o == Stored:
		return Done, nil
	case expired:
		return Done, err
	case p.resendTo >= 0 && o == NotSent:
		return Pause, nil // no host for the member yet
	case o == Unknown:
		if !p.idempotent {
			return Done, err
		}
		p.resendTo, p.mayBeStored = p.last, true
		return Pause, nil
	case o == NotSent && p.addressed < 0:
		p.failed[p.last] = true
		if slices.Contains(p.failed, false) {
			return Again, nil
		}
		clear(p.failed)
		return Pause, nil
	}
	return Done, err
}

// Abandon is the send's error when its caller stops waiting during a
// pause for cause (its context ended, the node is stopping).
func (p *SendPlan) Abandon(cause error) error {
	if p.mayBeStored {
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, cause)
	}
	return cause
}
