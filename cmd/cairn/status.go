package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

func clusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster"}
	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the nodes and the Raft groups, as the answering node sees them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				st, err := a.ClusterStatus(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, st)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "answered by %s\n\n", st.AnsweredBy)
				t := newTable(w, "NODE", "STATE", "META ROLE", "CLIENT", "RAFT", "GOSSIP")
				for _, n := range st.Nodes {
					t.row(n.ID, n.State, n.MetaRole, orDash(n.ClientAddr), orDash(n.RaftAddr), orDash(n.GossipAddr))
				}
				if err := t.flush(); err != nil {
					return err
				}
				fmt.Fprintln(w)
				t = newTable(w, "GROUP", "LEADER", "COMMIT", "APPLIED", "REPLICAS")
				for _, g := range st.Groups {
					var rs []string
					for _, r := range g.Replicas {
						rs = append(rs, r.Node+"("+r.Role+")")
					}
					t.row(g.Name, orDash(g.Leader), g.CommitIndex, g.AppliedIndex, strings.Join(rs, " "))
				}
				return t.flush()
			})
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(status)
	return cmd
}
