// Package raftgroup opens the Raft groups a node runs, members' and the
// meta group's alike: hashicorp/raft (the patched copy in third_party)
// over a log store fsynced on every write, and what Cairn adds around it.
//
//   - Group (Open): one open group, its log and stable store, its
//     snapshot store and its transport; CaughtUp says whether a replica's
//     state machine holds everything committed.
//   - The log stores: raft-wal (walstore.go, the default) or raft-boltdb
//     (boltstore.go), behind a storageGuard that ends the process on a
//     failed write, and a log cache bounded in bytes (logcache.go) that
//     also holds the entries the leader stages while it writes them.
//   - groupTransport: a group's stream on the node's one Raft port
//     (transport/raftmux), which refuses votes until the replica has a
//     configuration and paces snapshot sends.
//   - SnapshotSends: the node's pacing of the snapshots its groups send.
//
// It knows nothing of what a group carries: members (package member) and
// the meta group (package cluster) give it a raft.FSM. When a member
// snapshots is member's decision (member/snapshot_pacing.go); the decisions
// made here, with their measurements, are in DESIGN.md.
package raftgroup
