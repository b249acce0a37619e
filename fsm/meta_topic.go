package fsm

import (
	"fmt"
	"slices"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// A topic's members live in shared groups; a subscription (kind
// SUBSCRIPTION, TOPIC::ID) has its member I in the group of its topic's
// member I, where the topic's publishes are applied (Group.publish).

// checkTopicMembers checks that a topic's members are in shared groups and
// that a subscription's member I is in the group of its topic's member I,
// where its publishes are applied.
func (m *Meta) checkTopicMembers(d *fsmpb.Destination) error {
	switch d.Kind {
	case fsmpb.DestinationKind_DESTINATION_KIND_TOPIC:
		for _, p := range d.Members {
			if p.Group == "" {
				return fmt.Errorf("%w: topic member %s needs a shared group", ErrInvalidSettings, MemberName(d.Name, p.Index))
			}
		}
	case fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION:
		s := d.Subscription
		t, ok := m.destinations[s.Topic]
		switch {
		case !ok || t.Kind != fsmpb.DestinationKind_DESTINATION_KIND_TOPIC || t.Uid != s.TopicUid:
			return fmt.Errorf("%w: topic %s of subscription %s", ErrUnknownDestination, s.Topic, d.Name)
		case len(t.Members) != len(d.Members):
			return fmt.Errorf("%w: subscription %s has %d members, its topic %d", ErrInvalidSettings, d.Name, len(d.Members), len(t.Members))
		}
		if s.Name != "" {
			if other := m.Subscription(s.Topic, s.Name, s.ClientId); other != nil {
				return fmt.Errorf("%w: topic %s has a subscription %q for client id %q already (%s)", ErrDestinationExists, s.Topic, s.Name, s.ClientId, other.Name)
			}
		}
		for i, p := range d.Members {
			if q := t.Members[i]; p.Group != q.Group || !slices.Equal(p.Replicas, q.Replicas) {
				return fmt.Errorf("%w: member %s is not placed with its topic's member %s", ErrInvalidSettings, MemberName(d.Name, p.Index), MemberName(t.Name, q.Index))
			}
		}
	}
	return nil
}

// Subscription is topic's subscription of that name for clientID (""
// for none), or nil.
func (m *Meta) Subscription(topic, name, clientID string) *fsmpb.Destination {
	for _, d := range m.destinations {
		if s := d.Subscription; s != nil && s.Topic == topic && s.Name == name && s.ClientId == clientID {
			return d
		}
	}
	return nil
}

// MembersFixed reports whether d's members are fixed: a topic's or a
// subscription's, since a subscription's members live in its topic's
// members' groups. Their groups' replicas move whole, as any group's; the
// members are never resized nor renewed.
func MembersFixed(d *fsmpb.Destination) bool {
	return d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_TOPIC || d.Kind == fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION
}

func fixedMembers(d *fsmpb.Destination) error {
	if MembersFixed(d) {
		return fmt.Errorf("%w: %s: a topic's members and its subscriptions' are fixed when it is made", ErrInvalidSettings, d.Name)
	}
	return nil
}
