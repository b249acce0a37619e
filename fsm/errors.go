package fsm

import "errors"

// Rejections: a command that breaks a rule is refused, changes nothing, and
// every replica refuses it identically. They are returned in Result.Err.
var (
	// ErrUnknownSession: the session is not open on this member (never
	// opened, or released because it closed or its front-end died).
	ErrUnknownSession = errors.New("session is not open on this member")
	// ErrSessionOwned: the session id is open under another owner.
	ErrSessionOwned = errors.New("session is open under another owner")
	// ErrDuplicateMessageID: a message with this id is already stored.
	ErrDuplicateMessageID = errors.New("a message with this id is already stored")
	// ErrMemberFull: the member would hold more than its limits.
	ErrMemberFull = errors.New("member is full")
	// ErrSealed: the member is draining (being removed from its
	// destination) and takes no new messages.
	ErrSealed = errors.New("member is draining and takes no new messages")
	// ErrInvalidMessage: the message breaks a rule (empty id, priority over 9).
	ErrInvalidMessage = errors.New("invalid message")
	// ErrMalformed: a command lacks a field it needs (an empty session id).
	ErrMalformed = errors.New("malformed command")
	// ErrInvalidName: a destination name breaks the naming rules.
	ErrInvalidName = errors.New("invalid destination name")
	// ErrInvalidSettings: negative limits or an impossible placement.
	ErrInvalidSettings = errors.New("invalid settings")
	// ErrDestinationExists: create of a destination that exists.
	ErrDestinationExists = errors.New("destination already exists")
	// ErrTxRefused: a transaction could not be prepared here (a delivery it
	// acknowledges is no longer its session's, a message cannot be stored,
	// or it was rolled back already); nothing changed.
	ErrTxRefused = errors.New("transaction refused")
	// ErrUnknownDestination: the destination does not exist.
	ErrUnknownDestination = errors.New("unknown destination")
	// ErrUnknownMember: a shared group holds no member of that name (not
	// added yet, or dropped).
	ErrUnknownMember = errors.New("no such member in this group")
	// ErrClientIDInUse: another connection holds the client id.
	ErrClientIDInUse = errors.New("client id in use")
	// ErrUserExists: a user of that name exists already.
	ErrUserExists = errors.New("user already exists")
	// ErrUnknownUser: there is no user of that name.
	ErrUnknownUser = errors.New("unknown user")
)

// ErrCorrupt marks an entry that cannot be applied at all: it does not
// decode, is of a newer version, or carries a command this state machine does
// not own. It is never a rejection: the log is damaged or was written by
// newer software, and the replica must stop rather than diverge.
var ErrCorrupt = errors.New("corrupt log entry")
