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
// A Connection lives on a stream to one node (its front-end). A
// destination's non-transacted sends go straight to its member's host on a
// send link of their own once a node has named that host (it does when
// every send to the destination goes to one member); Options.NoDirectSends
// keeps them on the front-end, which forwards them. Sessions carry
// an acknowledge mode; consumers prefetch up to Options.Prefetch messages; a
// message handed to the application stays the session's until it is
// acknowledged, the session recovers, or the session ends, and comes back
// marked Redelivered with its DeliveryCount raised.
//
// Errors are typed: test them with errors.Is against ErrLostServer,
// ErrDeliveryUnknown, ErrUnknownDestination and the others in errors.go.
//
// # Reconnect
//
// When a connection loses its node (the node dies, stops, is cut off, or
// says nothing for 3 s) it reconnects to another one: first to the nodes
// the cluster named when it last connected (every live node's client
// address), then to the addresses given to Dial, the lost node last;
// round after round, 50 ms to 1 s apart, for TotalReconnectPeriod (default
// forever). What it re-creates there is its ReconnectPolicy's choice. These
// are the rules an application can rely on:
//
//  1. After a network or node failure the connection reconnects to another
//     node and re-creates its sessions and producers (ReconnectProducer, the
//     default), and its consumers too (ReconnectAll); under ReconnectNone it
//     ends. Each connection does this on its own: several connections of one
//     process are independent.
//  2. Objects the application closed are not re-created, and a connection
//     an operator destroyed (cairn connection destroy) ends with
//     ErrConnectionDestroyed and does not reconnect.
//  3. A connection with a ClientID reconnects only under ReconnectAll (so
//     its durable subscribers resume); under the other policies it ends,
//     since an application that opens it again would collide with the
//     refreshed one's client id.
//  4. The exception listener, if set, is called with ErrLostServer at
//     every loss, even when the reconnect then succeeds, and stays set on
//     the reconnected connection; it is called once more if reconnecting
//     gives up.
//  5. Transacted sessions are refreshed; if the transaction had pending
//     sends or receives, the first Commit after the refresh fails with
//     ErrTransactionRolledBack and the application can do the same work
//     again on the same objects; the stale work is neither committed nor
//     duplicated. A transaction with nothing pending commits normally. A
//     commit cut off by the loss asks the transaction's primary for its
//     outcome after the reconnect, and reports it; only if that fails for
//     ReconnectBlockingTime does it return ErrCommitUnknown, and the
//     messages sent in the next transaction then carry
//     PossibleDuplicateProperty.
//  6. A session that held unacknowledged messages gets ErrLostServer from
//     its first acknowledge after the reconnect, as does the acknowledge of
//     any message handed out before it: the lost node released those
//     messages, and they come again, marked redelivered. An acknowledged
//     message is never redelivered.
//  7. While the connection reconnects, Receive waits for it at most
//     ReconnectBlockingTime (default 60 s), ReceiveTimeout(d) at most d and
//     at most ReconnectBlockingTime, and then fail with ErrLostServer;
//     ReceiveNoWait never waits and fails at once. The consumer is not
//     ended by that: after the reconnect they return messages again, with
//     the semantics that follow a recover (redelivered messages).
//     Send and the other calls wait for a reconnect in the same way.
//  8. A listener (Consumer.SetListener) goes on being called if the
//     reconnect succeeds within TotalReconnectPeriod, and never after the
//     application closed its consumer, session or connection.
//  9. A consumer of a distributed destination is pinned anew on reconnect,
//     to the member the router of its new node prefers, normally another
//     than the one it had. Consumer.Member names it.
//  10. A send in flight when the node was lost is sent again after the
//     reconnect if it never left; if it may have reached the node, it is
//     sent again only when every message carries a dedup id
//     (Producer.SetIdempotent), which makes a copy harmless (the server
//     sends a message with a dedup id to the member its id names, whichever
//     node forwards it), and otherwise fails with ErrDeliveryUnknown.
//  11. Non-durable topic subscribers may miss messages published during a
//     reconnect; durable subscribers do not. (Topics come with a later server
//     version.)
//
// The package owns the client side of the protocol; it holds no broker
// logic. Admin operations (create, show, purge, delete destinations, list
// and destroy connections, cluster status) are on Admin.
package client
