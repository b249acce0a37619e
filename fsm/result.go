package fsm

import "github.com/cairnmq/cairn/fsm/fsmpb"

// Result is the outcome of one command. Err is a rejection (the command
// changed nothing); the other fields are filled by the commands they name.
type Result struct {
	Err error

	// Enqueue: one outcome per message, in order.
	Enqueued []Enqueued
	// Deliver: what was handed to the session, in the order asked.
	Delivered []Delivery
	// Ack: how many deliveries were acknowledged.
	Acked int
	// Ack, Return: delivery ids that did not belong to the session.
	Rejected []uint64
	// Recover, Release, Return: how many deliveries were taken back
	// (pending, delayed or dead). Wake: how many became pending again.
	Returned int
	// Recover: every delivery id below Watermark that the session held was
	// returned; deliveries with this id or higher are made after the recover.
	Watermark uint64
	// Expire, Purge, Moved: how many messages were removed.
	Removed int
	// Move: how many messages were taken out of delivery to move (or, with
	// retarget, given a new target).
	Moved int
	// Seal: how many messages the member holds.
	Held int
	// TxPrepare (one phase), TxDecide: the transaction committed; for a
	// TxDecide that records, the decision that stands.
	Committed bool
}

// Enqueued is the outcome of one message of an Enqueue.
type Enqueued struct {
	// ID is the id of the stored message: the message's own, or for a
	// duplicate the id of the message stored earlier with the same dedup id.
	ID        string
	Duplicate bool
}

// Delivery is one message handed to a session.
type Delivery struct {
	DeliveryID uint64
	// Message is shared with the state machine and must not be modified.
	// Its body is where Body says when Body.Away(): the caller reads it
	// from there (Member.Delivered).
	Message       *fsmpb.Message
	Body          BodyRef
	Redelivered   bool
	DeliveryCount uint32
	// Consumer is the session's consumer it went to ("" when its Deliver
	// named none).
	Consumer string
}
