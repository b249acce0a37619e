package frontend

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
)

func TestWireError_EveryRowGivesItsTypeAndKeepsTheText(t *testing.T) {
	for _, row := range clientErrors {
		err := WireError(fmt.Errorf("member q#0: %w", row.from))
		if !errors.Is(err, row.to) || !errors.Is(err, row.from) {
			t.Errorf("%v became %v, which is not %v", row.from, err, row.to)
		}
		if want := "cairn: member q#0: " + row.from.Error(); err.Error() != want {
			t.Errorf("text %q, want %q", err.Error(), want)
		}
	}
	// member errors are marked with the router's outcomes.
	for _, e := range []error{member.ErrNotLeader, member.ErrBusy, fmt.Errorf("%w: x", destination.ErrOutcomeUnknown)} {
		if !errors.Is(WireError(e), transport.ErrUnavailable) {
			t.Errorf("%v is not unavailable to a client", e)
		}
	}
	typed := fmt.Errorf("%w: but also %w", transport.ErrDestinationFull, fsm.ErrSealed)
	if got := WireError(typed); got != typed {
		t.Errorf("an error with a client type already became %v", got)
	}
	other := errors.New("disk on fire")
	if got := WireError(other); got != other {
		t.Errorf("an error no row names became %v", got)
	}
}
