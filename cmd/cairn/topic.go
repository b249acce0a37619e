package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

func topicCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Create, inspect and delete topics"}
	cmd.AddCommand(topicCreateCmd(), topicShowCmd(), topicListCmd(), topicDeleteCmd())
	return cmd
}

func topicCreateCmd() *cobra.Command {
	var o client.TopicOptions
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: `Create a topic. NAME has letters, digits, '.', '_' and '-'. Like a queue,
a topic has members on different nodes (--members, default one per live
node), each replicated on --replicas nodes (default: 3, or fewer nodes); a
publish goes to one member and reaches every subscription. Its members and
replicas are fixed once it is made. --ttl is its messages' default time to
live. Publishing or subscribing to a topic that does not exist makes one
with the defaults only on nodes that run with --auto-create.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				info, err := a.CreateTopic(ctx, args[0], o)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created topic %s: %s, %s each\n", info.Name, plural(len(info.Members), "member"), plural(info.Replicas, "replica"))
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&o.Members, "members", 0, "number of members (default: one per live node)")
	cmd.Flags().IntVar(&o.Replicas, "replicas", 0, "replication factor (default: min(3, nodes))")
	cmd.Flags().DurationVar(&o.TTL, "ttl", 0, "default time to live of messages, e.g. 10m (default: forever)")
	return cmd
}

func topicShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a topic's members and its subscriptions' counts",
		Long: `Show a topic: its members with their hosts, and each subscription with its
client id, whether durable and shared, its pending messages (published and
waiting for a consumer), delivered ones (not yet acknowledged) and its
consumers. cairn queue show TOPIC::ID shows one subscription per member.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				info, err := a.ShowTopic(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, info)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "topic %s: %s, %s\n", info.Name, plural(len(info.Members), "member"), plural(len(info.Subscriptions), "subscription"))
				t := newTable(w, "MEMBER", "HOST")
				for _, m := range info.Members {
					t.row(m.Name, orDash(m.Host))
				}
				if err := t.flush(); err != nil {
					return err
				}
				if len(info.Subscriptions) == 0 {
					return nil
				}
				fmt.Fprintln(w)
				t = newTable(w, "SUBSCRIPTION", "CLIENT ID", "DURABLE", "SHARED", "PENDING", "DELIVERED", "CONSUMERS", "SELECTOR", "DESTINATION")
				for _, s := range info.Subscriptions {
					t.row(orDash(s.Name), orDash(s.ClientID), s.Durable, s.Shared, s.Pending, s.Delivered, s.Consumers, orDash(s.Selector), s.Destination)
				}
				return t.flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func topicListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics with their subscriptions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				ts, err := a.ListTopics(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, ts)
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "MEMBERS", "REPLICAS", "SUBSCRIPTIONS")
				for _, tp := range ts {
					t.row(tp.Name, len(tp.Members), tp.Replicas, len(tp.Subscriptions))
				}
				return t.flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func topicDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic, its subscriptions and every message they hold",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				if err := a.DeleteTopic(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted topic %s\n", args[0])
				return nil
			})
		},
	}
}

func subscriptionCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "subscription", Short: "Delete a topic's durable or shared subscriptions"}
	var clientID string
	del := &cobra.Command{
		Use:   "delete TOPIC NAME",
		Short: "Delete a subscription and the messages it holds (refused while it has a consumer)",
		Long: `Delete TOPIC's durable or shared subscription NAME, of --client-id when it
was made with one, and the messages it holds. It is refused while a
consumer uses the subscription. A non-durable subscription goes by itself
with its consumer.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				if err := a.DeleteSubscription(ctx, args[0], args[1], clientID); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted subscription %s of %s\n", args[1], args[0])
				return nil
			})
		},
	}
	del.Flags().StringVar(&clientID, "client-id", "", "the client id the subscription was made with")
	cmd.AddCommand(del)
	return cmd
}
