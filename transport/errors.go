package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Errors that cross the wire. Each has a reason string that travels with it
// (in the gRPC status details, or in-band on the Connect stream) so that the
// client gets back the same sentinel, checkable with errors.Is.
var (
	// ErrUnknownDestination: the destination does not exist (and is not
	// created on first use, or the operation never creates it).
	ErrUnknownDestination = errors.New("cairn: unknown destination")
	// ErrDestinationExists: create of a destination that exists.
	ErrDestinationExists = errors.New("cairn: destination already exists")
	// ErrInvalidName: a destination name or member address breaks the rules.
	ErrInvalidName = errors.New("cairn: invalid destination name")
	// ErrMessageTooLarge: a message is over the node's maximum message size.
	ErrMessageTooLarge = errors.New("cairn: message too large")
	// ErrInvalidArgument: a field is out of range (priority over 9, negative ttl).
	ErrInvalidArgument = errors.New("cairn: invalid argument")
	// ErrInvalidSelector: a message selector does not parse; the text names
	// the position. It is an ErrInvalidArgument.
	ErrInvalidSelector = fmt.Errorf("%w: invalid selector", ErrInvalidArgument)
	// ErrDestinationKind: a send to a topic, a publish to a queue, a
	// subscription to a queue, or a send to a subscription.
	ErrDestinationKind = errors.New("cairn: wrong kind of destination")
	// ErrSubscriptionInUse: a second consumer of an unshared durable
	// subscription, or the deletion of a subscription a consumer uses.
	ErrSubscriptionInUse = errors.New("cairn: subscription in use")
	// ErrMalformed: a request lacks what it needs or makes no sense.
	ErrMalformed = errors.New("cairn: malformed request")
	// ErrDestinationFull: the destination holds its maximum size.
	ErrDestinationFull = errors.New("cairn: destination full")
	// ErrUnavailable: the node cannot serve now (no leader, shutting down).
	ErrUnavailable = errors.New("cairn: unavailable")
	// ErrDeliveryUnknown: a send may or may not have been enqueued.
	ErrDeliveryUnknown = errors.New("cairn: delivery unknown")
	// ErrLostServer: the server no longer holds the session's state that the
	// call relied on (its deliveries were released).
	ErrLostServer = errors.New("cairn: lost server")
	// ErrClientIDInUse: another connection holds this client id.
	ErrClientIDInUse = errors.New("cairn: client id in use")
	// ErrLimitReached: the request would take the connection or the node
	// over one of its limits (sessions or consumers of a connection, ...);
	// nothing was done.
	ErrLimitReached = errors.New("cairn: limit reached")
	// ErrDestinationDeleted: the destination was deleted under a consumer.
	ErrDestinationDeleted = errors.New("cairn: destination deleted")
	// ErrUnknownSession: the request names a session or consumer that this
	// connection does not have open.
	ErrUnknownSession = errors.New("cairn: unknown session or consumer")
	// ErrUnknownConnection: no live node serves a connection of that id.
	ErrUnknownConnection = errors.New("cairn: unknown connection")
	// ErrNodeStopping: the answering node is stopping; the request was not
	// carried out and another node may take it. It is an ErrUnavailable.
	ErrNodeStopping = fmt.Errorf("%w: node stopping", ErrUnavailable)
	// ErrConnectionDestroyed: an operator destroyed the connection; the
	// client does not reconnect.
	ErrConnectionDestroyed = errors.New("cairn: connection destroyed")
	// ErrTransactionRolledBack: a transaction was rolled back (a failover
	// lost its work, or part of it could not be done); nothing of it
	// happened, and the application may do it again.
	ErrTransactionRolledBack = errors.New("cairn: transaction rolled back")
	// ErrCommitUnknown: a commit may or may not have happened; its primary
	// could not be asked.
	ErrCommitUnknown = errors.New("cairn: commit outcome unknown")
	// ErrNotAuthenticated: the node did not learn who is calling (no
	// credentials, or wrong ones); nothing was done.
	ErrNotAuthenticated = errors.New("cairn: not authenticated")
	// ErrNotAuthorised: the caller may not do that; nothing was done.
	ErrNotAuthorised = errors.New("cairn: not authorised")
	// ErrUserExists and ErrUnknownUser: user management found the user
	// when it should not have, or not when it should.
	ErrUserExists  = errors.New("cairn: user already exists")
	ErrUnknownUser = errors.New("cairn: unknown user")
)

var reasons = []struct {
	err    error
	reason string
	code   codes.Code
}{
	{ErrUnknownDestination, "UNKNOWN_DESTINATION", codes.NotFound},
	{ErrDestinationExists, "DESTINATION_EXISTS", codes.AlreadyExists},
	{ErrInvalidName, "INVALID_NAME", codes.InvalidArgument},
	{ErrMessageTooLarge, "MESSAGE_TOO_LARGE", codes.InvalidArgument},
	// Before ErrInvalidArgument, which it wraps.
	{ErrInvalidSelector, "INVALID_SELECTOR", codes.InvalidArgument},
	{ErrInvalidArgument, "INVALID_ARGUMENT", codes.InvalidArgument},
	{ErrMalformed, "MALFORMED_REQUEST", codes.InvalidArgument},
	{ErrDestinationKind, "WRONG_DESTINATION_KIND", codes.FailedPrecondition},
	{ErrSubscriptionInUse, "SUBSCRIPTION_IN_USE", codes.FailedPrecondition},
	{ErrDestinationFull, "DESTINATION_FULL", codes.ResourceExhausted},
	// Before ErrUnavailable, which it wraps.
	{ErrNodeStopping, "NODE_STOPPING", codes.Unavailable},
	{ErrUnavailable, "UNAVAILABLE", codes.Unavailable},
	{ErrDeliveryUnknown, "DELIVERY_UNKNOWN", codes.Unknown},
	{ErrLostServer, "LOST_SERVER", codes.FailedPrecondition},
	{ErrClientIDInUse, "CLIENT_ID_IN_USE", codes.AlreadyExists},
	{ErrLimitReached, "LIMIT_REACHED", codes.ResourceExhausted},
	{ErrDestinationDeleted, "DESTINATION_DELETED", codes.NotFound},
	{ErrUnknownSession, "UNKNOWN_SESSION", codes.FailedPrecondition},
	{ErrUnknownConnection, "UNKNOWN_CONNECTION", codes.NotFound},
	{ErrConnectionDestroyed, "CONNECTION_DESTROYED", codes.Aborted},
	{ErrTransactionRolledBack, "TRANSACTION_ROLLED_BACK", codes.Aborted},
	{ErrCommitUnknown, "COMMIT_UNKNOWN", codes.Unknown},
	{ErrNotAuthenticated, "NOT_AUTHENTICATED", codes.Unauthenticated},
	{ErrNotAuthorised, "NOT_AUTHORISED", codes.PermissionDenied},
	{ErrUserExists, "USER_EXISTS", codes.AlreadyExists},
	{ErrUnknownUser, "UNKNOWN_USER", codes.NotFound},
}

const errorDomain = "cairnmq.io"

// Error is an error received from a server: its text is the server's, and
// it unwraps to the sentinel its reason names.
type Error struct {
	Reason  string
	Message string
	kind    error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel (nil if the reason is unknown to this build).
func (e *Error) Unwrap() error { return e.kind }

// Typed reports whether err is, or wraps, one of the client API's typed
// errors.
func Typed(err error) bool {
	_, _, ok := lookup(err)
	return ok
}

func lookup(err error) (reason string, code codes.Code, ok bool) {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.reason, r.code, true
		}
	}
	return "", codes.Unknown, false
}

func sentinel(reason string) error {
	for _, r := range reasons {
		if r.reason == reason {
			return r.err
		}
	}
	return nil
}

// Status converts an error to the gRPC status a server returns.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	reason, code, ok := lookup(err)
	if !ok {
		return status.Error(codes.Internal, err.Error())
	}
	st, derr := status.New(code, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain})
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// ServerAnswered reports whether a gRPC error is a Cairn server's typed
// answer, as opposed to a failure of the call itself (no connection, reset,
// deadline), whose outcome on the server is not known.
func ServerAnswered(err error) bool {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain {
			return true
		}
	}
	return false
}

// NoProgress reports whether a stream ended with an error that a new
// stream, to the same node or another, would meet again: gRPC's refusal of
// a frame over a size limit, on either side, or of one that does not
// decode, or a Cairn node's typed refusal other than being unavailable.
// Reconnecting cannot get past those, so they are reported rather than
// retried. Everything else, whatever its code, may be a lost node: a
// closed connection, a GOAWAY, and a stream reset (which gRPC reports as
// Internal or ResourceExhausted, as it does a proxy's failures).
func NoProgress(err error) bool {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return false
	}
	if ServerAnswered(err) {
		return !errors.Is(FromStatus(err), ErrUnavailable)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.ResourceExhausted:
		return strings.Contains(msg, "larger than max")
	case codes.Internal:
		return strings.Contains(msg, "failed to unmarshal the received message")
	}
	return false
}

// FromStatus converts an error returned by a gRPC call to the typed error.
func FromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain {
			return &Error{Reason: info.Reason, Message: st.Message(), kind: sentinel(info.Reason)}
		}
	}
	switch st.Code() {
	case codes.Canceled:
		return context.Canceled
	case codes.DeadlineExceeded:
		return &Error{Reason: "DEADLINE_EXCEEDED", Message: st.Message(), kind: context.DeadlineExceeded}
	case codes.Unavailable:
		msg := "cairn: node unreachable: " + st.Message()
		if strings.Contains(st.Message(), "server preface") {
			// What a client in clear hears from a node serving TLS only.
			msg += " (if the node serves TLS, connect over TLS with its CA: --tls-ca, or Options.TLS)"
		}
		return &Error{Reason: "UNAVAILABLE", Message: msg, kind: ErrUnavailable}
	case codes.ResourceExhausted:
		// gRPC's own limit on message size, hit before the server could look.
		return &Error{Reason: "MESSAGE_TOO_LARGE", Message: "cairn: message too large: " + st.Message(), kind: ErrMessageTooLarge}
	}
	return err
}

// ToProto converts an error for the Connect stream.
func ToProto(err error) *clientpb.Error {
	if err == nil {
		return nil
	}
	reason, _, _ := lookup(err)
	if reason == "" {
		reason = "INTERNAL"
	}
	return &clientpb.Error{Reason: reason, Message: err.Error()}
}

// FromProto converts an error received on the Connect stream.
func FromProto(e *clientpb.Error) error {
	if e == nil {
		return nil
	}
	return &Error{Reason: e.Reason, Message: e.Message, kind: sentinel(e.Reason)}
}
