package auth

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/certs"
)

// Identity is who a client API call is from: a user. A node's
// certificate is no identity there: nodes ask each other on the peer API,
// and a node certificate the CA signed (for a node that never joined, or
// one removed) must not be a superuser of the clients' port.
type Identity struct {
	Name string
}

func (id Identity) String() string { return "user " + id.Name }

type ctxKey struct{}

// FromContext is the identity a call was authenticated as.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// WithIdentity is ctx of a call authenticated as id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// Users reads a user as the meta group holds it now.
type Users func(name string) (*fsmpb.User, bool)

// Authenticator authenticates and authorises a node's client API calls.
type Authenticator struct {
	users Users
	// exempt says what needs no grant (a send to a temporary queue).
	exempt func(act fsm.Action, dest string) bool
	audit  *slog.Logger
	// passwords checks passwords (passwords.go).
	passwords *passwords
	// throttle slows failed logins per source (throttle.go).
	throttle *throttle
}

// Logins counts the failed password logins, and the tries refused
// unchecked while their source waited out its failures.
func (a *Authenticator) Logins() (failed, throttled uint64) {
	return a.throttle.failed.Load(), a.throttle.refused.Load()
}

// New is the authenticator of a node whose users reads; exempt says what
// an authenticated caller may do without a grant; audit gets a record of
// every administrative call and every refusal.
func New(users Users, exempt func(act fsm.Action, dest string) bool, audit *slog.Logger) *Authenticator {
	return &Authenticator{users: users, exempt: exempt, audit: audit, passwords: newPasswords(), throttle: newThrottle()}
}

// Password limits: bcrypt reads at most 72 bytes.
const (
	MinPasswordLen = 8
	MaxPasswordLen = 72
)

// HashPassword is the hash a user's password is stored as.
func HashPassword(password string) ([]byte, error) {
	if len(password) < MinPasswordLen || len(password) > MaxPasswordLen {
		return nil, fmt.Errorf("%w: a password has %d to %d bytes, not %d", transport.ErrInvalidArgument, MinPasswordLen, MaxPasswordLen, len(password))
	}
	return bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
}

// Authenticate says who a call is from: the user and password of its
// "authorization: Basic" metadata, else the identity of the client
// certificate its TLS connection verified.
func (a *Authenticator) Authenticate(ctx context.Context) (Identity, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			return a.password(ctx, v[0])
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 {
			kind, name, ok := certs.Identity(info.State.VerifiedChains[0][0])
			switch {
			case ok && kind == certs.KindNode:
				return Identity{}, fmt.Errorf("%w: the client certificate is node %s's; a node certificate is not a user: give a user's certificate (cairn cert client --user NAME) or a user and password", transport.ErrNotAuthenticated, name)
			case ok && kind == certs.KindUser:
				if _, known := a.users(name); !known {
					return Identity{}, fmt.Errorf("%w: the client certificate names user %q, who is not a user of this cluster (cairn user create %s)", transport.ErrNotAuthenticated, name, name)
				}
				return Identity{Name: name}, nil
			}
		}
	}
	return Identity{}, fmt.Errorf("%w: the node asks who is calling: give a user and password (--user, --password-file) or a client certificate (--tls-cert, --tls-key)", transport.ErrNotAuthenticated)
}

func (a *Authenticator) password(ctx context.Context, header string) (Identity, error) {
	source := sourceOf(ctx)
	if d := a.throttle.wait(source); d > 0 {
		return Identity{}, fmt.Errorf("%w: too many failed logins from %s: the next is checked in %v", transport.ErrNotAuthenticated, source, d.Truncate(time.Second)+time.Second)
	}
	raw, ok := strings.CutPrefix(header, "Basic ")
	b, err := base64.StdEncoding.DecodeString(raw)
	user, password, found := strings.Cut(string(b), ":")
	if !ok || err != nil || !found {
		a.throttle.fail(source)
		return Identity{}, fmt.Errorf("%w: the authorization header is not Basic user:password", transport.ErrNotAuthenticated)
	}
	wrong := fmt.Errorf("%w: wrong user or password for %q", transport.ErrNotAuthenticated, user)
	u, known := a.users(user)
	if !known || len(u.PasswordHash) == 0 {
		a.throttle.fail(source)
		return Identity{}, wrong
	}
	right, err := a.passwords.check(ctx, user, u.PasswordHash, password)
	switch {
	case err != nil: // no verdict: not a failure of the caller's
		return Identity{}, err
	case !right:
		a.throttle.fail(source)
		return Identity{}, wrong
	}
	a.throttle.succeed(source)
	return Identity{Name: user}, nil
}

// Authorize says whether the call of ctx may do act on dest (act
// fsm.ActionAdmin: dest empty), as the caller's grants are now.
func (a *Authenticator) Authorize(ctx context.Context, act fsm.Action, dest string) error {
	id, ok := FromContext(ctx)
	switch {
	case !ok:
		return fmt.Errorf("%w: the call was not authenticated", transport.ErrNotAuthenticated)
	case a.exempt != nil && a.exempt(act, dest):
		return nil
	}
	u, ok := a.users(id.Name)
	if !ok {
		return fmt.Errorf("%w: user %q no longer exists", transport.ErrNotAuthorised, id.Name)
	}
	if !fsm.Allows(u.Grants, act, dest) {
		if act == fsm.ActionAdmin {
			return fmt.Errorf("%w: admin on the cluster (user %s is not permitted it: cairn user permit %s admin:*)", transport.ErrNotAuthorised, id.Name, id.Name)
		}
		return fmt.Errorf("%w: %s on %s (user %s is not permitted it)", transport.ErrNotAuthorised, strings.Join(act.Names(), ","), dest, id.Name)
	}
	return nil
}

// open reports whether a method is served to anyone: health checks, for
// probes and load balancers.
func open(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// UnaryInterceptor authenticates and authorises every unary call of the
// client API, and writes an audit record of the administrative ones.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if open(info.FullMethod) {
			return handler(ctx, req)
		}
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		act, target := need(req)
		if target == "" {
			target = subject(req)
		}
		id, err := a.Authenticate(ctx)
		if err == nil {
			ctx = WithIdentity(ctx, id)
			if act == fsm.ActionAdmin {
				err = a.Authorize(ctx, act, "")
			} else if act != 0 {
				err = a.Authorize(ctx, act, target)
			}
		}
		if err != nil {
			a.record(ctx, id, method, target, err)
			return nil, transport.Status(err)
		}
		resp, err := handler(ctx, req)
		if act == fsm.ActionManage || act == fsm.ActionAdmin {
			a.record(ctx, id, method, target, err)
		}
		return resp, err
	}
}

// StreamInterceptor authenticates a Connect stream as it opens; its
// frames are authorised by the front-end.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if open(info.FullMethod) {
			return handler(srv, ss)
		}
		id, err := a.Authenticate(ss.Context())
		if err != nil {
			a.record(ss.Context(), id, info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:], "", err)
			return transport.Status(err)
		}
		return handler(srv, &identified{ServerStream: ss, ctx: WithIdentity(ss.Context(), id)})
	}
}

type identified struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identified) Context() context.Context { return s.ctx }

// record writes the audit record of a call: every administrative one
// (manage or admin) and every refused one. It says who, what, on what,
// from where, and how it ended.
func (a *Authenticator) record(ctx context.Context, id Identity, method, target string, err error) {
	from := ""
	p, _ := peer.FromContext(ctx)
	if p != nil && p.Addr != nil {
		from = p.Addr.String()
	}
	who := id.String()
	if id.Name == "" {
		who = "unauthenticated"
	}
	outcome := "done"
	if err != nil {
		outcome = err.Error()
	}
	attrs := []any{"who", who, "call", method, "target", target, "from", from, "outcome", outcome}
	if src := sourceOf(ctx); src.IsValid() && (p == nil || src != addrOf(p.Addr)) {
		attrs = append(attrs, "source", src.String()) // named by the console
	}
	a.audit.Info("audit", attrs...)
}
