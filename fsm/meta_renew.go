package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// Changing a destination's replication factor renews its members rather
// than resizing their groups in place: a member may share its Raft group
// with members of other destinations, whose replicas must not change with
// it. A renewed member drains into the destination's other active members
// (a spare one when it is the only one) and, once empty, is replaced under
// the same index by an empty member placed with the new factor. Renewing a
// member onto another node (RenewMember.on) is how a member leaves the
// shared group it was born in, so that hosts spread onto nodes that join:
// a group, not a member, is what a node hosts.

// replicaCount refuses new members of d placed with a replication factor
// other than d's.
func replicaCount(d *fsmpb.Destination, members []*fsmpb.MemberPlacement) error {
	for _, p := range members {
		if len(p.Replicas) != int(d.Replicas) {
			return fmt.Errorf("%w: member %d has %d replicas, the destination asks for %d", ErrInvalidSettings, p.Index, len(p.Replicas), d.Replicas)
		}
	}
	return nil
}

// Wanted is the number of replicas that repair keeps member p at: the
// replicas its group was created with (a shared group's are its members',
// whatever their destinations ask for now), or d's replication factor for
// a member that records none.
func Wanted(d *fsmpb.Destination, p *fsmpb.MemberPlacement) int {
	if len(p.Initial) > 0 {
		return len(p.Initial)
	}
	return int(d.Replicas)
}

// NeedsRenewal reports whether member p of d is active and placed with a
// replication factor other than d's.
func NeedsRenewal(d *fsmpb.Destination, p *fsmpb.MemberPlacement) bool {
	return !p.Draining && Wanted(d, p) != int(d.Replicas)
}

func (m *Meta) setReplicas(c *fsmpb.SetReplicas) Result {
	d, ok := m.destinations[c.Name]
	switch {
	case !ok:
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownDestination, c.Name)}
	case c.Replicas == 0:
		return Result{Err: fmt.Errorf("%w: replication factor 0", ErrInvalidSettings)}
	}
	if err := fixedMembers(d); err != nil {
		return Result{Err: err}
	}
	nd := proto.Clone(d).(*fsmpb.Destination)
	nd.Replicas = c.Replicas
	m.destinations[c.Name] = nd
	return Result{}
}

func (m *Meta) renewMember(c *fsmpb.RenewMember) Result {
	d, p, err := m.placement(c.Name, c.Index)
	if err == nil {
		err = fixedMembers(d)
	}
	if err != nil {
		return Result{Err: err}
	}
	name := MemberName(d.Name, c.Index)
	nd := proto.Clone(d).(*fsmpb.Destination)
	if c.Placement == nil {
		active := 0
		for _, q := range d.Members {
			if !q.Draining {
				active++
			}
		}
		_, known := m.nodes[c.On]
		switch {
		case p.Draining:
			return Result{Err: fmt.Errorf("%w: %s is draining already", ErrInvalidSettings, name)}
		case active < 2:
			return Result{Err: fmt.Errorf("%w: %s is the only active member of %s; its messages need another to drain into", ErrInvalidSettings, name, d.Name)}
		case c.On != "" && (!known || m.decommissioning[c.On]):
			return Result{Err: fmt.Errorf("%w: %s cannot be renewed onto %s, which is not a node of the cluster or is leaving it", ErrInvalidSettings, name, c.On)}
		}
		np := nd.Members[c.Index]
		np.Renewing, np.Draining, np.RenewOn = true, true, c.On
		m.destinations[c.Name] = nd
		return Result{}
	}
	np := c.Placement
	switch {
	case !p.Renewing:
		return Result{Err: fmt.Errorf("%w: %s is not being renewed", ErrInvalidSettings, name)}
	case np.Index != c.Index || np.Draining || np.Renewing:
		return Result{Err: fmt.Errorf("%w: the new %s must be an active member with index %d", ErrInvalidSettings, name, c.Index)}
	case np.Uid == "" || np.Uid == p.Uid:
		return Result{Err: fmt.Errorf("%w: the new %s needs a uid of its own", ErrInvalidSettings, name)}
	}
	nd.Members[c.Index] = np
	if err := validateDestination(nd); err != nil {
		return Result{Err: err}
	}
	if err := replicaCount(nd, []*fsmpb.MemberPlacement{np}); err != nil {
		return Result{Err: err}
	}
	if err := m.checkGroups([]*fsmpb.MemberPlacement{np}); err != nil {
		return Result{Err: err}
	}
	m.destinations[c.Name] = nd
	return Result{}
}
