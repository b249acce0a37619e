// Command cairn is Cairn's one binary: `cairn server` runs a node, and every
// other subcommand is a client of a running cluster.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit statuses of a refusal, for scripts (the root command's help says
// them).
const (
	exitNotAuthenticated = 3
	exitNotAuthorised    = 4
)

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// init sets the buffer pool of every gRPC connection the binary opens,
// before any is (transport/bufpool.go).
func init() { transport.UseBufferPool() }

func main() {
	root := newRoot()
	root.SetArgs(globalPasswordFile(root, os.Args[1:]))
	if err := root.Execute(); err != nil {
		// One line on stderr, whatever the error; the details are in it.
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		// Wrapped errors of the library each start with "cairn: "; say it once.
		msg = strings.ReplaceAll(msg, ": cairn: ", ": ")
		if strings.Contains(msg, "connection refused") {
			msg += " — is a Cairn node running there? Start one with 'make run' or 'cairn server --dev', or point --server at one"
		}
		if !strings.HasPrefix(msg, "cairn") {
			msg = "cairn: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		code := 1
		var ee *exitError
		switch {
		case errors.As(err, &ee):
			code = ee.code
		case errors.Is(err, client.ErrNotAuthenticated):
			code = exitNotAuthenticated
		case errors.Is(err, client.ErrNotAuthorised):
			code = exitNotAuthorised
		}
		os.Exit(code)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Cairn: a clustered message broker with JMS semantics on Raft",
		Long: `Cairn is a clustered message broker: queues and topics with acknowledge,
recover and redelivery, every message and acknowledgement replicated with
Raft.

Start a node with 'cairn server', then talk to it with the other commands.
They reach the server given by --server (or $CAIRN_SERVER), 127.0.0.1:7650
by default; --tls-ca, --user and --password-file (or CAIRN_TLS_CA,
CAIRN_USER, CAIRN_PASSWORD_FILE) reach a node serving TLS.

A command exits 0 when it did what was asked, 3 when the node did not
learn who is calling (not authenticated), 4 when the caller may not do
that (not authorised), and 1 on any other error.`,
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().String("server", "127.0.0.1:7650", "address[,address...] of the nodes to talk to (env CAIRN_SERVER)")
	addClientSecurityFlags(root.PersistentFlags())
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := takeLoginPasswordFile(cmd.Root().PersistentFlags()); err != nil {
			return err
		}
		return envFlags(cmd.Root().PersistentFlags(), append([]string{"server"}, clientSecurityFlags...)...)
	}
	root.AddCommand(serverCmd(), queueCmd(), topicCmd(), sendCmd(), receiveCmd(), publishCmd(), subscribeCmd(), subscriptionCmd(), clusterCmd(), nodeCmd(), connectionCmd(), healthCmd(), verifyCmd(), benchCmd(), certCmd(), userCmd())
	return root
}

// envFlags sets each named flag (every flag when none is named) that was not
// given on the command line from its environment variable CAIRN_<FLAG>.
func envFlags(fs *pflag.FlagSet, only ...string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || (len(only) > 0 && !contains(only, f.Name)) {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment %s=%q: %v", name, v, serr)
			}
		}
	})
	return err
}

func envName(flag string) string {
	return "CAIRN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// servers reads --server as a list.
func servers(cmd *cobra.Command) []string {
	v, _ := cmd.Flags().GetString("server")
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
