package client

import (
	"context"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// Message is a message to send or one received.
type Message struct {
	// ID is set by Send (generated when empty) and on received messages.
	ID         string
	Body       []byte
	Properties map[string]string
	// DedupID, when set, makes the member drop a second message with the
	// same id within its duplicate-detection window.
	DedupID string

	// Set on received messages.
	Priority      int
	Expiration    time.Time // zero: never expires
	Timestamp     time.Time // when the member enqueued it
	Redelivered   bool
	DeliveryCount int
	Destination   string
	// Member is the member the message was sent to or received from.
	Member string

	session    *Session
	deliveryID uint64
	gen        uint64 // the connection's link it came on
}

func (m *Message) ref() *clientpb.DeliveryRef {
	return &clientpb.DeliveryRef{Member: m.Member, DeliveryId: m.deliveryID}
}

// Ack acknowledges the message according to its session's mode: in
// ClientAck mode every message the session has handed out so far, in
// IndividualAck mode this one only; in AutoAck and DupsOK modes the session
// acknowledges by itself and Ack does nothing. An error wrapping
// ErrLostServer means some of the messages were released meanwhile (by a
// recover, or a reconnect of the connection) and will be redelivered.
func (m *Message) Ack() error {
	if m.session == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.session.conn.opts.RequestTimeout)
	defer cancel()
	return m.session.ack(ctx, m)
}

func fromDelivery(d *clientpb.Delivery, s *Session, gen uint64) *Message {
	m := &Message{
		ID: d.Id, Body: d.Body, Properties: d.Properties, Priority: int(d.Priority),
		Redelivered: d.Redelivered, DeliveryCount: int(d.DeliveryCount), Destination: d.Destination,
		Member: d.Member, session: s, deliveryID: d.DeliveryId, gen: gen,
	}
	if d.ExpirationUnixMs > 0 {
		m.Expiration = time.UnixMilli(d.ExpirationUnixMs)
	}
	if d.TimestampUnixMs > 0 {
		m.Timestamp = time.UnixMilli(d.TimestampUnixMs)
	}
	return m
}
