// Package cluster is a Cairn node: it binds the node's listeners, runs the
// gossip membership (memberlist) and the meta group (destinations, their
// placement, the node registry), opens the member replicas the meta group
// places on this node, and serves clients as their front-end: it resolves
// destinations, asks the router (package destination) for a member, and
// carries requests to the member's replica.
//
// It owns no delivery rules (package fsm) and no Raft group internals
// (package member). Decisions it made are argued in DESIGN.md.
package cluster
