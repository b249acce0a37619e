package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/cluster"
)

func nodeRecoverMetaCmd() *cobra.Command {
	var (
		cfg    cluster.Config
		voters string
	)
	cmd := &cobra.Command{
		Use:   "recover-meta --node-id ID --data-dir DIR --voters ID[,ID...]",
		Short: "Give a stopped node's meta group new voters, after the cluster lost its quorum for good",
		Long: `Rewrite the meta group's configuration on a stopped node's data directory so
that the nodes --voters names are its only voters (hashicorp/raft's
RecoverCluster). For a meta group that lost a majority of its voters for
good: stop every node that is kept, run this on each with the same
--voters, then start them; they elect a leader among themselves. Remove
the lost nodes afterwards with 'cairn node remove'. It first drops the
meta log from the first entry the node could never apply, which would stop
it at every start, and says how many it dropped. It runs offline: a node
running on --data-dir keeps it from opening the log. docs/operations.md
has the whole procedure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ids []string
			for _, id := range strings.Split(voters, ",") {
				if id = strings.TrimSpace(id); id != "" && !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
			if !slices.Contains(ids, cfg.NodeID) {
				return fmt.Errorf("--voters %q must name this node, %s", voters, cfg.NodeID)
			}
			dropped, err := cluster.RecoverMeta(cfg, ids)
			if err != nil {
				return err
			}
			if dropped > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "dropped the last %d meta log entries of node %s, from the first that could not be applied\n", dropped, cfg.NodeID)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s's meta group now has voters %s; start it (and the others, recovered the same way)\n", cfg.NodeID, strings.Join(ids, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.NodeID, "node-id", "", "the stopped node's id")
	f.StringVar(&cfg.DataDir, "data-dir", "", "the stopped node's data directory")
	f.StringVar(&voters, "voters", "", "the ids of the nodes that are kept, this one among them, comma-separated")
	for _, name := range []string{"node-id", "data-dir", "voters"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
