package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/cluster"
)

// readyAnswer is what a node's /readyz says.
type readyAnswer struct {
	Status string `json:"status"`
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

func healthCmd() *cobra.Command {
	var (
		httpAddr string
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if the local node is ready (has joined and can serve), 1 if not",
		Long: `Ask a node's /readyz (on its --http-addr) whether it is ready: it has joined
the cluster's meta group and can serve. It prints one line and exits 0 when
ready, 1 when not (or when the node does not answer). Container health
checks and Kubernetes probes run it; it reads CAIRN_HTTP_ADDR and
CAIRN_TLS_CA like the server does, so it finds the node of its own
container (over HTTPS with --tls-ca: the node's certificate must name
127.0.0.1, or the host of --http-addr).`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, args []string) error {
			return envFlags(cmd.Flags(), "http-addr")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			tc, err := clientTLS(cmd)
			if err != nil {
				return err
			}
			scheme, hc := "http", http.DefaultClient
			if tc != nil {
				scheme, hc = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
			}
			url := scheme + "://" + dialable(httpAddr) + "/readyz"
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return fmt.Errorf("--http-addr %q: %w", httpAddr, err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("no answer from %s: %w", url, err)}
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			var a readyAnswer
			_ = json.Unmarshal(body, &a)
			if resp.StatusCode != http.StatusOK {
				reason := a.Reason
				if reason == "" {
					reason = strings.TrimSpace(string(body))
				}
				return &exitError{code: 1, err: fmt.Errorf("node %s is not ready (%s): %s", orDash(a.Node), resp.Status, reason)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s is ready\n", a.Node)
			return nil
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http-addr", cluster.DefaultHTTPAddr, "the node's HTTP address (env CAIRN_HTTP_ADDR)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

// dialable turns a listen address (":7654", "0.0.0.0:7654") into one to
// dial on this host.
func dialable(addr string) string {
	switch {
	case strings.HasPrefix(addr, ":"):
		return "127.0.0.1" + addr
	case strings.HasPrefix(addr, "0.0.0.0:"):
		return "127.0.0.1" + strings.TrimPrefix(addr, "0.0.0.0")
	case strings.HasPrefix(addr, "[::]:"):
		return "127.0.0.1" + strings.TrimPrefix(addr, "[::]")
	}
	return addr
}
