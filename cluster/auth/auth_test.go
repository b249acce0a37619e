package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/test/wait"
	"github.com/cairnmq/cairn/transport"
)

// testAuthenticator knows user app, whose password app-password is hashed
// at bcrypt's lowest cost (the checks are what is tested, not bcrypt);
// BenchmarkAuthenticate asks for the default cost.
func testAuthenticator(t testing.TB, cost ...int) *Authenticator {
	hash, err := bcrypt.GenerateFromPassword([]byte("app-password"), append(cost, bcrypt.MinCost)[0])
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
		if id, err := a.Authenticate(basic("app", "app-password")); err != nil || id.Name != "app" {
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
		a := testAuthenticator(b, bcrypt.DefaultCost)
		for b.Loop() {
			a.passwords.forget()
			if _, err := a.Authenticate(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		a := testAuthenticator(b, bcrypt.DefaultCost)
		if _, err := a.Authenticate(ctx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := a.Authenticate(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A checked user's calls while 16 callers try new wrong passwords
	// as fast as they are answered: the guesses take their turns, the
	// user's calls need none.
	b.Run("remembered-beside-guesses", func(b *testing.B) {
		a := testAuthenticator(b, bcrypt.DefaultCost)
		if _, err := a.Authenticate(ctx); err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var guesses atomic.Int64
		for g := range 16 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_, _ = a.Authenticate(basic("app", fmt.Sprintf("guess-%d-%d", g, i)))
					guesses.Add(1)
				}
			})
		}
		for b.Loop() {
			if _, err := a.Authenticate(ctx); err != nil {
				b.Fatal(err)
			}
		}
		close(stop)
		wg.Wait()
		b.ReportMetric(float64(guesses.Load())/b.Elapsed().Seconds(), "guesses/s")
	})
}

// countCompares makes a's bcrypt count its calls and the most that ran at
// once; release, when set, holds each call until it is closed.
func countCompares(a *Authenticator, release chan struct{}) (calls, most *atomic.Int32) {
	calls, most = new(atomic.Int32), new(atomic.Int32)
	var running atomic.Int32
	compare := a.passwords.compare
	a.passwords.compare = func(hash, password []byte) error {
		calls.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if release != nil {
			<-release
		}
		return compare(hash, password)
	}
	return calls, most
}

// A verdict is remembered under the hash it was made against: a right or a
// wrong password tried again costs no bcrypt, until the user's hash
// changes; each other wrong password costs one.
func TestAuthenticate_RemembersRightAndWrongPasswords(t *testing.T) {
	a := testAuthenticator(t)
	calls, _ := countCompares(a, nil)
	for range 5 {
		if _, err := a.Authenticate(basic("app", "app-password")); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(basic("app", "stale-password")); !errors.Is(err, transport.ErrNotAuthenticated) {
			t.Fatalf("a stale password: %v; want ErrNotAuthenticated", err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("bcrypt ran %d times for one right and one wrong password tried five times each; want 2", n)
	}
	for i := range maxWrong + 1 {
		_, _ = a.Authenticate(basic("app", fmt.Sprintf("guess-%d", i)))
	}
	if n := calls.Load(); n != 2+maxWrong+1 {
		t.Errorf("bcrypt ran %d times after %d more guesses; want %d", n, maxWrong+1, 2+maxWrong+1)
	}
	if _, err := a.Authenticate(basic("app", "app-password")); err != nil || calls.Load() != 2+maxWrong+1 {
		t.Errorf("the right password after the guesses: %v, bcrypt calls %d; want it remembered", err, calls.Load())
	}
}

// At most the turns' number of bcrypt checks run at once, however many
// calls check passwords; a call that ends while it waits for a turn is
// answered, and takes no turn.
func TestAuthenticate_BoundsTheChecksRunningAtOnce(t *testing.T) {
	a := testAuthenticator(t)
	release := make(chan struct{})
	calls, most := countCompares(a, release)
	turns := cap(a.passwords.turns)
	var wg sync.WaitGroup
	for i := range 3 * turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = a.Authenticate(basic("app", fmt.Sprintf("guess-%d", i)))
		}()
	}
	wait.Until(t, 10*time.Second, "every turn taken", func() string {
		if n := calls.Load(); int(n) != turns {
			return fmt.Sprintf("%d checks running", n)
		}
		return ""
	})
	ctx, cancel := context.WithTimeout(basic("app", "another-guess"), 50*time.Millisecond)
	defer cancel()
	if _, err := a.Authenticate(ctx); !errors.Is(err, transport.ErrUnavailable) {
		t.Errorf("a call that ended waiting for a turn: %v; want ErrUnavailable", err)
	}
	close(release)
	wg.Wait()
	if m := most.Load(); int(m) != turns {
		t.Errorf("%d checks ran at once; want at most %d", m, turns)
	}
	if n := calls.Load(); int(n) != 3*turns {
		t.Errorf("%d checks ran; want %d (the call that ended took none)", n, 3*turns)
	}
}

// Calls checking the same password at once share one bcrypt; when the
// call that started it leaves before its turn, one that joined it runs it.
func TestAuthenticate_SharesAPasswordsCheck(t *testing.T) {
	a := testAuthenticator(t)
	release := make(chan struct{})
	calls, _ := countCompares(a, release)
	turns := cap(a.passwords.turns)
	var wg sync.WaitGroup
	for i := range turns {
		wg.Go(func() { _, _ = a.Authenticate(basic("app", fmt.Sprintf("guess-%d", i))) })
	}
	wait.Until(t, 10*time.Second, "every turn taken", func() string {
		if n := calls.Load(); int(n) != turns {
			return fmt.Sprintf("%d checks running", n)
		}
		return ""
	})
	short, cancel := context.WithTimeout(basic("app", "app-password"), 50*time.Millisecond)
	defer cancel()
	errs := make(chan error, 10)
	wg.Go(func() { _, err := a.Authenticate(short); errs <- err })
	for range 9 {
		wg.Go(func() { _, err := a.Authenticate(basic("app", "app-password")); errs <- err })
	}
	<-short.Done()
	close(release)
	wg.Wait()
	close(errs)
	left := 0
	for err := range errs {
		switch {
		case errors.Is(err, transport.ErrUnavailable):
			left++
		case err != nil:
			t.Errorf("app's password: %v", err)
		}
	}
	if left > 1 {
		t.Errorf("%d calls refused as busy; only the one whose call ended may be", left)
	}
	if n := calls.Load(); int(n) != turns+1 {
		t.Errorf("bcrypt ran %d times for %d guesses and ten calls with one password; want %d", n, turns, turns+1)
	}
}
