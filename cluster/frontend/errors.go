package frontend

import (
	"context"
	"errors"

	"github.com/cairnmq/cairn/fsm/selector"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/transport"
)

// The client boundary: what the client API says of the errors of the
// layers below.

// clientErrors is the client boundary's table: the errors of the layers
// below and the client API's typed error each becomes (transport/errors.go
// then gives each its wire reason and gRPC code). The first match wins.
var clientErrors = []struct{ from, to error }{
	{fsm.ErrInvalidName, transport.ErrInvalidName},
	{fsm.ErrDestinationExists, transport.ErrDestinationExists},
	{fsm.ErrUnknownDestination, transport.ErrUnknownDestination},
	{fsm.ErrMemberFull, transport.ErrDestinationFull},
	{fsm.ErrSealed, transport.ErrUnavailable},
	{fsm.ErrInvalidMessage, transport.ErrInvalidArgument},
	{fsm.ErrInvalidSettings, transport.ErrInvalidArgument},
	{fsm.ErrDuplicateMessageID, transport.ErrInvalidArgument},
	{fsm.ErrMalformed, transport.ErrMalformed},
	{fsm.ErrClientIDInUse, transport.ErrClientIDInUse},
	{fsm.ErrUserExists, transport.ErrUserExists},
	{fsm.ErrUnknownUser, transport.ErrUnknownUser},
	{selector.ErrInvalid, transport.ErrInvalidSelector},
	{fsm.ErrUnknownSession, transport.ErrLostServer},
	{fsm.ErrSessionOwned, transport.ErrLostServer},
	{destination.ErrNotSent, transport.ErrUnavailable}, // member.ErrNotLeader, ErrBusy, ErrStopped
	{destination.ErrOutcomeUnknown, transport.ErrUnavailable},
}

// WireError gives an error of the layers below the client API's type
// (clientErrors), keeping its text. One that has a client type already,
// or is its caller's context ending, is returned as it is.
func WireError(err error) error {
	if err == nil || transport.Typed(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for _, e := range clientErrors {
		if errors.Is(err, e.from) {
			return &typedError{kind: e.to, err: err}
		}
	}
	return err
}

// typedError gives an error of a lower layer the client API's type, keeping
// its text: "cairn: " and the lower layer's words.
type typedError struct{ kind, err error }

func (e *typedError) Error() string { return "cairn: " + e.err.Error() }

func (e *typedError) Unwrap() []error { return []error{e.kind, e.err} }
