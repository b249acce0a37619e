// Package member runs member replicas on this node: each member's Raft
// group (opened with package raftgroup; a group of its own, or one shared
// by many members, Shared), the proposer that packs concurrent
// commands into one Raft entry, and, while this replica hosts the member
// (leads its group), the dispatcher that delivers pending messages to
// consumers with credit and the expiry loop.
//
// Every decision the state machine must not make itself is made here, on the
// leader, and carried in the command: the time (Enqueue.now, Deliver.now,
// Expire.now), which messages go to which session, and which sessions belong
// to front-ends that are gone.
//
// A delivery is committed before it is pushed: the dispatcher proposes
// Deliver, and only the applied result reaches the consumer. Deliveries that
// cannot be pushed (the consumer left meanwhile) are returned to pending.
//
// It does not choose members or route requests (package destination), nor
// decide where groups run (package cluster), nor keep a Raft log (package
// raftgroup).
package member
