package fsm_test

import (
	"errors"
	"testing"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

func topicDest(name, uid string, groups ...string) *fsmpb.Destination {
	d := &fsmpb.Destination{Name: name, Kind: fsmpb.DestinationKind_DESTINATION_KIND_TOPIC, Replicas: 1, Uid: uid}
	for i, g := range groups {
		d.Members = append(d.Members, &fsmpb.MemberPlacement{Index: uint32(i), Replicas: []string{"n1"}, Initial: []string{"n1"}, Group: g})
	}
	return d
}

func subscriptionDest(t *fsmpb.Destination, id string) *fsmpb.Destination {
	d := &fsmpb.Destination{Name: t.Name + "::" + id, Kind: fsmpb.DestinationKind_DESTINATION_KIND_SUBSCRIPTION, Replicas: 1, Uid: id,
		Subscription: &fsmpb.Subscription{Topic: t.Name, TopicUid: t.Uid, Name: id, Durable: true}}
	for _, p := range t.Members {
		d.Members = append(d.Members, &fsmpb.MemberPlacement{Index: p.Index, Replicas: p.Replicas, Initial: p.Initial, Group: p.Group})
	}
	return d
}

// A topic's members live in shared groups; a subscription's member I in
// the group of its topic's member I; neither is resized nor renewed; and a
// topic's subscriptions go with it. Only subscriptions have "::" in their
// names.
func TestMeta_TopicsAndSubscriptions(t *testing.T) {
	f := newMeta(t)
	tp := topicDest("news", "u1", "g0", "g1")
	f.ok(&fsmpb.CreateDestination{Destination: tp})
	sub := subscriptionDest(tp, "audit")
	f.ok(&fsmpb.CreateDestination{Destination: sub})

	for _, c := range []struct {
		what string
		d    *fsmpb.Destination
		want error
	}{
		{"a topic member in a group of its own", topicDest("solo", "u2", "g0", ""), fsm.ErrInvalidSettings},
		{"a queue named like a subscription", func() *fsmpb.Destination {
			d := topicDest("a::b", "u3", "g0")
			d.Kind = fsmpb.DestinationKind_DESTINATION_KIND_QUEUE
			return d
		}(), fsm.ErrInvalidName},
		{"a subscription without its topic", func() *fsmpb.Destination { d := subscriptionDest(tp, "x"); d.Subscription = nil; return d }(), fsm.ErrInvalidSettings},
		{"a subscription of an unknown topic", subscriptionDest(topicDest("gone", "u4", "g0"), "x"), fsm.ErrUnknownDestination},
		{"a subscription of an earlier topic of that name", subscriptionDest(topicDest("news", "old", "g0", "g1"), "x"), fsm.ErrUnknownDestination},
		{"a subscription placed apart from its topic", subscriptionDest(topicDest("news", "u1", "g0", "g9"), "x"), fsm.ErrInvalidSettings},
		{"a subscription with a member too few", subscriptionDest(topicDest("news", "u1", "g0"), "x"), fsm.ErrInvalidSettings},
		{"a second subscription of the same name", func() *fsmpb.Destination { d := subscriptionDest(tp, "other"); d.Subscription.Name = "audit"; return d }(), fsm.ErrDestinationExists},
	} {
		if r := f.do(&fsmpb.CreateDestination{Destination: c.d}); !errors.Is(r.Err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, r.Err, c.want)
		}
	}
	if r := f.do(&fsmpb.ResizeDestination{Name: "news", Active: 1}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Errorf("resizing a topic: %v", r.Err)
	}
	if r := f.do(&fsmpb.SetReplicas{Name: sub.Name, Replicas: 2}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Errorf("changing a subscription's replication factor: %v", r.Err)
	}
	if r := f.do(&fsmpb.RenewMember{Name: "news", Index: 0}); !errors.Is(r.Err, fsm.ErrInvalidSettings) {
		t.Errorf("renewing a topic's member: %v", r.Err)
	}
	f.ok(&fsmpb.DeleteDestination{Name: "news"})
	if _, ok := f.m.Destination(sub.Name); ok {
		t.Fatal("a deleted topic's subscription stayed")
	}
	if fsm.TopicOf(sub.Name) != "news" || fsm.TopicOf("news") != "" {
		t.Fatal("TopicOf")
	}
}
