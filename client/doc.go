// Package client is Cairn's Go client library, shaped like JMS so that users
// of TIBCO EMS, WebLogic JMS or ActiveMQ feel at home:
//
//	conn, err := client.Dial(ctx, []string{"127.0.0.1:7650"}, client.Options{})
//	sess, err := conn.Session(client.ClientAck)
//	prod, err := sess.Producer("orders")
//	receipt, err := prod.Send(ctx, &client.Message{Body: []byte("hello")})
//	cons, err := sess.Consumer(ctx, "orders")
//	msg, err := cons.Receive(ctx)
//	err = msg.Ack()
//
// A Connection is one stream to one node (its front-end). Sessions carry an
// acknowledge mode; consumers prefetch up to Options.Prefetch messages; a
// message handed to the application stays the session's until it is
// acknowledged, the session recovers, or the session ends, and comes back
// marked Redelivered with its DeliveryCount raised.
//
// Errors are typed: test them with errors.Is against ErrLostServer,
// ErrDeliveryUnknown, ErrUnknownDestination and the others in errors.go.
//
// The package owns the client side of the protocol; it holds no broker
// logic. Admin operations (create, show, purge, delete destinations, cluster
// status) are on Admin.
package client
