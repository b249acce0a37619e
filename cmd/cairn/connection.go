package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

func connectionCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "connection", Short: "List and destroy client connections"}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the client connections of every live node",
		Long: `List the client connections of every live node. With --json it prints one
object: {"connections":[{"id","node","client_id","remote_addr","sessions",
"consumers","connected_at"}],"unreachable":["node ids that did not answer"]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				conns, unreachable, err := a.Connections(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					if unreachable == nil {
						unreachable = []string{}
					}
					return printJSON(cmd, struct {
						Connections []client.ConnectionInfo `json:"connections"`
						Unreachable []string                `json:"unreachable"`
					}{conns, unreachable})
				}
				t := newTable(cmd.OutOrStdout(), "ID", "NODE", "CLIENT ID", "REMOTE", "SESSIONS", "CONSUMERS", "CONNECTED")
				for _, c := range conns {
					t.row(c.ID, c.Node, orDash(c.ClientID), orDash(c.RemoteAddr), c.Sessions, c.Consumers, c.ConnectedAt.Format(time.RFC3339))
				}
				if err := t.flush(); err != nil {
					return err
				}
				if len(unreachable) > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "not listed: nodes %v did not answer\n", unreachable)
				}
				return nil
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	destroy := &cobra.Command{
		Use:   "destroy ID",
		Short: "End a client connection for good; the client does not reconnect",
		Long: `End a client connection for good, whichever node serves it. The client is
told it was destroyed and does not reconnect; the messages its sessions held
unacknowledged return to their queues, marked redelivered.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				if err := a.DestroyConnection(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "destroyed connection %s\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(list, destroy)
	return cmd
}

// reconnectFlag adds --reconnect to a command that dials a connection.
func reconnectFlag(cmd *cobra.Command, def client.ReconnectPolicy) *string {
	return cmd.Flags().String("reconnect", def.String(),
		"what to re-create when the connection loses its node: none, producer (sessions and producers) or all (consumers too)")
}

// dialOptions are the client options of a command's connection.
func dialOptions(cmd *cobra.Command, reconnect string) (client.Options, error) {
	p, err := client.ParseReconnectPolicy(reconnect)
	if err != nil {
		return client.Options{}, fmt.Errorf("--reconnect: %w", err)
	}
	o, err := clientOptions(cmd)
	o.ReconnectPolicy = p
	return o, err
}
