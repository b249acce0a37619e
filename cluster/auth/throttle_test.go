package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/cairnmq/cairn/transport"
)

// from is a call's context with a password, from addr to local.
func from(addr, local, user, password string, md ...string) context.Context {
	h := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(append([]string{"authorization", h}, md...)...))
	remote, _ := net.ResolveTCPAddr("tcp", addr)
	l, _ := net.ResolveTCPAddr("tcp", local)
	return peer.NewContext(ctx, &peer.Peer{Addr: remote, LocalAddr: l})
}

// Failed logins are slowed per source: five are free, then each further
// one makes the source wait twice as long (1 s, 2 s, ... up to 30 s), and
// a try before then is refused without a check, saying how long to wait;
// another source is not slowed, a success starts its source afresh, and
// ten minutes without a failure forget them.
func TestThrottle_SlowsFailedLoginsPerSource(t *testing.T) {
	a := testAuthenticator(t)
	now := time.Unix(1_000_000, 0)
	a.throttle.now = func() time.Time { return now }
	var checks atomic.Int64
	compare := a.passwords.compare
	a.passwords.compare = func(hash, password []byte) error { checks.Add(1); return compare(hash, password) }
	const guesser, local = "192.0.2.1:5000", "192.0.2.100:7650"
	try := func(addr, password string) error {
		_, err := a.Authenticate(from(addr, local, "app", password))
		return err
	}
	for i := range freeFailures {
		if err := try(guesser, fmt.Sprintf("guess-%d", i)); err == nil || strings.Contains(err.Error(), "too many") {
			t.Fatalf("guess %d: %v; want a wrong password", i, err)
		}
	}
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second} {
		if err := try(guesser, fmt.Sprintf("guess-%d", freeFailures+i)); err == nil || strings.Contains(err.Error(), "too many") {
			t.Fatalf("guess %d, checked: %v; want a wrong password", freeFailures+i, err)
		}
		before := checks.Load()
		err := try(guesser, "app-password") // right, but early: not checked
		if !errors.Is(err, transport.ErrNotAuthenticated) || !strings.Contains(err.Error(), "too many failed logins from 192.0.2.1") {
			t.Fatalf("a try %v before the wait ends: %v; want refused as too many failed logins", wait, err)
		}
		if checks.Load() != before {
			t.Fatal("a try during the wait was checked")
		}
		// Another source is served meanwhile.
		if err := try("198.51.100.9:6000", "app-password"); err != nil {
			t.Fatalf("another source's right password: %v", err)
		}
		now = now.Add(wait - time.Millisecond)
		if err := try(guesser, "app-password"); err == nil {
			t.Fatalf("a try 1 ms before the wait of %v ends was served", wait)
		}
		now = now.Add(time.Millisecond)
	}
	failed, throttled := a.Logins()
	if failed != freeFailures+7 || throttled != 14 {
		t.Errorf("Logins: %d failed, %d throttled; want %d and 14", failed, throttled, freeFailures+7)
	}
	// Once its wait is out, the right password is served and the source
	// starts afresh: five failures free again.
	if err := try(guesser, "app-password"); err != nil {
		t.Fatalf("the right password after the wait: %v", err)
	}
	for i := range freeFailures {
		if err := try(guesser, fmt.Sprintf("again-%d", i)); strings.Contains(fmt.Sprint(err), "too many") {
			t.Fatalf("failure %d after a success: %v", i, err)
		}
	}
	// Ten minutes without a failure forget them too.
	now = now.Add(forgetAfter + time.Second)
	for i := range freeFailures {
		if err := try(guesser, fmt.Sprintf("later-%d", i)); strings.Contains(fmt.Sprint(err), "too many") {
			t.Fatalf("failure %d ten minutes on: %v", i, err)
		}
	}
}

// The source of a call is its connection's address; a call from this
// node's own host (the console's, for a browser) may name another with
// SourceHeader, which a call from elsewhere cannot.
func TestThrottle_SourceHeaderIsBelievedFromThisHostOnly(t *testing.T) {
	for _, c := range []struct {
		remote, local, header, want string
	}{
		{"192.0.2.1:5000", "192.0.2.100:7650", "", "192.0.2.1"},
		{"192.0.2.1:5000", "192.0.2.100:7650", "203.0.113.5", "192.0.2.1"},
		{"127.0.0.1:5000", "127.0.0.1:7650", "203.0.113.5", "203.0.113.5"},
		{"192.0.2.100:5000", "192.0.2.100:7650", "203.0.113.5", "203.0.113.5"},
		{"[::1]:5000", "[::1]:7650", "2001:db8::1", "2001:db8::1"},
		{"127.0.0.1:5000", "127.0.0.1:7650", "not an address", "127.0.0.1"},
	} {
		var md []string
		if c.header != "" {
			md = []string{SourceHeader, c.header}
		}
		if got := sourceOf(from(c.remote, c.local, "app", "x", md...)); got.String() != c.want {
			t.Errorf("from %s to %s naming %q: source %s; want %s", c.remote, c.local, c.header, got, c.want)
		}
	}
}

// The addresses remembered are bounded: past maxSources, the oldest
// failure is forgotten.
func TestThrottle_RemembersAtMostMaxSources(t *testing.T) {
	th := newThrottle()
	now := time.Unix(1_000_000, 0)
	th.now = func() time.Time { now = now.Add(time.Millisecond); return now }
	for i := range maxSources + 10 {
		th.fail(sourceOf(from(fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255), "192.0.2.100:7650", "u", "p")))
	}
	if n := len(th.sources); n != maxSources {
		t.Fatalf("%d sources remembered; want %d", n, maxSources)
	}
	if _, ok := th.sources[sourceOf(from("10.0.0.0:1", "192.0.2.100:7650", "u", "p"))]; ok {
		t.Fatal("the oldest source is still remembered")
	}
}
