// Package cluster is a Cairn node: it binds the node's listeners, runs the
// gossip membership (memberlist) and its replica of the meta group
// (destinations, their placement, the node registry), opens the member replicas the meta group
// places on this node, and carries the front-end's requests (package
// frontend) to the members' hosts: it resolves destinations, drives the
// router's plans (package destination), and relays commands.
//
// It owns no delivery rules (package fsm), no Raft group internals
// (packages member and raftgroup), no placement policy (package
// cluster/placement), no client connection (package cluster/frontend) and
// not the meta group's replica (package cluster/metagroup). Decisions it made are argued in DESIGN.md; the words
// used here are docs/ARCHITECTURE.md's.
//
// The main types, by file:
//   - Node (node.go): one node; Start assembles it, Config (config.go)
//     says how.
//   - gossip (gossip.go): memberlist, and what each node gossips of itself.
//   - metaNode (meta.go): the node as the meta group (package metagroup)
//     asks it, and its leader duties: rebalance.go carries out what
//     package placement plans for replicas and hosts, renew.go renews
//     members; membership.go keeps the member groups' Raft configurations
//     in line with the registry and the placement.
//   - groups (groups.go): the member replicas open here, opened, closed
//     and destroyed as the placement changes; hosts.go moves leaderships
//     to preferred hosts.
//   - clientAPI and adminAPI (clientapi.go): the node as package
//     frontend asks it; destinations.go administers destinations,
//     connadmin.go lists and destroys connections cluster-wide; send.go
//     validates and carries out sends (Node.enqueue runs the router's
//     destination.SendPlan); address.go resolves what an address names
//     and pins consumers; tx.go coordinates transactions' commits;
//     consume_remote.go links a consumer to a host on another node.
//   - peers and peerService (peers.go, peer_server.go): the peer API,
//     which relays commands to a member's host and streams its deliveries.
//   - the router's view (view.go): which node hosts each member
//     (hostCache), and how loaded it is (loads), for Node.candidates.
//   - relaying (relay.go): a member command carried to its host, here or
//     on another node, and again while it certainly was not sent.
//   - mover (mover.go): where a member's moved messages go.
//   - TestCluster (testing.go): the in-process harness of every test that
//     needs a cluster, in this package or another.
package cluster
