package member

import (
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/raftgroup"
)

// Config describes one member replica on this node.
type Config struct {
	// Name is the member's address, "orders#0".
	Name string
	// GroupID names the member's Raft group on the shared Raft port; it
	// differs between incarnations of a destination of the same name.
	GroupID string
	NodeID  string
	Dir     string
	Stream  raft.StreamLayer
	Peers   []raft.Server
	Timing  raftgroup.Timing
	// SnapshotThreshold is how many entries since the last snapshot trigger
	// a new one (0: hashicorp/raft's default, 8192), once they also carried
	// a share of the state's bytes, at the replica's turn in the log
	// nearest to that point; the shares and the leader's longer wait are
	// in snapshotPaceOf.
	SnapshotThreshold uint64
	// SnapshotInterval is how often the replica refreshes its snapshot
	// pace from its rank among the group's voters (default 5 s).
	SnapshotInterval time.Duration
	// LogStore is raftgroup.LogStoreBolt (the default when empty) or raftgroup.LogStoreWAL.
	LogStore string
	// BodyMemory is how many bytes of message bodies the member keeps in
	// memory; it puts the newest waiting ones past that in files under Dir.
	// Negative keeps every body in memory; 0 puts away every body that
	// waits (nodes default to DefaultBodyMemory).
	BodyMemory int64
	// Settings are the limits the member should have; its leader proposes
	// them when the replicated ones differ.
	Settings *fsmpb.MemberSettings
	// FirstDeliveryID is where the member numbers its deliveries from at
	// least (a renewed member's, fsmpb.Configure); its leader proposes it
	// with the settings while the member numbers below it.
	FirstDeliveryID uint64
	// OwnerLive reports whether the front-end incarnation that owns a
	// session is alive; a new leader releases the sessions of dead ones.
	OwnerLive func(owner string) bool
	// Clock is the leader's clock for expiry and the dedup window.
	Clock func() time.Time
	// ExpiryInterval is how often the leader looks for expired messages,
	// redelivery delays that are over, and messages to move.
	ExpiryInterval time.Duration
	// Mover, if set, moves dead messages to the dead-letter queue and
	// stranded ones to members with consumers.
	Mover Mover
	// Resolver, if set, learns the decision of transactions prepared here
	// for longer than TxTimeout (default DefaultTxTimeout).
	Resolver  Resolver
	TxTimeout time.Duration
	// ForwardDelay is how long pending messages wait with no consumer on
	// this member before they are forwarded; 0 never forwards.
	ForwardDelay time.Duration
	// OnLeaderChange, if set, is called when this replica gains (true) or
	// loses (false) the ability to serve as the member's host.
	OnLeaderChange func(leading bool)
	// OnFatal is called with an entry that cannot be applied, a failed
	// write of the Raft log, or message bodies put away on disk that cannot
	// be read back: it must stop the process, and not by closing the
	// replica from the calling goroutine (the replica's own, which Close
	// waits for). By default it panics.
	OnFatal func(error)
	// OnCorrupt, if set, is called instead of OnFatal with an entry that
	// cannot be applied (its index and why), once: the replica has stopped
	// (it applies nothing after that entry and refuses to snapshot) and
	// must be closed, not from the calling goroutine, and rebuilt from its
	// group's other replicas.
	OnCorrupt func(index uint64, err error)
	// Addresses finds a replica's current Raft address by node id.
	Addresses raft.ServerAddressProvider
	// CheckRPC sees each Raft RPC the replica is sent before Raft does
	// (raftgroup.Config.CheckRPC).
	CheckRPC func(conn net.Conn, command any, latest raft.Configuration) error
	// SnapshotSends paces the snapshots the group sends to followers.
	SnapshotSends *raftgroup.SnapshotSends
	// Observer, if set, is told how long the replica's work takes.
	Observer Observer
	Logger   *slog.Logger
}
