package main

import (
	"context"
	"fmt"
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
may do what its grants say: --grant PATTERN=ACTIONS, where PATTERN is a
destination name, a prefix such as orders.* or * for all, and ACTIONS are
send, receive, browse, manage (create, update, purge, delete), admin (nodes,
connections, users) or all, comma-separated. These commands need the admin
permission: authenticate with --user and --password-file (yours, not the
new user's, which --new-password-file gives).`,
	}
	cmd.AddCommand(userCreateCmd(), userPasswdCmd(), userGrantCmd(), userDeleteCmd(), userListCmd())
	return cmd
}

func userCreateCmd() *cobra.Command {
	var (
		passwordFile string
		grants       []string
	)
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Make a user (with --new-password-file, or known by its client certificate only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			gs, err := parseGrants(grants)
			if err != nil {
				return err
			}
			password := ""
			if passwordFile != "" {
				if password, err = readSecretFile("--new-password-file", passwordFile); err != nil {
					return err
				}
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				u, err := a.CreateUser(ctx, args[0], password, gs)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "created user %s (%s)\n", u.Name, describeGrants(u.Grants))
				}
				return err
			})
		},
	}
	create.Flags().StringVar(&passwordFile, "new-password-file", "", "file whose first line is the new user's password")
	create.Flags().StringArrayVar(&grants, "grant", nil, "PATTERN=ACTIONS the user may do (repeatable), e.g. 'orders.*=send,receive'")
	return create
}

func userPasswdCmd() *cobra.Command {
	var passwordFile string
	passwd := &cobra.Command{
		Use:   "passwd NAME --new-password-file F",
		Short: "Change a user's password",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			password, err := readSecretFile("--new-password-file", passwordFile)
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
	passwd.Flags().StringVar(&passwordFile, "new-password-file", "", "file whose first line is the new password")
	_ = passwd.MarkFlagRequired("new-password-file")
	return passwd
}

func userGrantCmd() *cobra.Command {
	var grants []string
	grant := &cobra.Command{
		Use:   "grant NAME --grant PATTERN=ACTIONS...",
		Short: "Replace what a user may do",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			gs, err := parseGrants(grants)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *client.Admin) error {
				u, err := a.SetGrants(ctx, args[0], gs)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "user %s may now %s\n", u.Name, describeGrants(u.Grants))
				}
				return err
			})
		},
	}
	grant.Flags().StringArrayVar(&grants, "grant", nil, "PATTERN=ACTIONS the user may do (repeatable); none: nothing")
	return grant
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
		Short: "List the users and their grants",
		Long: `List the users and their grants. With --json it prints one object:
{"users":[{"name","has_password","grants":[{"pattern","actions"}]}]}.`,
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
				t := newTable(cmd.OutOrStdout(), "NAME", "PASSWORD", "GRANTS")
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

// parseGrants reads --grant PATTERN=ACTIONS flags; the node checks the
// pattern and the actions' names.
func parseGrants(flags []string) ([]client.Grant, error) {
	out := []client.Grant{}
	for _, f := range flags {
		pattern, actions, ok := strings.Cut(f, "=")
		if !ok || pattern == "" || actions == "" {
			return nil, fmt.Errorf("%w: --grant %q: use PATTERN=ACTIONS, e.g. 'orders.*=send,receive'", client.ErrInvalidArgument, f)
		}
		out = append(out, client.Grant{Pattern: pattern, Actions: strings.Split(actions, ",")})
	}
	return out, nil
}

func describeGrants(gs []client.Grant) string {
	if len(gs) == 0 {
		return "nothing"
	}
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = g.Pattern + "=" + strings.Join(g.Actions, ",")
	}
	return strings.Join(parts, " ")
}
