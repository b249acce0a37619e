package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

func clusterCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster and move its replicas"}
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
				fmt.Fprintf(w, "answered by %s\n", st.AnsweredBy)
				if st.UnderReplicated > 0 {
					fmt.Fprintf(w, "%d members have fewer live replicas than their queue wants: each gets one on a live node that holds none of it, as soon as one exists\n", st.UnderReplicated)
				}
				if st.Moving > 0 {
					fmt.Fprintf(w, "%d members are moving: a replica catching up (marked +), or a host moving to its preferred node\n", st.Moving)
				}
				fmt.Fprintln(w)
				t := newTable(w, "NODE", "STATE", "META ROLE", "CLIENT", "RAFT", "GOSSIP")
				for _, n := range st.Nodes {
					state := n.State
					if n.Decommissioning {
						state += " (decommissioning)"
					}
					t.row(n.ID, state, n.MetaRole, orDash(n.ClientAddr), orDash(n.RaftAddr), orDash(n.GossipAddr))
				}
				if err := t.flush(); err != nil {
					return err
				}
				fmt.Fprintln(w)
				t = newTable(w, "GROUP", "LEADER", "COMMIT", "REPLICAS (LAG)", "WANTED")
				for _, g := range st.Groups {
					var rs []string
					for _, r := range g.Replicas {
						lag := "?"
						if r.Reachable {
							lag = fmt.Sprint(r.Lag)
						}
						mark := ""
						if r.CatchingUp {
							mark = "+"
						}
						rs = append(rs, fmt.Sprintf("%s%s(%s)", r.Node, mark, lag))
					}
					wanted := "-"
					if g.Wanted > 0 {
						wanted = fmt.Sprint(g.Wanted)
					}
					t.row(g.Name, orDash(g.Leader), g.CommitIndex, strings.Join(rs, " "), wanted)
				}
				return t.flush()
			})
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(status, rebalanceCmd())
	return cmd
}

func rebalanceCmd() *cobra.Command {
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Repair members short of replicas and spread hosts over the nodes now",
		Long: `Plan the moves that give each member short of replicas one on a live node
that holds none of it, re-place replicas of removed nodes, move replicas
onto nodes that hold fewer (a node that joined), make other replicas the
preferred hosts of groups, and renew members onto nodes that host fewer
(renew-member: the member drains into the queue's others and is placed
anew, empty, under the same name), until every live node hosts about as
many members; then make them (with --dry-run, only show them).

The cluster does all of this by itself, one group every 10 s and one
renewal at a time, unless its nodes run with --auto-rebalance=false.
Rebalance makes every move at once, whatever that setting. A new replica
votes, and can become a host, once it has caught up: run rebalance again
after replicas moved to spread the hosts onto them. Nothing moves but
repairs while a node is down or a member is short of replicas.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				r, err := a.Rebalance(ctx, dryRun)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, r)
				}
				w := cmd.OutOrStdout()
				switch {
				case len(r.Moves) == 0 && r.Degraded:
					fmt.Fprintln(w, "nothing to move now; hosts spread once every node is alive and no member is short of replicas")
					return nil
				case len(r.Moves) == 0:
					fmt.Fprintln(w, "nothing to move: every member has its replicas and the hosts are spread")
					return nil
				}
				t := newTable(w, "MEMBER", "ACTION", "FROM", "TO")
				for _, m := range r.Moves {
					t.row(m.Member, m.Action, orDash(m.From), orDash(m.To))
				}
				if err := t.flush(); err != nil {
					return err
				}
				if r.Applied {
					fmt.Fprintf(w, "\n%d moves made; new replicas vote and hosts move once caught up (watch: cairn cluster status)\n", len(r.Moves))
				} else {
					fmt.Fprintf(w, "\n%d moves planned, none made (--dry-run)\n", len(r.Moves))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the moves without making them")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func nodeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Take nodes out of the cluster"}
	cmd.AddCommand(&cobra.Command{
		Use:   "remove ID",
		Short: "Remove a dead node for good; its replicas move to live nodes",
		Long: `Remove a node that is gone for good (its machine replaced, its disk lost).
The cluster places each of its replicas on a live node that holds none of
that member, adds it to the member's Raft group, then drops the removed node,
so no group loses its quorum. With no such node, the member runs on fewer
replicas until one joins, and then gets its replica back. The id joins
again only from an empty data directory. A node that is alive is refused:
to take a live node out, run 'cairn node leave --decommission' against it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				if err := a.RemoveNode(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed node %s; its replicas are being re-placed (watch: cairn cluster status)\n", args[0])
				return nil
			})
		},
	})
	cmd.AddCommand(nodeLeaveCmd(), nodeRecoverMetaCmd())
	return cmd
}

func nodeLeaveCmd() *cobra.Command {
	var (
		decommission bool
		wait         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Make the node at --server hand its leaderships to others and stop",
		Long: `Make the node at --server hand every leadership it holds (the meta group,
the members it hosts) to other nodes, then stop gracefully. It stays a
member of every group: start it again and it catches up. Use it before
planned maintenance, or as a Kubernetes preStop hook.

With --decommission the node leaves the cluster for good (a scale-down):
each of its replicas first moves to another live node, where it copies the
member's state and votes before the one on the leaving node is dropped,
so every member keeps its replicas throughout. Then the node is removed
and stops; its id joins again only from an empty data directory. Only the
first --server address is asked. Refused, changing nothing, if a member
would have no node to move to. If --wait runs out, the moves go on: run
the command again to wait.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !decommission {
				return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
					node, err := a.LeaveNode(ctx)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "node %s handed its leaderships over and is stopping\n", node)
					return nil
				})
			}
			o, err := clientOptions(cmd)
			if err != nil {
				return err
			}
			a, err := client.NewAdmin(servers(cmd), o)
			if err != nil {
				return err
			}
			defer a.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			node, moved, err := a.DecommissionNode(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s moved its %s to other nodes, left the cluster for good and is stopping\n", node, plural(moved, "member replica"))
			return nil
		},
	}
	cmd.Flags().BoolVar(&decommission, "decommission", false, "move every replica to other nodes first, then leave the cluster for good (scale-down)")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long --decommission waits for the replicas to move")
	return cmd
}
