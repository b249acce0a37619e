// Package placement decides where members go, as pure functions of the
// meta state (fsm.Meta) and of which nodes are alive and can lead:
//
//   - Decide plans repair (replicas on removed or decommissioning nodes
//     moved, members short of replicas given one), the spreading of
//     replicas and preferred hosts onto nodes that hold fewer, and the
//     renewals that spread hosts where moving whole groups cannot;
//   - RenewalStep is the next step of changing a destination's
//     replication factor; LeastHosting, SharedGroupID and
//     JoinSharedGroup place a new member.
//
// It does no I/O and reads no clock: the meta leader (package cluster,
// rebalance.go and renew.go) asks it, then applies the meta commands it
// plans, one at a time and paced.
package placement
