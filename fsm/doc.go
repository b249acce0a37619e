// Package fsm holds Cairn's deterministic state machines: the member state
// machine (one member of a destination: messages, pending order, deliveries,
// acknowledgements, expiry, duplicate detection), the group state machine
// (several members sharing one Raft group, where a message published to a
// topic's member is stored by its subscriptions' members: Publish), and the
// meta state machine (destinations, their members' placement, the node
// registry, the client ids connections hold), with the commands that change
// them and their snapshots.
//
// The contract, which every change here keeps:
//
//   - Apply is deterministic. Given the same state and the same entry, every
//     replica produces the same state and the same results. Nothing here
//     reads a clock, draws a random number, starts a goroutine or does I/O:
//     time and ids are decided by the leader and carried in the command
//     (Enqueue.now, Deliver.now, Expire.now, message ids). Map iteration
//     never decides an outcome.
//   - The caller never modifies an entry's bytes, and Apply keeps no
//     reference to them past the next PutBodiesAway (fsm/DESIGN.md).
//   - Where a body is, held here or put away by the caller
//     (PutBodiesAway, BodyRef), is replica-local: nothing replicated
//     depends on it, and a snapshot writes every body wherever it is.
//   - A rejection is a rule broken by a well-formed command (an ack for a
//     delivery the session does not hold, a full member). It is returned in
//     Result.Err, changes nothing, and is identical on every replica.
//   - Corruption is an entry that does not decode, is of a newer version, or
//     carries a command the state machine does not own. Apply returns an
//     error wrapping ErrCorrupt, changes nothing, and the caller must stop
//     the replica loudly instead of skipping the entry.
//   - Each state machine records the index of the last applied entry, and
//     Apply skips entries at or below it, so a replay is harmless and a
//     restored snapshot resumes exactly.
//   - Capture then WriteTo, then Restore, gives back the identical state.
//
// The rules of delivery follow TIBCO EMS and JMS: a delivered message goes
// to no other session until it is acknowledged, expires, or its session
// recovers or ends; it then returns to pending marked redelivered, and its
// delivery count rises by one with each delivery.
//
// The state machines are not safe for concurrent use: the caller serialises
// Apply with every read (member.Replica holds the lock).
package fsm
