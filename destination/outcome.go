package destination

import (
	"errors"

	"github.com/cairnmq/cairn/fsm"
)

// Outcome is what one try of a command learned about it.
type Outcome int

const (
	// Stored: the member applied the command.
	Stored Outcome = iota
	// NotSent: the command is certainly in no member's log (no host, the
	// stream never opened, not the leader, the member is sealed): it may
	// be tried again, on any member.
	NotSent
	// Unknown: the command may be in the member's log and no answer came
	// (leadership lost mid-way, a broken stream). It is never sent to
	// another member; only a command its member applies once however
	// often it comes (a send with a dedup id) goes to the same one again.
	Unknown
	// Refused: an answer that stored nothing and would not change if
	// asked again (a bad request, a full queue, a stopping node).
	Refused
)

var (
	// ErrNotSent marks an error whose command is certainly in no log.
	ErrNotSent = errors.New("not sent")
	// ErrOutcomeUnknown marks an error whose command may be in its
	// member's log without an answer. The client sees it as
	// ErrDeliveryUnknown or ErrCommitUnknown.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

// OutcomeOf classifies a try's error (nil: Stored).
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Stored
	case errors.Is(err, ErrOutcomeUnknown):
		return Unknown
	case errors.Is(err, ErrNotSent), errors.Is(err, fsm.ErrSealed):
		return NotSent
	}
	return Refused
}

// MarkNotSent marks err as certainly not sent (errors.Is(…, ErrNotSent)),
// keeping its message.
func MarkNotSent(err error) error { return notSent{err} }

type notSent struct{ error }

func (e notSent) Unwrap() []error { return []error{e.error, ErrNotSent} }
