package fsm_test

import (
	"errors"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A client id is held by one connection of the cluster: another
// connection's claim is refused and changes nothing, the same client's
// reconnect takes it over (and the old connection's release then changes
// nothing), and the holder's release frees it.
func TestMeta_ClientIDIsHeldByOneConnection(t *testing.T) {
	f := newMeta(t)
	claim := func(owner, instance string) *fsmpb.ClaimClientId {
		return &fsmpb.ClaimClientId{Claim: &fsmpb.ClientIdClaim{ClientId: "billing", Owner: owner, Instance: instance}}
	}
	holder := func() string {
		t.Helper()
		for _, c := range f.m.ClientIDs() {
			if c.ClientId == "billing" {
				return c.Owner
			}
		}
		return ""
	}
	f.ok(claim("n1/b1/c1", "app-1"))
	f.ok(claim("n1/b1/c1", "app-1")) // again: a retried claim
	for _, c := range []struct {
		what string
		cmd  *fsmpb.ClaimClientId
		want error
	}{
		{"another client", claim("n2/b1/c9", "app-2"), fsm.ErrClientIDInUse},
		{"another client without an instance", claim("n2/b1/c9", ""), fsm.ErrClientIDInUse},
		{"no id", &fsmpb.ClaimClientId{Claim: &fsmpb.ClientIdClaim{Owner: "n1/b1/c2"}}, fsm.ErrMalformed},
		{"no connection", &fsmpb.ClaimClientId{Claim: &fsmpb.ClientIdClaim{ClientId: "x"}}, fsm.ErrMalformed},
		{"no claim", &fsmpb.ClaimClientId{}, fsm.ErrMalformed},
		{"too long", &fsmpb.ClaimClientId{Claim: &fsmpb.ClientIdClaim{ClientId: string(make([]byte, fsm.MaxClientIDLen+1)), Owner: "n1/b1/c2"}}, fsm.ErrMalformed},
	} {
		before := metaState(t, f.m)
		if r := f.do(c.cmd); !errors.Is(r.Err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, r.Err, c.want)
		}
		if got := metaState(t, f.m); string(withoutApplied(t, got)) != string(withoutApplied(t, before)) {
			t.Errorf("%s: a refused claim changed the state", c.what)
		}
	}
	if h := holder(); h != "n1/b1/c1" {
		t.Fatalf("holder %q after refusals, want n1/b1/c1", h)
	}
	// The client reconnects through another node: its new connection takes
	// the id over; the old connection ending later frees nothing.
	f.ok(claim("n3/b1/c4", "app-1"))
	f.ok(&fsmpb.ReleaseClientId{ClientId: "billing", Owner: "n1/b1/c1"})
	if h := holder(); h != "n3/b1/c4" {
		t.Fatalf("holder %q after the reconnect and the old release, want n3/b1/c4", h)
	}
	f.ok(&fsmpb.ReleaseClientId{ClientId: "billing", Owner: "n3/b1/c4"})
	if h := holder(); h != "" {
		t.Fatalf("holder %q after its release", h)
	}
	f.ok(claim("n2/b1/c9", "app-2"))
}
