// Package metagroup is this node's replica of the meta group: the Raft
// group of up to five voters that holds the destinations, their members'
// placement and the node registry (fsm.Meta).
//
//   - Group (group.go): New and Open start the replica; Read and
//     Destination read this replica's state; Apply runs a meta command on
//     the leader, here or forwarded (Node.Forward), and waits until this
//     replica applied it, so a client reads its own writes; Ready and
//     CaughtUp say whether the node may serve.
//   - Run is the leader's loop: it forms the group once --bootstrap-expect
//     nodes are alive, registers the nodes gossip holds alive, keeps the
//     group's voters in line with the registry (voters.go: new nodes vote
//     once caught up, removed ones leave, one back empty stops voting),
//     and runs the node's other leader duties (Node.Lead: placement and
//     renewals, package cluster).
//   - metaFSM (fsm.go) adapts the pure fsm.Meta to hashicorp/raft.
//
// It asks the node it runs on through Node (gossip's members, replicas'
// catch-up, forwarding to the leader); package cluster implements it.
package metagroup
