package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnmq/cairn/transport/certs"
)

// certCmd makes a cluster's certificates with Go's crypto: no openssl.
func certCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make the cluster's certificates: a CA, node and user certificates",
		Long: `Make the certificates TLS and mutual TLS need, with ECDSA P-256 keys:

  cairn cert ca --out certs
  cairn cert node --ca certs --node-id cairn-0 --hosts cairn-0.cairn,localhost,127.0.0.1 --out certs
  cairn cert client --ca certs --user billing --out certs

ca writes ca.pem and ca-key.pem; node writes ID.pem and ID-key.pem, a
certificate for serving and for dialing the other nodes, valid for --hosts
(every name and address the node is reached at); client writes NAME.pem
and NAME-key.pem, an identity for user NAME. Keys are written readable by
their owner only; an existing file is not replaced without --force. Keep
ca-key.pem off the nodes: it signs new identities.`,
	}
	cmd.AddCommand(certCaCmd(), certNodeCmd(), certClientCmd(), gossipKeyCmd())
	return cmd
}

// certOut is what every cert command takes: where to write, whether to
// replace, for how long.
type certOut struct {
	dir      string
	force    bool
	validity time.Duration
}

func (o *certOut) flags(c *cobra.Command, validity time.Duration) {
	c.Flags().StringVar(&o.dir, "out", ".", "directory to write the certificate and its key to")
	c.Flags().BoolVar(&o.force, "force", false, "replace files that exist")
	c.Flags().DurationVar(&o.validity, "valid-for", validity, "how long the certificate is valid")
}

func (o *certOut) write(c *cobra.Command, p certs.Pair, name string) error {
	certFile, keyFile, err := p.Write(o.dir, name, o.force)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "wrote %s and %s (valid until %s)\n", certFile, keyFile, p.Cert.NotAfter.UTC().Format(time.DateOnly))
	return nil
}

func certCaCmd() *cobra.Command {
	var o certOut
	ca := &cobra.Command{
		Use:   "ca",
		Short: "Make a cluster CA: ca.pem and ca-key.pem",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := certs.NewCA(o.validity, time.Now())
			if err != nil {
				return err
			}
			return o.write(c, p, "ca")
		},
	}
	o.flags(ca, certs.CAValidity)
	return ca
}

func certNodeCmd() *cobra.Command {
	var o certOut
	var caDir, nodeID, hosts string
	node := &cobra.Command{
		Use:   "node",
		Short: "Make a node's certificate, signed by the CA: ID.pem and ID-key.pem",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			signer, err := certs.ReadCA(caDir)
			if err != nil {
				return err
			}
			p, err := certs.NewNode(signer, nodeID, strings.Split(hosts, ","), o.validity, time.Now())
			if err != nil {
				return err
			}
			return o.write(c, p, nodeID)
		},
	}
	o.flags(node, certs.CertValidity)
	node.Flags().StringVar(&caDir, "ca", "", "directory holding ca.pem and ca-key.pem")
	node.Flags().StringVar(&nodeID, "node-id", "", "the node's id, as its --node-id")
	node.Flags().StringVar(&hosts, "hosts", "", "comma-separated host names and IP addresses the node is reached at")
	for _, f := range []string{"ca", "node-id", "hosts"} {
		_ = node.MarkFlagRequired(f)
	}
	return node
}

func certClientCmd() *cobra.Command {
	var o certOut
	var caDir, user string
	client := &cobra.Command{
		Use:   "client",
		Short: "Make a user's client certificate, signed by the CA: NAME.pem and NAME-key.pem",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			signer, err := certs.ReadCA(caDir)
			if err != nil {
				return err
			}
			p, err := certs.NewUser(signer, user, o.validity, time.Now())
			if err != nil {
				return err
			}
			return o.write(c, p, user)
		},
	}
	o.flags(client, certs.CertValidity)
	client.Flags().StringVar(&caDir, "ca", "", "directory holding ca.pem and ca-key.pem")
	client.Flags().StringVar(&user, "user", "", "the user the certificate identifies")
	for _, f := range []string{"ca", "user"} {
		_ = client.MarkFlagRequired(f)
	}
	return client
}

func gossipKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gossip-key",
		Short: "Print a new random gossip key for cairn server --gossip-key",
		Long: `Print a new random 32-byte key, base64, for cairn server --gossip-key (or
CAIRN_GOSSIP_KEY): every node of a cluster gossips with the same key, and
a node without it is not heard.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), base64.StdEncoding.EncodeToString(key))
			return nil
		},
	}
}
