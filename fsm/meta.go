package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// MaxMembers bounds the members of one destination.
const MaxMembers = 64

// Meta is the meta group's state machine: destinations with the placement
// of their members, and the registry of nodes. It changes rarely.
type Meta struct {
	applied      uint64
	destinations map[string]*fsmpb.Destination
	nodes        map[string]*fsmpb.Node
	// removed are nodes taken out of the cluster, with the incarnation
	// (data directory) each had: the id is registered again only with
	// another one, a node started afresh.
	removed map[string]string
	// rejoining holds, by node, the Raft groups (GroupKey) in which its
	// replica came back empty and must catch up before it votes again.
	rejoining map[string]map[string]bool
	// decommissioning are live nodes leaving for good: their replicas move
	// to other nodes, and nothing new is placed on them.
	decommissioning map[string]bool
	// clientIDs are the client ids connections hold (meta_clientid.go).
	clientIDs map[string]*fsmpb.ClientIdClaim
	// users are the cluster's client identities (meta_users.go).
	users map[string]*fsmpb.User
}

// NewMeta returns an empty meta state machine.
func NewMeta() *Meta {
	return &Meta{destinations: make(map[string]*fsmpb.Destination), nodes: make(map[string]*fsmpb.Node), removed: make(map[string]string), rejoining: make(map[string]map[string]bool), decommissioning: make(map[string]bool),
		clientIDs: make(map[string]*fsmpb.ClientIdClaim), users: make(map[string]*fsmpb.User)}
}

var metaHandlers = func() map[fsmpb.CommandType]handler[*Meta] {
	t := make(map[fsmpb.CommandType]handler[*Meta])
	on(t, fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION, func() *fsmpb.CreateDestination { return new(fsmpb.CreateDestination) }, (*Meta).createDestination)
	on(t, fsmpb.CommandType_COMMAND_TYPE_DELETE_DESTINATION, func() *fsmpb.DeleteDestination { return new(fsmpb.DeleteDestination) }, (*Meta).deleteDestination)
	on(t, fsmpb.CommandType_COMMAND_TYPE_REGISTER_NODE, func() *fsmpb.RegisterNode { return new(fsmpb.RegisterNode) }, (*Meta).registerNode)
	on(t, fsmpb.CommandType_COMMAND_TYPE_REMOVE_NODE, func() *fsmpb.RemoveNode { return new(fsmpb.RemoveNode) }, (*Meta).removeNode)
	on(t, fsmpb.CommandType_COMMAND_TYPE_REPLACE_REPLICA, func() *fsmpb.ReplaceReplica { return new(fsmpb.ReplaceReplica) }, (*Meta).replaceReplica)
	on(t, fsmpb.CommandType_COMMAND_TYPE_ADD_REPLICA, func() *fsmpb.AddReplica { return new(fsmpb.AddReplica) }, (*Meta).addReplica)
	on(t, fsmpb.CommandType_COMMAND_TYPE_PREFER_REPLICA, func() *fsmpb.PreferReplica { return new(fsmpb.PreferReplica) }, (*Meta).preferReplica)
	on(t, fsmpb.CommandType_COMMAND_TYPE_REPLICA_CAUGHT_UP, func() *fsmpb.ReplicaCaughtUp { return new(fsmpb.ReplicaCaughtUp) }, (*Meta).replicaCaughtUp)
	on(t, fsmpb.CommandType_COMMAND_TYPE_REBUILD_REPLICA, func() *fsmpb.RebuildReplica { return new(fsmpb.RebuildReplica) }, (*Meta).rebuildReplica)
	on(t, fsmpb.CommandType_COMMAND_TYPE_DECOMMISSION_NODE, func() *fsmpb.DecommissionNode { return new(fsmpb.DecommissionNode) }, (*Meta).decommissionNode)
	on(t, fsmpb.CommandType_COMMAND_TYPE_RESIZE_DESTINATION, func() *fsmpb.ResizeDestination { return new(fsmpb.ResizeDestination) }, (*Meta).resizeDestination)
	on(t, fsmpb.CommandType_COMMAND_TYPE_REMOVE_MEMBER, func() *fsmpb.RemoveMember { return new(fsmpb.RemoveMember) }, (*Meta).removeMember)
	on(t, fsmpb.CommandType_COMMAND_TYPE_SET_REPLICAS, func() *fsmpb.SetReplicas { return new(fsmpb.SetReplicas) }, (*Meta).setReplicas)
	on(t, fsmpb.CommandType_COMMAND_TYPE_RENEW_MEMBER, func() *fsmpb.RenewMember { return new(fsmpb.RenewMember) }, (*Meta).renewMember)
	on(t, fsmpb.CommandType_COMMAND_TYPE_CLAIM_CLIENT_ID, func() *fsmpb.ClaimClientId { return new(fsmpb.ClaimClientId) }, (*Meta).claimClientID)
	on(t, fsmpb.CommandType_COMMAND_TYPE_RELEASE_CLIENT_ID, func() *fsmpb.ReleaseClientId { return new(fsmpb.ReleaseClientId) }, (*Meta).releaseClientID)
	on(t, fsmpb.CommandType_COMMAND_TYPE_PUT_USER, func() *fsmpb.PutUser { return new(fsmpb.PutUser) }, (*Meta).putUser)
	on(t, fsmpb.CommandType_COMMAND_TYPE_DELETE_USER, func() *fsmpb.DeleteUser { return new(fsmpb.DeleteUser) }, (*Meta).deleteUser)
	return t
}()

// Apply applies the log entry at index, with the same contract as Member.Apply.
func (m *Meta) Apply(index uint64, data []byte) ([]Result, error) {
	if index <= m.applied {
		return nil, nil
	}
	results, err := applyEntry(m, metaHandlers, data)
	if err != nil {
		return nil, err
	}
	m.applied = index
	return results, nil
}

// Applied is the index of the last entry applied.
func (m *Meta) Applied() uint64 { return m.applied }

// ValidateDestination checks a new destination's definition: every member
// placed with its replication factor.
func ValidateDestination(d *fsmpb.Destination) error {
	if err := validateDestination(d); err != nil {
		return err
	}
	return replicaCount(d, d.Members)
}

// validateDestination checks a destination's definition, whose members
// may be placed with an earlier replication factor (SetReplicas).
func validateDestination(d *fsmpb.Destination) error {
	if d == nil {
		return fmt.Errorf("%w: missing destination", ErrMalformed)
	}
	if err := ValidateName(d.Name); err != nil {
		return err
	}
	subscription := d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION
	switch {
	case d.Kind != fsmpb.DestinationKind_DESTINATION_KIND_QUEUE && d.Kind != fsmpb.DestinationKind_DESTINATION_KIND_TOPIC && !subscription:
		return fmt.Errorf("%w: kind %v", ErrInvalidSettings, d.Kind)
	case subscription != (TopicOf(d.Name) != ""):
		return fmt.Errorf("%w: %q: only a topic's subscription has %q in its name", ErrInvalidName, d.Name, SubscriptionSep)
	case subscription != (d.Subscription != nil) || subscription && d.Subscription.Topic != TopicOf(d.Name):
		return fmt.Errorf("%w: subscription %s does not say its topic", ErrInvalidSettings, d.Name)
	case len(d.Members) == 0 || len(d.Members) > MaxMembers:
		return fmt.Errorf("%w: %d members; a destination has 1 to %d", ErrInvalidSettings, len(d.Members), MaxMembers)
	case d.Replicas == 0:
		return fmt.Errorf("%w: replication factor 0", ErrInvalidSettings)
	case d.TtlNs < 0 || d.MaxBytes < 0:
		return fmt.Errorf("%w: ttl and max size must not be negative", ErrInvalidSettings)
	}
	for i, p := range d.Members {
		if p.Index != uint32(i) {
			return fmt.Errorf("%w: member %d has index %d", ErrInvalidSettings, i, p.Index)
		}
		if len(p.Replicas) == 0 {
			return fmt.Errorf("%w: member %d has no replica", ErrInvalidSettings, i)
		}
		for j, id := range p.Replicas {
			if id == "" || slices.Contains(p.Replicas[:j], id) {
				return fmt.Errorf("%w: member %d's replicas %q need distinct node ids", ErrInvalidSettings, i, p.Replicas)
			}
		}
	}
	return nil
}

func (m *Meta) createDestination(c *fsmpb.CreateDestination) Result {
	if err := ValidateDestination(c.Destination); err != nil {
		return Result{Err: err}
	}
	if _, ok := m.destinations[c.Destination.Name]; ok {
		return Result{Err: fmt.Errorf("%w: %s", ErrDestinationExists, c.Destination.Name)}
	}
	if err := m.checkGroups(c.Destination.Members); err != nil {
		return Result{Err: err}
	}
	if err := m.checkTopicMembers(c.Destination); err != nil {
		return Result{Err: err}
	}
	m.destinations[c.Destination.Name] = c.Destination
	return Result{}
}

// deleteDestination deletes a destination; a topic's subscriptions go with
// it.
func (m *Meta) deleteDestination(c *fsmpb.DeleteDestination) Result {
	d, ok := m.destinations[c.Name]
	if !ok {
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownDestination, c.Name)}
	}
	delete(m.destinations, c.Name)
	if d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC {
		for name, s := range m.destinations {
			if s.Subscription.GetTopic() == d.Name {
				delete(m.destinations, name)
			}
		}
	}
	return Result{}
}

// resizeDestination works on a copy, validated whole before it replaces
// the original, so a rejected resize changes nothing.
func (m *Meta) resizeDestination(c *fsmpb.ResizeDestination) Result {
	d, ok := m.destinations[c.Name]
	if !ok {
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownDestination, c.Name)}
	}
	if err := fixedMembers(d); err != nil {
		return Result{Err: err}
	}
	nd := proto.Clone(d).(*fsmpb.Destination)
	nd.Members = append(nd.Members, c.Add...)
	nd.Spare = c.Spare
	if c.Active == 0 || int(c.Active) > len(nd.Members) {
		return Result{Err: fmt.Errorf("%w: %d active members of %d", ErrInvalidSettings, c.Active, len(nd.Members))}
	}
	// A renewing member below active stays draining; one from active on
	// drains to be removed rather than renewed.
	active := 0
	for i, p := range nd.Members {
		if p.Renewing = p.Renewing && uint32(i) < c.Active; !p.Renewing {
			p.RenewOn = ""
		}
		p.Draining = uint32(i) >= c.Active || p.Renewing
		if !p.Draining {
			active++
		}
	}
	if active == 0 {
		return Result{Err: fmt.Errorf("%w: %s would have no active member while one is renewed; try again once it is", ErrInvalidSettings, c.Name)}
	}
	if err := validateDestination(nd); err != nil {
		return Result{Err: err}
	}
	if err := replicaCount(nd, c.Add); err != nil {
		return Result{Err: err}
	}
	if err := m.checkGroups(c.Add); err != nil {
		return Result{Err: err}
	}
	m.destinations[c.Name] = nd
	return Result{}
}

func (m *Meta) removeMember(c *fsmpb.RemoveMember) Result {
	d, ok := m.destinations[c.Name]
	if !ok {
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownDestination, c.Name)}
	}
	last := len(d.Members) - 1
	switch {
	case int(c.Index) != last:
		return Result{Err: fmt.Errorf("%w: only the last member (%s) can be removed", ErrInvalidSettings, MemberName(d.Name, uint32(last)))}
	case !d.Members[last].Draining:
		return Result{Err: fmt.Errorf("%w: %s is not draining", ErrInvalidSettings, MemberName(d.Name, c.Index))}
	}
	nd := proto.Clone(d).(*fsmpb.Destination)
	nd.Members = nd.Members[:last]
	m.destinations[c.Name] = nd
	return Result{}
}

func (m *Meta) registerNode(c *fsmpb.RegisterNode) Result {
	if c.Node == nil || c.Node.Id == "" {
		return Result{Err: fmt.Errorf("%w: a node needs an id", ErrMalformed)}
	}
	if err := m.refusal(c.Node); err != nil {
		return Result{Err: err}
	}
	delete(m.removed, c.Node.Id)
	if had, ok := m.nodes[c.Node.Id]; ok && had.Incarnation != "" && had.Incarnation != c.Node.Incarnation {
		m.rejoin(c.Node.Id)
	}
	m.nodes[c.Node.Id] = c.Node
	return Result{}
}

// refusal says why a node is not registered, or nil: a removed node
// joins again only started afresh (another incarnation), once no member
// is placed on it any more.
func (m *Meta) refusal(n *fsmpb.Node) error {
	inc, removed := m.removed[n.Id]
	switch {
	case !removed:
		return nil
	case inc == "" || n.Incarnation == "" || n.Incarnation == inc:
		return fmt.Errorf("%w: node %s was removed from the cluster; it joins again only with an empty data directory, or under a new id", ErrInvalidSettings, n.Id)
	case m.placed(n.Id):
		return fmt.Errorf("%w: node %s was removed and its replicas are still being placed elsewhere; it joins again once they are", ErrInvalidSettings, n.Id)
	}
	return nil
}

// MayRegister reports whether RegisterNode would register n.
func (m *Meta) MayRegister(n *fsmpb.Node) bool { return m.refusal(n) == nil }

// rejoin marks every group in which node holds a replica, beside others,
// as one its replica must catch up in again: the node came back with an
// empty data directory. A member whose only replica it was lost its
// messages; its group starts again from empty on the node.
func (m *Meta) rejoin(node string) {
	groups := map[string]bool{}
	for _, d := range m.destinations {
		for _, p := range d.Members {
			if len(p.Replicas) > 1 && slices.Contains(p.Replicas, node) {
				groups[GroupKey(d.Name, p)] = true
			}
		}
	}
	delete(m.rejoining, node)
	if len(groups) > 0 {
		m.rejoining[node] = groups
	}
}

// replicaCaughtUp ends a replica's rejoining of a group.
func (m *Meta) replicaCaughtUp(c *fsmpb.ReplicaCaughtUp) Result {
	if !m.rejoining[c.Node][c.Group] {
		return Result{Err: fmt.Errorf("%w: node %s is not rejoining group %s", ErrInvalidSettings, c.Node, c.Group)}
	}
	delete(m.rejoining[c.Node], c.Group)
	if len(m.rejoining[c.Node]) == 0 {
		delete(m.rejoining, c.Node)
	}
	return Result{}
}

// rebuildReplica marks node's replica of a group as rejoining it: the
// replica stopped on an entry it could not apply or a log it could not
// read, and starts again empty. Only a replica beside others is rebuilt,
// one of a group at a time, so that the others it copies from hold the
// group's log; a repeat of the same request changes nothing.
func (m *Meta) rebuildReplica(c *fsmpb.RebuildReplica) Result {
	var p *fsmpb.MemberPlacement
	for _, d := range m.destinations {
		for _, q := range d.Members {
			if GroupKey(d.Name, q) == c.Group && slices.Contains(q.Replicas, c.Node) {
				p = q
			}
		}
	}
	_, registered := m.nodes[c.Node]
	switch {
	case !registered:
		return Result{Err: fmt.Errorf("%w: node %s is not registered", ErrInvalidSettings, c.Node)}
	case p == nil:
		return Result{Err: fmt.Errorf("%w: node %s holds no replica of group %s", ErrInvalidSettings, c.Node, c.Group)}
	case m.rejoining[c.Node][c.Group]:
		return Result{}
	case len(p.Replicas) < 2:
		return Result{Err: fmt.Errorf("%w: node %s holds the only replica of group %s: there is no other to rebuild it from", ErrInvalidSettings, c.Node, c.Group)}
	}
	for _, other := range p.Replicas {
		if m.rejoining[other][c.Group] {
			return Result{Err: fmt.Errorf("%w: node %s's replica of group %s is being rebuilt or caught up; one replica of a group at a time", ErrInvalidSettings, other, c.Group)}
		}
	}
	if m.rejoining[c.Node] == nil {
		m.rejoining[c.Node] = map[string]bool{}
	}
	m.rejoining[c.Node][c.Group] = true
	return Result{}
}

// Rejoining reports whether node's replica of group (GroupKey) came back
// empty and has not caught up since.
func (m *Meta) Rejoining(node, group string) bool { return m.rejoining[node][group] }

// Group returns the placement of a member in shared group id (every
// member of a group has the same replicas), or nil when none is in it.
func (m *Meta) Group(id string) *fsmpb.MemberPlacement {
	for _, d := range m.destinations {
		for _, p := range d.Members {
			if p.Group == id {
				return p
			}
		}
	}
	return nil
}

// GroupOn returns the placement of a member of a shared group whose
// replicas are replicas, in that order, or nil when there is none.
func (m *Meta) GroupOn(replicas []string) *fsmpb.MemberPlacement {
	for _, d := range m.destinations {
		for _, p := range d.Members {
			if p.Group != "" && slices.Equal(p.Replicas, replicas) {
				return p
			}
		}
	}
	return nil
}

// GroupKey names the Raft group of member p of destination dest: its
// shared group, or the member itself when it has a group of its own.
func GroupKey(dest string, p *fsmpb.MemberPlacement) string {
	if p.Group != "" {
		return p.Group
	}
	return MemberName(dest, p.Index)
}

func (m *Meta) removeNode(c *fsmpb.RemoveNode) Result {
	if c.Id == "" {
		return Result{Err: fmt.Errorf("%w: a node needs an id", ErrMalformed)}
	}
	nd, ok := m.nodes[c.Id]
	_, removed := m.removed[c.Id]
	if !ok && !removed {
		return Result{Err: fmt.Errorf("%w: no node %s in the cluster", ErrInvalidSettings, c.Id)}
	}
	if ok {
		m.removed[c.Id] = nd.Incarnation
	}
	delete(m.nodes, c.Id)
	delete(m.rejoining, c.Id)
	delete(m.decommissioning, c.Id)
	return Result{}
}

// decommissionNode marks a registered node as leaving for good; marking it
// again changes nothing.
func (m *Meta) decommissionNode(c *fsmpb.DecommissionNode) Result {
	if c.Id == "" {
		return Result{Err: fmt.Errorf("%w: a node needs an id", ErrMalformed)}
	}
	if _, ok := m.nodes[c.Id]; !ok {
		return Result{Err: fmt.Errorf("%w: no node %s in the cluster", ErrInvalidSettings, c.Id)}
	}
	m.decommissioning[c.Id] = true
	return Result{}
}

// Decommissioning reports whether the node is leaving the cluster for good.
func (m *Meta) Decommissioning(id string) bool { return m.decommissioning[id] }

// replaceReplica changes one member's placement. The destination's record
// is replaced, never modified, as readers hold it without the lock.
func (m *Meta) replaceReplica(c *fsmpb.ReplaceReplica) Result {
	d, p, err := m.placement(c.Destination, c.Member)
	if err != nil {
		return Result{Err: err}
	}
	i := slices.Index(p.Replicas, c.Old)
	switch {
	case c.Old == "" || i < 0:
		return Result{Err: fmt.Errorf("%w: %s is not a replica of %s", ErrInvalidSettings, c.Old, MemberName(d.Name, c.Member))}
	case c.New != "" && slices.Contains(p.Replicas, c.New):
		return Result{Err: fmt.Errorf("%w: %s is already a replica of %s", ErrInvalidSettings, c.New, MemberName(d.Name, c.Member))}
	case c.New == "" && len(p.Replicas) == 1:
		return Result{Err: fmt.Errorf("%w: %s would have no replica left", ErrInvalidSettings, MemberName(d.Name, c.Member))}
	}
	m.changeReplicas(d, p, func(np *fsmpb.MemberPlacement) {
		switch i := slices.Index(np.Replicas, c.Old); {
		case i < 0:
		case c.New == "":
			np.Replicas = slices.Delete(np.Replicas, i, i+1)
		case i == 0 && c.KeepHost && len(np.Replicas) > 1:
			np.Replicas = append(np.Replicas[1:], c.New)
		default:
			np.Replicas[i] = c.New
		}
	})
	return Result{}
}

// addReplica gives a member (and every member of its shared group) a
// replica on c.Node, refused if the node is not registered, already holds
// one, or the member has the replicas its destination wants.
func (m *Meta) addReplica(c *fsmpb.AddReplica) Result {
	d, p, err := m.placement(c.Destination, c.Member)
	if err != nil {
		return Result{Err: err}
	}
	name := MemberName(d.Name, c.Member)
	switch _, registered := m.nodes[c.Node]; {
	case !registered:
		return Result{Err: fmt.Errorf("%w: node %q is not registered", ErrInvalidSettings, c.Node)}
	case slices.Contains(p.Replicas, c.Node):
		return Result{Err: fmt.Errorf("%w: %s is already a replica of %s", ErrInvalidSettings, c.Node, name)}
	case uint32(len(p.Replicas)) >= d.Replicas:
		return Result{Err: fmt.Errorf("%w: %s has %d replicas, as many as %s wants", ErrInvalidSettings, name, len(p.Replicas), d.Name)}
	}
	m.changeReplicas(d, p, func(np *fsmpb.MemberPlacement) { np.Replicas = append(np.Replicas, c.Node) })
	return Result{}
}

// preferReplica makes c.Node, a replica of the member, first in its
// replicas (and its group's): the preferred host, which the member's
// leadership then moves to.
func (m *Meta) preferReplica(c *fsmpb.PreferReplica) Result {
	d, p, err := m.placement(c.Destination, c.Member)
	if err != nil {
		return Result{Err: err}
	}
	if !slices.Contains(p.Replicas, c.Node) {
		return Result{Err: fmt.Errorf("%w: %s is not a replica of %s", ErrInvalidSettings, c.Node, MemberName(d.Name, c.Member))}
	}
	m.changeReplicas(d, p, func(np *fsmpb.MemberPlacement) {
		np.Replicas = append([]string{c.Node}, slices.DeleteFunc(np.Replicas, func(id string) bool { return id == c.Node })...)
	})
	return Result{}
}

// placement is a destination and the placement of its member index.
func (m *Meta) placement(dest string, index uint32) (*fsmpb.Destination, *fsmpb.MemberPlacement, error) {
	d, ok := m.destinations[dest]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrUnknownDestination, dest)
	}
	if int(index) >= len(d.Members) {
		return nil, nil, fmt.Errorf("%w: %s has no member %d", ErrInvalidSettings, dest, index)
	}
	return d, d.Members[index], nil
}

// changeReplicas makes change to member p of d or, in a shared group, to
// every member of the group (a group has one set of replicas), on copies.
func (m *Meta) changeReplicas(d *fsmpb.Destination, p *fsmpb.MemberPlacement, change func(*fsmpb.MemberPlacement)) {
	in := func(np *fsmpb.MemberPlacement) bool { return np.Index == p.Index }
	dests := []*fsmpb.Destination{d}
	if p.Group != "" {
		in = func(np *fsmpb.MemberPlacement) bool { return np.Group == p.Group }
		dests = m.Destinations()
	}
	for _, od := range dests {
		if !slices.ContainsFunc(od.Members, in) {
			continue
		}
		nd := proto.Clone(od).(*fsmpb.Destination)
		for _, np := range nd.Members {
			if in(np) {
				change(np)
			}
		}
		m.destinations[nd.Name] = nd
	}
}

// checkGroups refuses new members placed in a shared group with replicas
// other than the group's: a group has one set of replicas.
func (m *Meta) checkGroups(members []*fsmpb.MemberPlacement) error {
	for _, p := range members {
		if p.Group == "" {
			continue
		}
		for _, d := range m.destinations {
			for _, q := range d.Members {
				if q.Group == p.Group && !slices.Equal(q.Replicas, p.Replicas) {
					return fmt.Errorf("%w: member %d is placed in group %s on %q, and the group's replicas are %q", ErrInvalidSettings, p.Index, p.Group, p.Replicas, q.Replicas)
				}
			}
		}
	}
	return nil
}

// Removed reports whether an operator removed the node.
func (m *Meta) Removed(id string) bool {
	_, ok := m.removed[id]
	return ok
}

// placed reports whether a member has a replica on node.
func (m *Meta) placed(node string) bool {
	for _, d := range m.destinations {
		for _, p := range d.Members {
			if slices.Contains(p.Replicas, node) {
				return true
			}
		}
	}
	return false
}

// Destination returns a destination's definition; callers must not modify it.
func (m *Meta) Destination(name string) (*fsmpb.Destination, bool) {
	d, ok := m.destinations[name]
	return d, ok
}

// Destinations lists every destination by name; callers must not modify them.
func (m *Meta) Destinations() []*fsmpb.Destination {
	out := make([]*fsmpb.Destination, 0, len(m.destinations))
	for _, d := range m.destinations {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *fsmpb.Destination) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Node returns a registered node.
func (m *Meta) Node(id string) (*fsmpb.Node, bool) {
	n, ok := m.nodes[id]
	return n, ok
}

// Nodes lists the registered nodes by id.
func (m *Meta) Nodes() []*fsmpb.Node {
	out := make([]*fsmpb.Node, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *fsmpb.Node) int { return cmp.Compare(a.Id, b.Id) })
	return out
}
