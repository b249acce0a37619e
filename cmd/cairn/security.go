package main

import (
	"crypto/tls"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/certs"
)

// clientSecurityFlags are the flags every client command takes to reach
// a node over TLS and to prove who it is.
var clientSecurityFlags = []string{"tls-ca", "tls-cert", "tls-key"}

func addClientSecurityFlags(fs *pflag.FlagSet) {
	fs.String("tls-ca", "", "the cluster's CA certificate: connect over TLS and verify the nodes with it (env CAIRN_TLS_CA)")
	fs.String("tls-cert", "", "a client certificate to show as this client's identity (env CAIRN_TLS_CERT)")
	fs.String("tls-key", "", "the key of --tls-cert (env CAIRN_TLS_KEY)")
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
	return client.Options{TLS: t}, err
}
