package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"syscall"

	"github.com/cairnmq/cairn/cluster/console"
	"github.com/cairnmq/cairn/transport/certs"
)

// httpHandler serves the operator endpoints: /livez and /healthz answer as
// long as the process serves (they never depend on a leader), /readyz only
// once the node has joined and its groups have leaders, /metrics in
// Prometheus's format (package metrics).
func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	alive := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "node": n.cfg.NodeID})
	}
	mux.HandleFunc("GET /livez", alive)
	mux.HandleFunc("GET /healthz", alive)
	if n.metrics != nil { // nil in tests of the handler alone
		mux.Handle("GET /metrics", n.metrics.Handler())
		mux.Handle("/", console.New(n.consoleConfig()))
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		err := n.Ready()
		if err == nil {
			err = n.diskRoom()
		}
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "node": n.cfg.NodeID, "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "node": n.cfg.NodeID})
	})
	if n.cfg.Profiling {
		// Off by default: a profile shows message bodies in flight and
		// costs CPU while it is taken.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// consoleConfig is how the console reaches this node's client API: over
// TLS when it is on, trusting the cluster's CA and showing no certificate
// (the browser's user, not the node, is who calls).
func (n *Node) consoleConfig() console.Config {
	cfg := console.Config{Node: n.cfg.NodeID, ClientAddr: n.addrs.Client, OpenToNetwork: n.cfg.InsecureAllowRemote,
		Hosts: append([]string{n.cfg.NodeID, n.cfg.Advertise}, n.cfg.ConsoleHosts...)}
	if h, err := os.Hostname(); err == nil {
		cfg.Hosts = append(cfg.Hosts, h)
	}
	if n.tls != nil {
		cfg.Hosts = append(cfg.Hosts, n.tls.Names()...)
	}
	if n.tls != nil {
		tc, err := certs.ClientTLS(n.cfg.TLSCA, "", "")
		if err != nil {
			// Read at start already; a file gone since leaves the
			// console unable to call, which it says on every page.
			n.log.Error("web console: reading --tls-ca", "err", err)
			tc = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}
		}
		cfg.TLS = tc
	}
	return cfg
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// DefaultMinFreeDiskMiB is the free space under which a node says it is
// not ready: room for a few snapshots and segments of logs being written.
const DefaultMinFreeDiskMiB = 512

// diskRoom says why the data directory's disk is too full to take writes
// much longer, or nil: readiness goes before the writes fail, so that an
// orchestrator or an operator sees it first.
func (n *Node) diskRoom() error {
	if n.cfg.MinFreeDiskMiB < 0 {
		return nil
	}
	free, err := n.diskFree()
	if err != nil {
		return fmt.Errorf("the data directory's disk cannot be read: %w", err)
	}
	if free >>= 20; free < n.cfg.MinFreeDiskMiB {
		return fmt.Errorf("the data directory's disk has %d MiB free, under --min-free-disk-mib %d: free space or grow the disk before writes fail", free, n.cfg.MinFreeDiskMiB)
	}
	return nil
}

// diskFree is the space left to the node on its data directory's disk.
func (n *Node) diskFree() (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.cfg.DataDir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
