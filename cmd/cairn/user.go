package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/client"
)

func userCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Create, list, change and delete the users clients authenticate as",
		Long: `Users are the identities clients of a node serving TLS authenticate as: by
password, or by a client certificate naming them (cairn cert client). Each
may do what it is permitted: ACTION:PATTERN, where ACTION is send, receive,
browse, manage (create, update, purge, delete) or admin (nodes,
connections, users; whatever the pattern), or all, and PATTERN is a
destination name, a prefix ending in * (orders.*) or * for all.

These commands need the admin permission. On create and passwd,
--password-file is the user's new password: authenticate yourself with
CAIRN_USER and CAIRN_PASSWORD_FILE (or CAIRN_PASSWORD) there.`,
	}
	cmd.AddCommand(userCreateCmd(), userPasswdCmd(), userPermitCmd(true), userPermitCmd(false), userDeleteCmd(), userListCmd())
	return cmd
}

func userCreateCmd() *cobra.Command {
	var (
		passwordFile string
		permits      []string
	)
	create := &cobra.Command{
		Use:   "create NAME [--password-file F] [--permit ACTION:PATTERN]...",
		Short: "Make a user (with --password-file, or known by its client certificate only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var gs []client.Grant
			for _, p := range permits {
				g, err := parsePermit(p)
				if err != nil {
					return err
				}
				gs = addPermit(gs, g)
			}
			password := ""
			if passwordFile != "" {
				var err error
				if password, err = readSecretFile("--password-file", passwordFile); err != nil {
					return err
				}
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				u, err := a.CreateUser(ctx, args[0], password, gs)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "created user %s, permitted %s\n", u.Name, describeGrants(u.Grants))
				}
				return err
			})
		},
	}
	create.Flags().StringVar(&passwordFile, "password-file", "", "file whose first line is the new user's password")
	create.Flags().StringArrayVar(&permits, "permit", nil, "ACTION:PATTERN the user may do (repeatable), e.g. send:orders.*")
	return create
}

func userPasswdCmd() *cobra.Command {
	var passwordFile string
	passwd := &cobra.Command{
		Use:   "passwd NAME --password-file F",
		Short: "Change a user's password",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			password, err := readSecretFile("--password-file", passwordFile)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				err := a.SetPassword(ctx, args[0], password)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "changed the password of user %s\n", args[0])
				}
				return err
			})
		},
	}
	passwd.Flags().StringVar(&passwordFile, "password-file", "", "file whose first line is the user's new password")
	_ = passwd.MarkFlagRequired("password-file")
	return passwd
}

// userPermitCmd is cairn user permit (add) or revoke.
func userPermitCmd(add bool) *cobra.Command {
	use, short, done := "revoke", "Take an action on a pattern away from a user", "revoked"
	if add {
		use, short, done = "permit", "Let a user do an action on a pattern", "permitted"
	}
	return &cobra.Command{
		Use:   use + " NAME ACTION:PATTERN",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := parsePermit(args[1])
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				u, err := a.ChangeGrants(ctx, args[0], func(gs []client.Grant) []client.Grant {
					if add {
						return addPermit(gs, g)
					}
					return removePermit(gs, g)
				})
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s to user %s, now permitted %s\n", done, args[1], u.Name, describeGrants(u.Grants))
				}
				return err
			})
		},
	}
}

func userDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a user; its open connections can do nothing more",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				err := a.DeleteUser(ctx, args[0])
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "deleted user %s\n", args[0])
				}
				return err
			})
		},
	}
}

func userListCmd() *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the users and what they are permitted",
		Long: `List the users and what they are permitted. With --json it prints one
object: {"users":[{"name","has_password","grants":[{"pattern","actions"}]}]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				users, err := a.ListUsers(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, struct {
						Users []client.UserInfo `json:"users"`
					}{users})
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "PASSWORD", "PERMITTED")
				for _, u := range users {
					t.row(u.Name, u.HasPassword, describeGrants(u.Grants))
				}
				return t.flush()
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return list
}

// parsePermit reads ACTION:PATTERN; the node checks the action's name and
// the pattern.
func parsePermit(s string) (client.Grant, error) {
	action, pattern, ok := strings.Cut(s, ":")
	if !ok || action == "" || pattern == "" {
		return client.Grant{}, fmt.Errorf("%w: %q: use ACTION:PATTERN, e.g. send:orders.*", client.ErrInvalidArgument, s)
	}
	return client.Grant{Pattern: pattern, Actions: []string{action}}, nil
}

// addPermit adds g's action to the grant on its pattern.
func addPermit(gs []client.Grant, g client.Grant) []client.Grant {
	for i := range gs {
		if gs[i].Pattern == g.Pattern {
			if !slices.Contains(gs[i].Actions, g.Actions[0]) {
				gs[i].Actions = append(gs[i].Actions, g.Actions[0])
			}
			return gs
		}
	}
	return append(gs, g)
}

// removePermit takes g's action from the grant on its pattern ("all" takes
// every action), dropping a grant left with none.
func removePermit(gs []client.Grant, g client.Grant) []client.Grant {
	out := gs[:0]
	for _, have := range gs {
		if have.Pattern == g.Pattern {
			if g.Actions[0] == "all" {
				continue
			}
			have.Actions = slices.DeleteFunc(have.Actions, func(a string) bool { return a == g.Actions[0] })
			if slices.Contains(have.Actions, "all") {
				have.Actions = slices.DeleteFunc([]string{"send", "receive", "browse", "manage", "admin"}, func(a string) bool { return a == g.Actions[0] })
			}
			if len(have.Actions) == 0 {
				continue
			}
		}
		out = append(out, have)
	}
	return out
}

func describeGrants(gs []client.Grant) string {
	if len(gs) == 0 {
		return "nothing"
	}
	var parts []string
	for _, g := range gs {
		for _, a := range g.Actions {
			parts = append(parts, a+":"+g.Pattern)
		}
	}
	return strings.Join(parts, " ")
}
