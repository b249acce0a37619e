package cluster

import (
	"context"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// claimClientID gives clientID to connection conn of this node's
// front-end, through the meta group (fsm/meta_clientid.go): refused with
// ErrClientIDInUse while another connection of the cluster holds it,
// unless that one is of the same client instance.
func (n *Node) claimClientID(ctx context.Context, clientID, conn, instance string) error {
	_, err := n.meta.Apply(ctx, &fsmpb.ClaimClientId{Claim: &fsmpb.ClientIdClaim{ClientId: clientID, Owner: n.owner() + "/" + conn, Instance: instance}})
	return frontend.WireError(err)
}

// releaseClientID lets the client id of connection conn go, in the
// background, and calls first after the first try; if it cannot within a
// minute (no meta leader), the meta leader's sweep does once this node run
// is gone.
func (n *Node) releaseClientID(clientID, conn string, first func(error)) {
	cmd := &fsmpb.ReleaseClientId{ClientId: clientID, Owner: n.owner() + "/" + conn}
	n.retryInBackground(func(ctx context.Context) error {
		_, err := n.meta.Apply(ctx, cmd)
		return err
	}, first, "releasing the client id of a connection that ended", "client_id", clientID)
}

// sweepClientIDs releases, on the meta leader, the client ids held by
// connections of node runs that are gone.
func (n *Node) sweepClientIDs(ctx context.Context) {
	sw := &n.sweeps
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.clientIDs.begin()
	defer sw.clientIDs.end()
	var claims []*fsmpb.ClientIdClaim
	n.meta.Read(func(m *fsm.Meta) { claims = m.ClientIDs() })
	for _, c := range claims {
		if !sw.clientIDs.gone(n, c.ClientId, c.Owner) {
			continue
		}
		if _, err := n.meta.Apply(ctx, &fsmpb.ReleaseClientId{ClientId: c.ClientId, Owner: c.Owner}); err != nil {
			n.log.Warn("releasing a client id of a node run that is gone", "client_id", c.ClientId, "err", err)
			continue
		}
		n.log.Info("released a client id: its connection's node run is gone", "client_id", c.ClientId, "owner", c.Owner)
	}
}
