package client

import (
	"errors"

	"github.com/cairnmq/cairn/transport"
)

// Typed errors; every error the library returns for these conditions
// matches with errors.Is.
var (
	// ErrLostServer: the server no longer holds the state a call relied on
	// (an acknowledge for messages that were released), or the connection to
	// the server was lost.
	ErrLostServer = transport.ErrLostServer
	// ErrDeliveryUnknown: a send may or may not have been enqueued; the
	// error names the message id and the member.
	ErrDeliveryUnknown = transport.ErrDeliveryUnknown
	// ErrUnknownDestination: the destination does not exist and the server
	// does not create destinations on first use.
	ErrUnknownDestination = transport.ErrUnknownDestination
	// ErrDestinationExists: create of a destination that exists.
	ErrDestinationExists = transport.ErrDestinationExists
	// ErrInvalidName: a destination name or member address breaks the rules.
	ErrInvalidName = transport.ErrInvalidName
	// ErrMessageTooLarge: a message is over the server's maximum size.
	ErrMessageTooLarge = transport.ErrMessageTooLarge
	// ErrInvalidArgument: a value is out of range.
	ErrInvalidArgument = transport.ErrInvalidArgument
	// ErrInvalidSelector: a consumer's message selector does not parse; the
	// error names the position. It is an ErrInvalidArgument too.
	ErrInvalidSelector = transport.ErrInvalidSelector
	// ErrDestinationKind: a send to a topic, a publish to a queue, or a
	// subscription to a queue.
	ErrDestinationKind = transport.ErrDestinationKind
	// ErrSubscriptionInUse: a second consumer of an unshared durable
	// subscription, or deleting a subscription a consumer uses.
	ErrSubscriptionInUse = transport.ErrSubscriptionInUse
	// ErrMalformed: the server could not make sense of a request.
	ErrMalformed = transport.ErrMalformed
	// ErrDestinationFull: the destination holds its maximum size.
	ErrDestinationFull = transport.ErrDestinationFull
	// ErrUnavailable: no node could serve the request.
	ErrUnavailable = transport.ErrUnavailable
	// ErrClientIDInUse: another connection holds the client id.
	ErrClientIDInUse = transport.ErrClientIDInUse
	// ErrLimitReached: the request would take the connection or the node
	// over one of its limits; nothing was done.
	ErrLimitReached = transport.ErrLimitReached
	// ErrDestinationDeleted: the consumer's destination was deleted.
	ErrDestinationDeleted = transport.ErrDestinationDeleted
	// ErrConnectionDestroyed: an operator destroyed the connection (cairn
	// connection destroy); it does not reconnect.
	ErrConnectionDestroyed = transport.ErrConnectionDestroyed
	// ErrUnknownConnection: no live node serves a connection of that id.
	ErrUnknownConnection = transport.ErrUnknownConnection
	// ErrTransactionRolledBack: a commit did nothing: the transaction's
	// sends were dropped and its receives come again, marked redelivered;
	// the application may do the same work again.
	ErrTransactionRolledBack = transport.ErrTransactionRolledBack
	// ErrCommitUnknown: a commit may or may not have happened; the
	// transaction's primary could not be asked within the reconnect
	// blocking time.
	ErrCommitUnknown = transport.ErrCommitUnknown
	// ErrNotAuthenticated: the node did not learn who is calling (no
	// credentials, or wrong ones: Options.User and Password, or a client
	// certificate); nothing was done.
	ErrNotAuthenticated = transport.ErrNotAuthenticated
	// ErrNotAuthorised: the caller's user may not do that; nothing was
	// done.
	ErrNotAuthorised = transport.ErrNotAuthorised
	// ErrUserExists and ErrUnknownUser: a user of that name exists
	// already, or does not.
	ErrUserExists  = transport.ErrUserExists
	ErrUnknownUser = transport.ErrUnknownUser
	// ErrClosed: the connection, session, consumer or producer was closed
	// by the application.
	ErrClosed = errors.New("cairn: closed")
)
