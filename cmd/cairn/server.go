package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/cluster"
	"github.com/cairnmq/cairn/member"
)

func serverCmd() *cobra.Command {
	var (
		cfg           cluster.Config
		join          string
		dev           bool
		autoRebalance bool
		logLevel      string
		logFormat     string
		gossipKeyFile string
		noAutoCreate  bool
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a Cairn node",
		Long: `Run a Cairn node. Every flag can also be set in the environment as
CAIRN_<FLAG>, for example CAIRN_NODE_ID=n1 or CAIRN_DATA_DIR=/var/lib/cairn.

A durable single node:     cairn server --node-id n1 --data-dir ./data/n1 --bootstrap-expect 1
A throwaway node to try:   cairn server --dev   (open, creates queues on first use)
SIGTERM or Ctrl-C stops the node gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := envFlags(cmd.Flags()); err != nil {
				return err
			}
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg.Logger = log
			if gossipKeyFile != "" {
				if cfg.GossipKey, cfg.OldGossipKeys, err = readGossipKeys(gossipKeyFile, cfg.GossipKey); err != nil {
					return err
				}
			}
			cfg.NoAutoRebalance = !autoRebalance
			if noAutoCreate && cfg.AutoCreate {
				return fmt.Errorf("--auto-create and --no-auto-create contradict each other: give one")
			}
			if join != "" {
				cfg.Join = strings.Split(join, ",")
			}
			if dev {
				dir, err := os.MkdirTemp("", "cairn-dev-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				if !cmd.Flags().Changed("data-dir") {
					cfg.DataDir = dir
				}
				if !cmd.Flags().Changed("bootstrap-expect") {
					cfg.BootstrapExpect = 1
				}
				cfg.AutoCreate = !noAutoCreate
				for _, a := range []struct {
					flag string
					addr *string
				}{{"client-addr", &cfg.ClientAddr}, {"peer-addr", &cfg.PeerAddr}, {"raft-addr", &cfg.RaftAddr}, {"gossip-addr", &cfg.GossipAddr}, {"http-addr", &cfg.HTTPAddr}} {
					if !cmd.Flags().Changed(a.flag) {
						*a.addr = "127.0.0.1" + *a.addr
					}
				}
			}
			if cfg.DataDir == "" {
				return fmt.Errorf("--data-dir is not set: give the node a directory for its data, or use --dev for a throwaway node")
			}
			return runServer(cfg)
		},
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&cfg.NodeID, "node-id", host, "this node's id, unique in the cluster and stable across restarts")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the node's data (Raft logs and snapshots)")
	f.StringVar(&cfg.ClientAddr, "client-addr", cluster.DefaultClientAddr, "address for clients (gRPC)")
	f.StringVar(&cfg.PeerAddr, "peer-addr", cluster.DefaultPeerAddr, "address for other nodes (gRPC)")
	f.StringVar(&cfg.RaftAddr, "raft-addr", cluster.DefaultRaftAddr, "address for Raft traffic of every group")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", cluster.DefaultGossipAddr, "address for gossip (memberlist, TCP and UDP)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", cluster.DefaultHTTPAddr, "address for /healthz, /livez and /readyz")
	f.StringVar(&cfg.Advertise, "advertise", "", "host or IP other nodes and clients reach this node at (default: the listen host, or this machine's private IP)")
	f.StringVar(&join, "join", "", "gossip address[,address...] of nodes to join")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "form a new cluster once this many nodes have joined (1: a single node)")
	f.BoolVar(&dev, "dev", false, "one throwaway node on 127.0.0.1: temporary data dir, ready at once, deleted on exit")
	f.BoolVar(&cfg.AutoCreate, "auto-create", false, "create a queue or topic that does not exist on its first send or consumer, with the defaults (--dev does)")
	f.BoolVar(&noAutoCreate, "no-auto-create", false, "refuse sends and consumers of destinations that do not exist (the default but with --dev)")
	f.BoolVar(&autoRebalance, "auto-rebalance", true, "repair members short of replicas and spread replicas and hosts over the nodes by themselves (the meta leader's setting decides)")
	f.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", cluster.DefaultMaxMessageBytes, "largest message accepted, body and properties (at most 64 MiB); frames to clients are this plus 1 MiB")
	f.StringVar(&cfg.LogStore, "log-store", "", "where Raft logs are kept: bolt (raft-boltdb) or wal (raft-wal, one fsync per write instead of two); default: what --data-dir holds, wal for a new one")
	f.IntVar(&cfg.BodyMemoryMiB, "body-memory-mib", member.DefaultBodyMemory>>20, "MiB of message bodies each queue member keeps in memory; the newest waiting bodies past it wait in files under --data-dir (0: all on disk; -1: all in memory)")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", 8192, "Raft entries of a group between two snapshots, at the least (a queue member also waits for a share of its state's bytes; member/DESIGN.md, \"Snapshots paced by bytes\")")
	f.IntVar(&cfg.SnapshotTransfers, "snapshot-transfers", cluster.DefaultSnapshotTransfers, "Raft snapshots this node sends at once to replicas too far behind for the log (a new replica, a node back empty)")
	f.IntVar(&cfg.SnapshotRateMiB, "snapshot-rate-mib", cluster.DefaultSnapshotRateMiB, "MiB a second this node's snapshot sends take together, so that repairs leave bandwidth to clients (-1: no limit)")
	f.BoolVar(&cfg.InsecureAllowRemote, "insecure-allow-remote", false, "without TLS, listen beyond this host too: anyone who reaches the node may do anything (docs/security.md)")
	f.StringSliceVar(&cfg.ConsoleHosts, "console-host", nil, "a name the web console answers to beside the node's own, e.g. an ingress's (repeatable)")
	f.BoolVar(&cfg.Profiling, "pprof", false, "serve Go's CPU, heap and goroutine profiles under /debug/pprof/ on --http-addr")
	f.BytesBase64Var(&cfg.GossipKey, "gossip-key", nil, "base64 key (16, 24 or 32 bytes) encrypting gossip, the same on every node; make one with cairn cert gossip-key")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "this node's certificate (cairn cert node): TLS on every port, and only nodes of the cluster on the peer, Raft and gossip ports")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "the key of --tls-cert")
	f.StringVar(&cfg.TLSCA, "tls-ca", "", "the cluster's CA certificate (cairn cert ca): verifies the other nodes and client certificates")
	f.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "another CA whose client certificates are accepted too")
	f.StringVar(&cfg.AdminPasswordFile, "admin-password-file", "", "file whose first line is the password of user admin, made with every permission while the cluster has no user (needs TLS)")
	f.StringVar(&gossipKeyFile, "gossip-key-file", "", "file holding --gossip-key instead of the flag; more lines are old keys still read during a rotation")
	f.IntVar(&cfg.MaxConnections, "max-connections", cluster.DefaultMaxConnections, "most client connections this node serves at once")
	f.IntVar(&cfg.MaxConnectionsPerHost, "max-connections-per-host", cluster.DefaultMaxConnectionsPerHost, "most client connections this node serves from one client host")
	f.IntVar(&cfg.MaxSessions, "max-sessions", cluster.DefaultMaxSessions, "most sessions one client connection may have open")
	f.IntVar(&cfg.MaxConsumers, "max-consumers", cluster.DefaultMaxConsumers, "most consumers one client connection may have open")
	f.IntVar(&cfg.MaxProperties, "max-properties", cluster.DefaultMaxProperties, "most properties one message may carry")
	f.Int64Var(&cfg.MinFreeDiskMiB, "min-free-disk-mib", cluster.DefaultMinFreeDiskMiB, "free MiB on the data directory's disk under which /readyz says not ready, before writes fail (-1: never)")
	f.BoolVar(&cfg.GRPCReflection, "grpc-reflection", false, "describe the client and peer APIs to any caller (gRPC reflection, for grpcurl)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}

// readGossipKeys reads --gossip-key-file: keys, base64 as cairn cert
// gossip-key prints them, one a line; the first is the current one, the
// others old ones still read (a rotation).
func readGossipKeys(file string, given []byte) (key []byte, old [][]byte, err error) {
	if given != nil {
		return nil, nil, fmt.Errorf("give --gossip-key or --gossip-key-file, not both")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	for i, line := range strings.Fields(string(b)) {
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, nil, fmt.Errorf("--gossip-key-file %s: line %d is not base64 (cairn cert gossip-key makes a key): %v", file, i+1, err)
		}
		if i == 0 {
			key = k
		} else {
			old = append(old, k)
		}
	}
	if key == nil {
		return nil, nil, fmt.Errorf("--gossip-key-file %s holds no key", file)
	}
	return key, old, nil
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

func runServer(cfg cluster.Config) error {
	n, err := cluster.Start(cfg)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	ready := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { ready <- n.WaitReady(ctx) }()
	for {
		select {
		case err := <-ready:
			if err == nil {
				fmt.Fprintf(os.Stderr, "cairn: node %s ready; clients connect to %s (try: cairn --server %s queue list)\n", n.ID(), n.Addrs().Client, n.Addrs().Client)
			}
			ready = nil
		case <-n.Left():
			cancel()
			fmt.Fprintf(os.Stderr, "cairn: node %s left: its leaderships are handed over; stopping\n", n.ID())
			n.Stop()
			return nil
		case s := <-sig:
			cancel()
			fmt.Fprintf(os.Stderr, "cairn: %v received, stopping node %s\n", s, n.ID())
			done := make(chan struct{})
			go func() { n.Stop(); close(done) }()
			select {
			case <-done:
				return nil
			case <-sig:
				return fmt.Errorf("second signal: stopping now, without waiting for a graceful stop")
			case <-time.After(30 * time.Second):
				return fmt.Errorf("graceful stop took over 30s; stopping now")
			}
		}
	}
}
