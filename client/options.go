package client

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"
)

// Options configure a connection.
type Options struct {
	// ClientID names the connection; at most one connection of the
	// cluster holds an id at a time (ErrClientIDInUse), whichever node it
	// connects to. The connection keeps it across its reconnects.
	ClientID string
	// Prefetch is how many messages a consumer may hold unconsumed
	// (default 64).
	Prefetch int
	// DialTimeout bounds connecting to one node (default 5 s).
	DialTimeout time.Duration
	// RequestTimeout bounds a call that has no context of its own, such as
	// Message.Ack (default 30 s).
	RequestTimeout time.Duration
	// DupsOKBatch is how many DupsOK acknowledgements are sent together
	// (default 32); they are also sent after DupsOKDelay (default 100 ms).
	DupsOKBatch int
	DupsOKDelay time.Duration
	Logger      *slog.Logger

	// ReconnectPolicy says what the connection re-creates when it loses its
	// node: ReconnectProducer (the default), ReconnectNone or ReconnectAll.
	ReconnectPolicy ReconnectPolicy
	// ReconnectBlockingTime is how long a call (Receive, Send, Ack...) made
	// while the connection reconnects waits for the reconnect before it
	// fails with ErrLostServer (default 60 s).
	ReconnectBlockingTime time.Duration
	// NoDirectSends keeps every send on the connection's own node, which
	// forwards it to the member's host. By default a destination's sends go
	// straight to its member's host once a node has named it (direct.go);
	// set this when the client cannot reach the addresses the nodes
	// announce, or to measure the difference.
	NoDirectSends bool
	// PreferHostOf names a destination (one with a single member, or a
	// member's address NAME#I) whose host the connection connects to: each
	// connect and reconnect asks the node it dials which node hosts it and
	// opens the link there when it can, else on the node it dialled. Set it
	// on a connection that consumes that destination: its deliveries and
	// acknowledgements then skip the hop through another node (home.go).
	// A malformed name fails Dial with ErrInvalidName; a destination that
	// does not exist yet leaves the connection on the node it dialled.
	PreferHostOf string
	// TotalReconnectPeriod is how long the connection keeps trying to
	// reconnect before it ends for good; 0 means the default, -1, which is
	// forever.
	TotalReconnectPeriod time.Duration
	// TLS, if set, connects over TLS with it: its RootCAs verify the
	// nodes (the cluster's CA), its Certificates, if any, are the client's
	// identity. certs.ClientTLS makes one from files.
	TLS *tls.Config
	// User and Password authenticate the connection to a node that asks
	// (one serving TLS); a password is sent only over TLS. A client
	// certificate in TLS authenticates without them.
	User, Password string
	// Source is the address of whom the calls are made for, when this
	// client relays for another (the web console for a browser): a node
	// slows failed logins per source, and believes Source only from its
	// own host.
	Source string
}

// checkCredentials refuses a password that would cross the network in
// clear.
func (o *Options) checkCredentials() error {
	if o.User != "" && o.TLS == nil {
		return fmt.Errorf("%w: a user and password are sent only over TLS: give the cluster's CA (--tls-ca, Options.TLS)", ErrInvalidArgument)
	}
	return nil
}

// basicAuth is gRPC's per-call credentials for a user and password.
type basicAuth struct{ user, password, source string }

func (b basicAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	md := map[string]string{"authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(b.user+":"+b.password))}
	if b.source != "" {
		md[sourceHeader] = b.source
	}
	return md, nil
}

// sourceHeader carries Options.Source (cluster/auth.SourceHeader).
const sourceHeader = "x-cairn-source"

func (basicAuth) RequireTransportSecurity() bool { return true }

func (o *Options) setDefaults() {
	if o.Prefetch <= 0 {
		o.Prefetch = 64
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.DupsOKBatch <= 0 {
		o.DupsOKBatch = 32
	}
	if o.DupsOKDelay <= 0 {
		o.DupsOKDelay = 100 * time.Millisecond
	}
	if o.ReconnectBlockingTime <= 0 {
		o.ReconnectBlockingTime = 60 * time.Second
	}
	if o.TotalReconnectPeriod == 0 {
		o.TotalReconnectPeriod = -1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}
