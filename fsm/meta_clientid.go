package fsm

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Client ids are the cluster's, not a node's: the meta group holds which
// connection has each, so that a JMS client id is used by one connection at
// a time wherever it connects. A connection takes its client id when it
// opens and lets it go when it ends; the meta leader lets go those of node
// runs that are gone. A client reconnecting elsewhere takes its id over at
// once, since its new connection names the same instance.

// MaxClientIDLen bounds a client id, in bytes.
const MaxClientIDLen = 256

// claimClientID gives the claim's client id to its connection: refused
// while another connection holds it, unless that one is of the same
// client instance (the client reconnecting; the old connection's release
// then changes nothing).
func (m *Meta) claimClientID(c *fsmpb.ClaimClientId) Result {
	cl := c.GetClaim()
	switch {
	case cl.GetClientId() == "" || cl.GetOwner() == "":
		return Result{Err: fmt.Errorf("%w: a client id claim needs the id and its connection", ErrMalformed)}
	case len(cl.ClientId) > MaxClientIDLen:
		return Result{Err: fmt.Errorf("%w: a client id is at most %d bytes", ErrMalformed, MaxClientIDLen)}
	}
	if held, ok := m.clientIDs[cl.ClientId]; ok && held.Owner != cl.Owner && (held.Instance == "" || held.Instance != cl.Instance) {
		return Result{Err: fmt.Errorf("%w: client id %q is held by connection %s", ErrClientIDInUse, cl.ClientId, held.Owner)}
	}
	m.clientIDs[cl.ClientId] = proto.CloneOf(cl)
	return Result{}
}

// releaseClientID lets the client id go if owner holds it.
func (m *Meta) releaseClientID(c *fsmpb.ReleaseClientId) Result {
	if held, ok := m.clientIDs[c.ClientId]; ok && held.Owner == c.Owner {
		delete(m.clientIDs, c.ClientId)
	}
	return Result{}
}

// ClientIDs returns the client ids held, sorted by id.
func (m *Meta) ClientIDs() []*fsmpb.ClientIdClaim {
	out := slices.Collect(maps.Values(m.clientIDs))
	slices.SortFunc(out, func(a, b *fsmpb.ClientIdClaim) int { return cmp.Compare(a.ClientId, b.ClientId) })
	return out
}
