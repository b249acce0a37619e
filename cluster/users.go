package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cairnmq/cairn/cluster/auth"
	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
)

// Users and what they may do (package auth): on exactly when TLS is.

// startAuth makes the node's authenticator, over the meta group's users,
// when TLS is on, and says at start whether the node is open; with
// --admin-password-file it makes the first administrator.
func (n *Node) startAuth() {
	if n.tls == nil {
		if n.cfg.InsecureAllowRemote {
			n.log.Warn("TLS is off and --insecure-allow-remote is set: every port of this node speaks in clear to the network, and anyone who reaches it may do anything; see docs/security.md")
		} else {
			n.log.Warn("TLS is off: this node serves its own host only (127.0.0.1), and any process of it may do anything; see docs/security.md")
		}
		return
	}
	users := func(name string) (u *fsmpb.User, ok bool) {
		n.meta.Read(func(m *fsm.Meta) { u, ok = m.User(name) })
		return u, ok
	}
	n.auth = auth.New(users, n.tempQueueSend, n.log.With("log", "audit"))
	n.log.Info("TLS is on: clients must authenticate, by user and password or by client certificate")
	if n.adminPassword != "" {
		n.makeAdmin(n.adminPassword)
	}
}

// tempQueueSend reports whether act on dest needs no grant: any caller may
// send to a temporary queue (its owner's replies come that way); only its
// connection consumes from it.
func (n *Node) tempQueueSend(act fsm.Action, dest string) bool {
	return act == fsm.ActionSend && n.temporaryOwner(dest) != ""
}

// Authorize says whether the call or connection of ctx may do act on dest.
func (b clientAPI) Authorize(ctx context.Context, act fsm.Action, dest string) error {
	if b.n.auth == nil {
		return nil
	}
	return b.n.auth.Authorize(ctx, act, dest)
}

// errUsersNeedTLS refuses users on an open node: it asks nobody who they
// are, so a user made there would be a name, not an identity, and would
// outlive the node's openness once TLS is on.
var errUsersNeedTLS = fmt.Errorf("%w: users exist only with TLS on: this node is open (no --tls-cert) and asks nobody who they are; start the nodes with TLS (docs/security.md) and make users then", transport.ErrInvalidArgument)

func (a adminAPI) UsersAllowed() error {
	if a.n.auth == nil {
		return errUsersNeedTLS
	}
	return nil
}

func (a adminAPI) PutUser(ctx context.Context, u *fsmpb.User, create bool) error {
	_, err := a.n.meta.Apply(ctx, &fsmpb.PutUser{User: u, Create: create})
	return frontend.WireError(err)
}

func (a adminAPI) DeleteUser(ctx context.Context, name string) error {
	_, err := a.n.meta.Apply(ctx, &fsmpb.DeleteUser{Name: name})
	return frontend.WireError(err)
}

func (a adminAPI) Users() (out []*fsmpb.User) {
	a.n.meta.Read(func(m *fsm.Meta) { out = m.Users() })
	return out
}

// AdminUser is the user --admin-password-file makes.
const AdminUser = "admin"

// readAdminPassword reads --admin-password-file: its first line.
func readAdminPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: --admin-password-file: %v", ErrConfig, err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if len(pw) < auth.MinPasswordLen || len(pw) > auth.MaxPasswordLen {
		return "", fmt.Errorf("%w: --admin-password-file %s: the password has %d bytes; use %d to %d", ErrConfig, file, len(pw), auth.MinPasswordLen, auth.MaxPasswordLen)
	}
	return pw, nil
}

// makeAdmin makes user admin, with every permission, once the meta group
// has a leader, if the cluster has no user yet: the first administrator of
// a cluster bootstrapped with --admin-password-file.
func (n *Node) makeAdmin(password string) {
	hash, err := auth.HashPassword(password)
	if err != nil {
		n.log.Error("--admin-password-file", "err", err)
		return
	}
	admin := &fsmpb.User{Name: AdminUser, PasswordHash: hash, Grants: []*fsmpb.Grant{{Pattern: "*", Actions: uint32(fsm.ActionAll)}}}
	n.retryInBackground(func(ctx context.Context) error {
		// The users as the cluster has them, not as a replica still
		// replaying its log after a restart does.
		if err := n.meta.Ready(); err != nil {
			return err
		}
		var names []string
		var hasAdmin bool
		n.meta.Read(func(m *fsm.Meta) {
			for _, u := range m.Users() {
				names = append(names, u.Name)
			}
			_, hasAdmin = m.User(AdminUser)
		})
		switch {
		case hasAdmin:
			return nil
		case len(names) > 0:
			n.log.Error("did not make user admin from --admin-password-file: the cluster has users already, and admin is made only in a cluster without any; sign in as one of them that has the admin permission and make it: cairn user create admin --password-file F --permit all:*",
				"users", strings.Join(names, ","))
			return nil
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := n.meta.Apply(actx, &fsmpb.PutUser{User: admin, Create: true})
		if err == nil {
			n.log.Info("made user admin, with every permission, from --admin-password-file")
		}
		if errors.Is(err, fsm.ErrUserExists) {
			return nil
		}
		return err
	}, nil, "making user admin from --admin-password-file", "user", AdminUser)
}
