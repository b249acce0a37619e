package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/cairnmq/cairn/cluster/frontend"

	"github.com/cairnmq/cairn/raftgroup"

	"github.com/hashicorp/memberlist"
)

// Config is everything a node needs; cmd/cairn fills it from flags.
type Config struct {
	NodeID  string
	DataDir string

	// Listen addresses. Port 0 picks a free port (tests).
	ClientAddr string
	PeerAddr   string
	RaftAddr   string
	GossipAddr string
	HTTPAddr   string
	// Advertise is the host other nodes and clients use to reach this one;
	// empty means the listen host, or this machine's private IP when the
	// listen host is unspecified.
	Advertise string
	// Join lists gossip addresses of nodes to join.
	Join []string
	// BootstrapExpect is how many nodes form the first meta group; 0 means
	// this node waits to be added to an existing cluster.
	BootstrapExpect int

	// MaxMessageBytes bounds one message (body and properties).
	MaxMessageBytes int
	// AutoCreate makes a send or consumer of a destination that does not
	// exist create it with the defaults, as Artemis does. Off (the
	// default), it fails with ErrUnknownDestination: a client's typo or a
	// loop over names cannot fill the cluster with queues.
	AutoCreate bool
	// InsecureAllowRemote lets a node without TLS listen beyond its own
	// host. Without it, an open node binds every port to 127.0.0.1 and
	// refuses an address of another interface (openLocal).
	InsecureAllowRemote bool
	// ConsoleHosts are names the web console answers to beside the node's
	// own (its id, --advertise, its hostname, its certificate's names),
	// IP addresses and localhost: an ingress's, say.
	ConsoleHosts []string
	// Profiling serves Go's profiles (net/http/pprof) under /debug/pprof/
	// on the HTTP address.
	Profiling bool
	// GossipKey encrypts and authenticates gossip, its UDP packets and its
	// TCP streams, with memberlist's keyring: 16, 24 or 32 bytes (AES-128,
	// -192 or -256), the same on every node; nil gossips in clear, and a
	// node without the cluster's key is not heard.
	GossipKey []byte
	// OldGossipKeys are keys gossip from other nodes is still read with
	// while a new GossipKey rolls out (a rotation, docs/security.md).
	OldGossipKeys [][]byte
	// TLSCert and TLSKey are this node's certificate, TLSCA the cluster's
	// CA: together they turn TLS on for every listener (tls.go).
	// TLSClientCA, if set, is another CA client certificates may be signed
	// by. TLS needs GossipKey.
	TLSCert, TLSKey, TLSCA, TLSClientCA string
	// AdminPasswordFile, with TLS on, holds the password of user admin,
	// made with every permission while the cluster has no user.
	AdminPasswordFile string
	// MaxSessions and MaxConsumers bound what one client connection holds
	// (0: DefaultMaxSessions, DefaultMaxConsumers).
	MaxSessions, MaxConsumers int
	// MaxConnections bounds the client connections a node serves at once,
	// MaxConnectionsPerHost those from one client host (0: the defaults).
	MaxConnections, MaxConnectionsPerHost int
	// MaxProperties bounds the properties of one message (0:
	// DefaultMaxProperties): each costs memory on every replica beyond its
	// bytes.
	MaxProperties int
	// MinFreeDiskMiB is the free space on the data directory's disk under
	// which /readyz says the node is not ready, before its writes fail
	// (0: DefaultMinFreeDiskMiB; -1: never).
	MinFreeDiskMiB int64
	// GRPCReflection registers gRPC server reflection on the client and
	// peer APIs (for grpcurl); off, they describe nothing to a stranger.
	GRPCReflection bool

	// LogStore is where every Raft group of the node keeps its log:
	// raftgroup.LogStoreBolt or raftgroup.LogStoreWAL. A data directory keeps
	// the kind it was started with; empty means that one, or wal for a
	// new directory.
	LogStore string
	// BodyMemoryMiB is how many MiB of message bodies each queue member
	// keeps in memory; the newest waiting bodies past it wait in files
	// under the data directory (0: every waiting body does; -1: every body
	// stays in memory). `cairn server` defaults to member.DefaultBodyMemory.
	BodyMemoryMiB int

	// NoAutoRebalance stops the meta leader (when it runs on this node)
	// from repairing under-replicated members and spreading replicas and
	// preferred hosts; replicas of removed and decommissioning nodes are
	// still re-placed.
	NoAutoRebalance bool

	// SnapshotTransfers is how many Raft snapshots the node sends to
	// followers at once (0: DefaultSnapshotTransfers), and
	// SnapshotRateMiB how many MiB a second they send together (0:
	// DefaultSnapshotRateMiB; -1: no limit): a new replica or a node back
	// empty is sent every group's state, and paced it leaves the network
	// and disks to clients.
	SnapshotTransfers int
	SnapshotRateMiB   int

	// GroupPerMember gives each new member a Raft group of its own, as
	// every member had before members shared groups (cluster/DESIGN.md);
	// tests use it to keep that layout, which older destinations keep.
	GroupPerMember bool

	// Member tuning.
	Timing            raftgroup.Timing
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	ExpiryInterval    time.Duration
	// TxTimeout is how long a transaction may stay prepared on a member
	// before its host asks the primary for the decision (default
	// member.DefaultTxTimeout).
	TxTimeout time.Duration
	// Clock is the node's clock; tests move it.
	Clock func() time.Time
	// Dial, if set, opens this node's connections to other nodes (Raft and
	// peer RPC); tests use it to cut links.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// GossipTransport, if set, wraps memberlist's network transport; tests
	// use it to cut gossip between nodes.
	GossipTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport

	// OnFatal stops the process on a failure after which the node cannot
	// keep its promises (a failed fsync, a corrupt log entry); by default
	// it logs and exits with status 70.
	OnFatal func(error)

	Logger *slog.Logger
}

// Defaults for the flags of `cairn server`.
const (
	DefaultClientAddr      = ":7650"
	DefaultPeerAddr        = ":7651"
	DefaultRaftAddr        = ":7652"
	DefaultGossipAddr      = ":7653"
	DefaultHTTPAddr        = ":7654"
	DefaultMaxMessageBytes = 1 << 20
	// DefaultMaxProperties is far above what applications set (JMS
	// headers aside, a few to a few dozen), far below what costs a node
	// memory out of proportion to a message's bytes.
	DefaultMaxProperties = 1000
	// DefaultMaxSessions and DefaultMaxConsumers bound one connection:
	// far above what an application opens on one, and a few MB of a
	// node's memory at most.
	DefaultMaxSessions  = 1000
	DefaultMaxConsumers = 10000
	// DefaultMaxConnections bounds a node's client connections: each
	// costs a few goroutines and buffers (tens of KB), so ten thousand
	// fit well in a node's memory.
	DefaultMaxConnections = 10000
	// DefaultMaxConnectionsPerHost bounds those from one client host: an
	// application server opens tens to hundreds; one host cannot take
	// all the others' room.
	DefaultMaxConnectionsPerHost = 1000
	// MaxMaxMessageBytes is the largest --max-message-bytes: a
	// transaction holds at least one message of the largest size.
	MaxMaxMessageBytes = frontend.MaxTxBytes
	// DefaultSnapshotTransfers and DefaultSnapshotRateMiB pace snapshot
	// sends (Config.SnapshotTransfers): a 1 Gbit/s link carries about
	// 119 MiB/s, so a repair takes at most about half of it.
	DefaultSnapshotTransfers = 2
	DefaultSnapshotRateMiB   = 64
	// DefaultReplicas is the replication factor of a destination when the
	// cluster has enough nodes.
	DefaultReplicas = 3
)

// ErrConfig marks a configuration that cannot work.
var ErrConfig = errors.New("invalid configuration")

func (c *Config) setDefaults() {
	if c.ClientAddr == "" {
		c.ClientAddr = DefaultClientAddr
	}
	if c.PeerAddr == "" {
		c.PeerAddr = DefaultPeerAddr
	}
	if c.RaftAddr == "" {
		c.RaftAddr = DefaultRaftAddr
	}
	if c.GossipAddr == "" {
		c.GossipAddr = DefaultGossipAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxConnectionsPerHost == 0 {
		c.MaxConnectionsPerHost = DefaultMaxConnectionsPerHost
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxConsumers == 0 {
		c.MaxConsumers = DefaultMaxConsumers
	}
	if c.MaxProperties == 0 {
		c.MaxProperties = DefaultMaxProperties
	}
	if c.MinFreeDiskMiB == 0 {
		c.MinFreeDiskMiB = DefaultMinFreeDiskMiB
	}
	if c.Timing == (raftgroup.Timing{}) {
		c.Timing = raftgroup.DefaultTiming
	}
	if c.SnapshotTransfers == 0 {
		c.SnapshotTransfers = DefaultSnapshotTransfers
	}
	if c.SnapshotRateMiB == 0 {
		c.SnapshotRateMiB = DefaultSnapshotRateMiB
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.OnFatal == nil {
		log := c.Logger
		c.OnFatal = func(err error) {
			log.Error("stopping at once: this node can no longer keep its promises", "err", err)
			os.Exit(70)
		}
	}
}

func (c *Config) validate() error {
	switch {
	case c.NodeID == "":
		return fmt.Errorf("%w: --node-id is empty", ErrConfig)
	case c.DataDir == "":
		return fmt.Errorf("%w: --data-dir is empty", ErrConfig)
	case c.BootstrapExpect < 0:
		return fmt.Errorf("%w: --bootstrap-expect %d is negative", ErrConfig, c.BootstrapExpect)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("%w: --max-message-bytes %d is negative", ErrConfig, c.MaxMessageBytes)
	case c.MaxMessageBytes > MaxMaxMessageBytes:
		return fmt.Errorf("%w: --max-message-bytes %d is over %d (64 MiB), the most one transaction holds", ErrConfig, c.MaxMessageBytes, MaxMaxMessageBytes)
	case c.BodyMemoryMiB < -1:
		return fmt.Errorf("%w: --body-memory-mib %d: use a number of MiB, or -1 to keep every body in memory", ErrConfig, c.BodyMemoryMiB)
	case c.SnapshotTransfers < 0:
		return fmt.Errorf("%w: --snapshot-transfers %d: use at least 1", ErrConfig, c.SnapshotTransfers)
	case c.SnapshotRateMiB < -1:
		return fmt.Errorf("%w: --snapshot-rate-mib %d: use a number of MiB a second, or -1 for no limit", ErrConfig, c.SnapshotRateMiB)
	case c.LogStore != "" && c.LogStore != raftgroup.LogStoreBolt && c.LogStore != raftgroup.LogStoreWAL:
		return fmt.Errorf("%w: --log-store %q: use bolt or wal", ErrConfig, c.LogStore)
	case c.MaxConnections < 0 || c.MaxConnectionsPerHost < 0:
		return fmt.Errorf("%w: --max-connections %d and --max-connections-per-host %d must not be negative", ErrConfig, c.MaxConnections, c.MaxConnectionsPerHost)
	case c.MaxSessions < 0 || c.MaxConsumers < 0:
		return fmt.Errorf("%w: --max-sessions %d and --max-consumers %d must not be negative", ErrConfig, c.MaxSessions, c.MaxConsumers)
	case c.MaxProperties < 0:
		return fmt.Errorf("%w: --max-properties %d is negative", ErrConfig, c.MaxProperties)
	case c.MinFreeDiskMiB < -1:
		return fmt.Errorf("%w: --min-free-disk-mib %d: use a number of MiB, or -1 to never check", ErrConfig, c.MinFreeDiskMiB)
	case len(c.GossipKey) != 0 && len(c.GossipKey) != 16 && len(c.GossipKey) != 24 && len(c.GossipKey) != 32:
		return fmt.Errorf("%w: --gossip-key is %d bytes; use 16, 24 or 32 (cairn cert gossip-key makes one)", ErrConfig, len(c.GossipKey))
	case (c.TLSCert == "") != (c.TLSKey == "") || (c.TLSCert == "") != (c.TLSCA == ""):
		return fmt.Errorf("%w: --tls-cert, --tls-key and --tls-ca go together (cairn cert makes them)", ErrConfig)
	case c.TLSClientCA != "" && c.TLSCert == "":
		return fmt.Errorf("%w: --tls-client-ca needs --tls-cert, --tls-key and --tls-ca", ErrConfig)
	case c.AdminPasswordFile != "" && c.TLSCert == "":
		return fmt.Errorf("%w: --admin-password-file needs TLS (--tls-cert, --tls-key, --tls-ca): without it the node asks nobody for a password", ErrConfig)
	case len(c.OldGossipKeys) > 0 && len(c.GossipKey) == 0:
		return fmt.Errorf("%w: old gossip keys without a current one", ErrConfig)
	case c.TLSCert != "" && len(c.GossipKey) == 0:
		return fmt.Errorf("%w: with TLS on, gossip's packets need --gossip-key too (cairn cert gossip-key makes one)", ErrConfig)
	}
	for _, a := range c.listenAddrs() {
		if _, _, err := net.SplitHostPort(*a.addr); err != nil {
			return fmt.Errorf("%w: %s %q: %v", ErrConfig, a.flag, *a.addr, err)
		}
	}
	return c.openLocal()
}

func (c *Config) listenAddrs() []struct {
	flag string
	addr *string
} {
	return []struct {
		flag string
		addr *string
	}{
		{"--client-addr", &c.ClientAddr}, {"--peer-addr", &c.PeerAddr}, {"--raft-addr", &c.RaftAddr},
		{"--gossip-addr", &c.GossipAddr}, {"--http-addr", &c.HTTPAddr},
	}
}

// openLocal keeps a node without TLS to its own host: it asks nobody who
// they are, so only processes of this host may reach it (as Redis's
// protected mode and RabbitMQ's loopback-only guest do). An address on
// every interface (":7650") becomes 127.0.0.1's; one on another
// interface, or an --advertise other nodes would reach it at, is refused
// unless InsecureAllowRemote says otherwise.
func (c *Config) openLocal() error {
	if c.TLSCert != "" || c.InsecureAllowRemote {
		return nil
	}
	const why = "an open node (no --tls-cert) serves its own host only: give the nodes TLS (docs/security.md), or --insecure-allow-remote to let anyone who reaches them do anything"
	for _, a := range c.listenAddrs() {
		host, port, _ := net.SplitHostPort(*a.addr)
		switch {
		case host == "" || net.ParseIP(host).IsUnspecified():
			*a.addr = net.JoinHostPort("127.0.0.1", port)
		case !loopback(host):
			return fmt.Errorf("%w: %s %s: %s", ErrConfig, a.flag, *a.addr, why)
		}
	}
	if c.Advertise != "" && !loopback(c.Advertise) {
		return fmt.Errorf("%w: --advertise %s: %s", ErrConfig, c.Advertise, why)
	}
	return nil
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
