package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/certs"
)

// clientSecurityFlags are the flags every client command takes to reach
// a node over TLS and to prove who it is.
var clientSecurityFlags = []string{"tls-ca", "tls-cert", "tls-key", "user", "password-file"}

func addClientSecurityFlags(fs *pflag.FlagSet) {
	fs.String("tls-ca", "", "the cluster's CA certificate: connect over TLS and verify the nodes with it (env CAIRN_TLS_CA)")
	fs.String("tls-cert", "", "a client certificate to show as this client's identity (env CAIRN_TLS_CERT)")
	fs.String("tls-key", "", "the key of --tls-cert (env CAIRN_TLS_KEY)")
	fs.String("user", "", "the user to authenticate as (env CAIRN_USER)")
	fs.String("password-file", "", "file whose first line is --user's password (env CAIRN_PASSWORD_FILE; CAIRN_PASSWORD is read too)")
	fs.String(loginPasswordFile, "", "")
	_ = fs.MarkHidden(loginPasswordFile)
}

// loginPasswordFile holds a --password-file given before the command's
// name (cairn --user admin --password-file admin.pw user create app
// --password-file app.pw): cairn user create and passwd have a
// --password-file of their own, the new password, which would otherwise
// take both.
const loginPasswordFile = "login-password-file"

// takeLoginPasswordFile makes a --password-file given before the command's
// name the root's, before the environment is read.
func takeLoginPasswordFile(root *pflag.FlagSet) error {
	login, _ := root.GetString(loginPasswordFile)
	if login == "" {
		return nil
	}
	if file, _ := root.GetString("password-file"); root.Changed("password-file") && file != login {
		return fmt.Errorf("%w: --password-file given twice, %s and %s", client.ErrInvalidArgument, login, file)
	}
	return root.Set("password-file", login)
}

// globalPasswordFile renames each --password-file given before the first
// word that is not a flag of root to --login-password-file.
func globalPasswordFile(root *cobra.Command, args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "password-file" {
			out[i] = strings.Replace(a, "password-file", loginPasswordFile, 1)
		}
		if f := root.PersistentFlags().Lookup(name); !hasValue && f != nil && f.NoOptDefVal == "" {
			i++ // its value
		}
	}
	return out
}

// clientTLS is the TLS configuration the flags ask for; nil without
// --tls-ca.
func clientTLS(cmd *cobra.Command) (*tls.Config, error) {
	get := func(name string) string { v, _ := cmd.Flags().GetString(name); return v }
	if get("tls-ca") == "" {
		if get("tls-cert") != "" || get("tls-key") != "" {
			return nil, fmt.Errorf("%w: --tls-cert and --tls-key need --tls-ca, the CA that verifies the nodes", client.ErrInvalidArgument)
		}
		return nil, nil
	}
	return certs.ClientTLS(get("tls-ca"), get("tls-cert"), get("tls-key"))
}

// clientOptions are the connection options every client command starts
// from: how to reach the nodes and prove itself to them.
func clientOptions(cmd *cobra.Command) (client.Options, error) {
	t, err := clientTLS(cmd)
	if err != nil {
		return client.Options{}, err
	}
	o := client.Options{TLS: t}
	// The root's flags: cairn user create and passwd have a --password-file
	// of their own, the new password.
	root := cmd.Root().PersistentFlags()
	o.User, _ = root.GetString("user")
	file, _ := root.GetString("password-file")
	switch {
	case o.User == "" && file != "":
		return o, fmt.Errorf("%w: --password-file needs --user", client.ErrInvalidArgument)
	case o.User == "":
	case file != "":
		if o.Password, err = readSecretFile("--password-file", file); err != nil {
			return o, err
		}
	default:
		pw, ok := os.LookupEnv("CAIRN_PASSWORD")
		if !ok {
			return o, fmt.Errorf("%w: --user %s needs a password: --password-file F, CAIRN_PASSWORD_FILE or CAIRN_PASSWORD", client.ErrInvalidArgument, o.User)
		}
		o.Password = pw
	}
	return o, nil
}

// readSecretFile reads the first line of a file holding a secret.
func readSecretFile(flag, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", client.ErrInvalidArgument, flag, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSuffix(line, "\r"), nil
}
