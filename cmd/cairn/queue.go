package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

// adminTimeout bounds one admin command.
const adminTimeout = 30 * time.Second

// withAdmin runs fn with an admin client of --server.
func withAdmin(cmd *cobra.Command, fn func(ctx context.Context, a *client.Admin) error) error {
	o, err := clientOptions(cmd)
	if err != nil {
		return err
	}
	a, err := client.NewAdmin(servers(cmd), o)
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
	defer cancel()
	return fn(ctx, a)
}

func queueCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Create, inspect, purge and delete queues"}
	cmd.AddCommand(queueCreateCmd(), queueShowCmd(), queueListCmd(), queueUpdateCmd(), queuePurgeCmd(), queueDeleteCmd(), queueBrowseCmd())
	return cmd
}

func queueCreateCmd() *cobra.Command {
	var o client.QueueOptions
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a queue",
		Long: `Create a queue. NAME has letters, digits, '.', '_' and '-'.
--members splits the queue into members (default: one per live node);
--replicas sets how many nodes hold each member (default: 3, or fewer nodes;
a node that is restarting is waited for up to 3 s, so that the queue does
not keep fewer replicas for good).

Poison messages: with --max-deliveries N, a message delivered N times and
given back once more (recover, consumer or session closed, client died)
moves to the dead-letter queue (--dlq, default NAME.DLQ, created on first
use) with its properties and delivery count. --redelivery-delay makes a
message given back wait before it is delivered again, --redelivery-backoff
times longer for each later delivery, at most --redelivery-max-delay.

Stranded messages: a member whose pending messages have had no consumer for
--forward-delay moves them to a member that has consumers (0 never does).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.ForwardDelay == 0 {
				o.ForwardDelay = -1 // the flag's 0 is "never"; the library's is "default"
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				info, err := a.CreateQueue(ctx, args[0], o)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created queue %s: %s, %s each\n", info.Name, plural(len(info.Members), "member"), plural(info.Replicas, "replica"))
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&o.Members, "members", 0, "number of members (default: one per live node)")
	cmd.Flags().IntVar(&o.Replicas, "replicas", 0, "replication factor (default: min(3, nodes))")
	cmd.Flags().DurationVar(&o.TTL, "ttl", 0, "default time to live of messages, e.g. 10m (default: forever)")
	cmd.Flags().Int64Var(&o.MaxBytes, "max-size", 0, "most bytes of memory the messages held may cost, ids and properties included (default: unlimited)")
	cmd.Flags().Int64Var(&o.MaxMessages, "max-messages", 0, "most messages held, in every state (default: unlimited)")
	cmd.Flags().IntVar(&o.MaxDeliveries, "max-deliveries", 0, "deliveries after which a message given back goes to the dead-letter queue (default: unlimited)")
	cmd.Flags().StringVar(&o.DeadLetterQueue, "dlq", "", "dead-letter queue (default: NAME.DLQ)")
	cmd.Flags().DurationVar(&o.RedeliveryDelay, "redelivery-delay", 0, "wait before a message given back is delivered again, e.g. 1s (default: none)")
	cmd.Flags().IntVar(&o.RedeliveryBackoff, "redelivery-backoff", 1, "multiplier of the redelivery delay for each later delivery")
	cmd.Flags().DurationVar(&o.RedeliveryMaxDelay, "redelivery-max-delay", time.Hour, "longest redelivery delay")
	cmd.Flags().DurationVar(&o.DedupWindow, "dedup-window", 2*time.Minute, "how long each member remembers dedup ids")
	cmd.Flags().IntVar(&o.DedupMaxIDs, "dedup-max-ids", 100_000, "how many dedup ids each member remembers at most")
	cmd.Flags().DurationVar(&o.ForwardDelay, "forward-delay", 5*time.Second, "how long pending messages wait on a member without consumers before they move to one with consumers (0: never)")
	return cmd
}

func queueUpdateCmd() *cobra.Command {
	var u client.QueueUpdate
	cmd := &cobra.Command{
		Use:   "update NAME [--members N] [--replicas R]",
		Short: "Change a queue's number of members or replication factor",
		Long: `Change a queue's number of members or replication factor.

--members: new members are placed on the live nodes that host the fewest
and take sends at once. When N is lower, the highest members drain: they
take no new sends or consumers, move their messages to the other members
(keeping redelivered marks and delivery counts), and are removed once
empty; queue show lists them as draining until then. Consumers still
pinned to a removed member are ended and must be opened again.

--replicas: the members are renewed one at a time. Each drains its
messages into the others the same way, then is placed anew, empty, with R
replicas under the same name; its consumers carry on there. queue show
lists it as renewing meanwhile. A queue of one member gets a spare member
for the time of its renewal.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("members") && !cmd.Flags().Changed("replicas") {
				return fmt.Errorf("nothing to update: give --members N or --replicas R")
			}
			if cmd.Flags().Changed("members") && u.Members < 1 || cmd.Flags().Changed("replicas") && u.Replicas < 1 {
				return fmt.Errorf("%w: --members and --replicas are at least 1", client.ErrInvalidArgument)
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				info, err := a.UpdateQueueWith(ctx, args[0], u)
				if err != nil {
					return err
				}
				draining, renewing := 0, 0
				for _, m := range info.Members {
					switch {
					case m.Renewing:
						renewing++
					case m.Draining:
						draining++
					}
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "updated queue %s: %s, %s each", info.Name, plural(len(info.Members)-draining, "member"), plural(info.Replicas, "replica"))
				if draining > 0 {
					fmt.Fprintf(out, ", %d draining", draining)
				}
				if renewing > 0 {
					fmt.Fprintf(out, ", %d renewing", renewing)
				}
				fmt.Fprintln(out)
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&u.Members, "members", 0, "number of members wanted")
	cmd.Flags().IntVar(&u.Replicas, "replicas", 0, "replication factor wanted (members are renewed one at a time)")
	return cmd
}

func queueShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a queue's pending and delivered counts, in total and per member",
		Long: `Show a queue: pending messages (waiting for a consumer), delivered ones
(handed to a consumer, not yet acknowledged), delayed ones (waiting out a
redelivery delay), moving ones (on the way to another member or to the
dead-letter queue), those moved to the dead-letter queue, and prepared ones
(held by a transaction between its prepare and its decision), in total and per
member with the member's host node and its consumers.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				info, err := a.ShowQueue(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, info)
				}
				w := cmd.OutOrStdout()
				prepared := ""
				if info.Prepared > 0 {
					prepared = fmt.Sprintf(", %d prepared", info.Prepared)
				}
				fmt.Fprintf(w, "queue %s: %d pending, %d delivered, %d delayed, %d dead-lettered%s, %s\n",
					info.Name, info.Pending, info.Delivered, info.Delayed, info.DeadLettered, prepared, plural(info.Consumers, "consumer"))
				t := newTable(w, "MEMBER", "HOST", "PENDING", "DELIVERED", "DELAYED", "MOVING", "DEAD-LETTERED", "PREPARED", "CONSUMERS")
				for _, m := range info.Members {
					name := m.Name
					switch {
					case m.Renewing:
						name += " (renewing)"
					case m.Draining:
						name += " (draining)"
					}
					t.row(name, orDash(m.Host), m.Pending, m.Delivered, m.Delayed, m.Moving, m.DeadLettered, m.Prepared, m.Consumers)
				}
				return t.flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func queueListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List queues with their counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				qs, err := a.ListQueues(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, qs)
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "MEMBERS", "REPLICAS", "PENDING", "DELIVERED")
				for _, q := range qs {
					t.row(q.Name, len(q.Members), q.Replicas, q.Pending, q.Delivered)
				}
				return t.flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func queuePurgeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "purge NAME",
		Short: "Remove every pending message of a queue (or of member NAME#I)",
		Long: `Remove every pending message of a queue, or of one member with NAME#I.
Delivered messages, not yet acknowledged, stay with their consumers.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				n, err := a.PurgeQueue(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "purged %s from %s\n", plural(int(n), "message"), args[0])
				return nil
			})
		},
	}
}

func queueBrowseCmd() *cobra.Command {
	var (
		sel    string
		count  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "browse NAME",
		Short: "Show a queue's pending messages without consuming them",
		Long: `Show up to --count pending messages of a queue (or of member NAME#I),
member after member and in delivery order within each, without consuming
them or changing any count. --selector shows only those a JMS selector
selects (cairn receive --help has examples). Messages in consumers' hands
are not shown.

With --json each message prints one line, as cairn receive --json does:
  {"id":"...","member":"orders#0","body":"...","redelivered":false,"delivery_count":0,"priority":4,"properties":{...}}`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return fmt.Errorf("--count %d: browse at least one message", count)
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				ms, err := a.BrowseQueue(ctx, args[0], client.BrowseOptions{Selector: sel, Count: count})
				if err != nil {
					return err
				}
				out := newJSONLines(cmd.OutOrStdout())
				for _, m := range ms {
					if asJSON {
						err = out.write(receivedLine(m))
					} else {
						_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  priority=%d delivery_count=%d redelivered=%v  %s\n",
							m.ID, m.Member, m.Priority, m.DeliveryCount, m.Redelivered, m.Body)
					}
					if err != nil {
						return err
					}
				}
				if !asJSON && len(ms) == 0 {
					what := "no pending messages in " + args[0]
					if sel != "" {
						what += " that the selector selects"
					}
					fmt.Fprintln(cmd.OutOrStdout(), what)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&sel, "selector", "", "show only the messages this JMS selector selects")
	f.IntVar(&count, "count", 100, "most messages to show (up to 10000)")
	f.BoolVar(&asJSON, "json", false, "print one JSON line per message")
	return cmd
}

func queueDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a queue and every message in it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				if err := a.DeleteQueue(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted queue %s\n", args[0])
				return nil
			})
		},
	}
}
