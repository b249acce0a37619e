package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport"
)

func testAuthenticator(t testing.TB) *Authenticator {
	hash, err := HashPassword("app-password")
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]*fsmpb.User{
		"app": {Name: "app", PasswordHash: hash, Grants: []*fsmpb.Grant{{Pattern: "orders.*", Actions: uint32(fsm.ActionSend)}}},
	}
	return New(func(name string) (*fsmpb.User, bool) { u, ok := users[name]; return u, ok }, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func basic(user, password string) context.Context {
	h := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", h))
}

// A password authenticates its user, from bcrypt the first time and from
// memory after; a wrong one, an unknown user or a malformed header does
// not; a password too short or too long is refused before it is hashed.
func TestAuthenticate_Password(t *testing.T) {
	a := testAuthenticator(t)
	for range 2 {
		if id, err := a.Authenticate(basic("app", "app-password")); err != nil || id.Name != "app" || id.Node {
			t.Fatalf("app's password: %v, %v", id, err)
		}
	}
	for what, ctx := range map[string]context.Context{
		"a wrong password":   basic("app", "app-passwore"),
		"an unknown user":    basic("bob", "app-password"),
		"no colon":           metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("app")))),
		"not Basic":          metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer x")),
		"no credentials":     context.Background(),
		"the cached one off": basic("app", "app-password "),
	} {
		if _, err := a.Authenticate(ctx); !errors.Is(err, transport.ErrNotAuthenticated) {
			t.Errorf("%s: %v; want ErrNotAuthenticated", what, err)
		}
	}
	for _, pw := range []string{"short", string(make([]byte, MaxPasswordLen+1))} {
		if _, err := HashPassword(pw); !errors.Is(err, transport.ErrInvalidArgument) {
			t.Errorf("a password of %d bytes: %v; want ErrInvalidArgument", len(pw), err)
		}
	}
}

// Authorize follows the caller's grants as they are at the call, lets a
// node do everything, and refuses a call never authenticated.
func TestAuthorize(t *testing.T) {
	a := testAuthenticator(t)
	app := WithIdentity(context.Background(), Identity{Name: "app"})
	if err := a.Authorize(app, fsm.ActionSend, "orders.eu"); err != nil {
		t.Errorf("app sending to orders.eu: %v", err)
	}
	if err := a.Authorize(app, fsm.ActionReceive, "orders.eu"); !errors.Is(err, transport.ErrNotAuthorised) {
		t.Errorf("app receiving: %v; want ErrNotAuthorised", err)
	}
	if err := a.Authorize(app, fsm.ActionAdmin, ""); !errors.Is(err, transport.ErrNotAuthorised) {
		t.Errorf("app administering: %v; want ErrNotAuthorised", err)
	}
	gone := WithIdentity(context.Background(), Identity{Name: "bob"})
	if err := a.Authorize(gone, fsm.ActionSend, "orders.eu"); !errors.Is(err, transport.ErrNotAuthorised) {
		t.Errorf("a deleted user: %v; want ErrNotAuthorised", err)
	}
	node := WithIdentity(context.Background(), Identity{Name: "n2", Node: true})
	if err := a.Authorize(node, fsm.ActionAdmin, ""); err != nil {
		t.Errorf("a node: %v", err)
	}
	if err := a.Authorize(context.Background(), fsm.ActionSend, "orders.eu"); !errors.Is(err, transport.ErrNotAuthenticated) {
		t.Errorf("no identity: %v; want ErrNotAuthenticated", err)
	}
}

// FuzzAuthenticate: whatever authorization header a caller sends, the node
// answers without panicking, and authenticates only app with its password.
func FuzzAuthenticate(f *testing.F) {
	f.Add("Basic " + base64.StdEncoding.EncodeToString([]byte("app:app-password")))
	f.Add("Basic " + base64.StdEncoding.EncodeToString([]byte("app:")))
	f.Add("Basic ::::")
	f.Add("")
	a := testAuthenticator(f)
	f.Fuzz(func(t *testing.T, header string) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", header))
		id, err := a.Authenticate(ctx)
		if err == nil && header != "Basic "+base64.StdEncoding.EncodeToString([]byte("app:app-password")) {
			raw, _ := base64.StdEncoding.DecodeString(header[len("Basic "):])
			if string(raw) != "app:app-password" {
				t.Fatalf("header %q authenticated %v", header, id)
			}
		}
	})
}

// BenchmarkAuthenticate: a password's first check (bcrypt) and the ones
// after it (remembered).
func BenchmarkAuthenticate(b *testing.B) {
	ctx := basic("app", "app-password")
	b.Run("first", func(b *testing.B) {
		a := testAuthenticator(b)
		for b.Loop() {
			clear(a.verified)
			if _, err := a.Authenticate(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		a := testAuthenticator(b)
		if _, err := a.Authenticate(ctx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := a.Authenticate(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
