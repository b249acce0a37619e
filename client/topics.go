package client

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// TopicOptions are the settings of a new topic; zero values take the
// server's defaults. A topic's members and replicas are fixed once made.
type TopicOptions struct {
	// Members is the number of members (default: one per live node).
	Members int
	// Replicas is the replication factor (default: 3, or fewer nodes).
	Replicas int
	// TTL is the default time to live of its messages (0: forever).
	TTL time.Duration
}

// TopicInfo describes a topic: its members and its subscriptions.
type TopicInfo struct {
	Name          string             `json:"name"`
	Members       []MemberInfo       `json:"members"`
	Replicas      int                `json:"replicas"`
	TTLMillis     int64              `json:"ttl_ms"`
	Subscriptions []SubscriptionInfo `json:"subscriptions"`
}

// SubscriptionInfo describes a subscription with its counts, in total and
// per member. Destination is its own name (TOPIC::ID), which a consumer
// or a browse may name too.
type SubscriptionInfo struct {
	Name        string       `json:"name"`
	ClientID    string       `json:"client_id"`
	Durable     bool         `json:"durable"`
	Shared      bool         `json:"shared"`
	Selector    string       `json:"selector"`
	Pending     uint64       `json:"pending"`
	Delivered   uint64       `json:"delivered"`
	Consumers   int          `json:"consumers"`
	Destination string       `json:"destination"`
	Members     []MemberInfo `json:"members"`
}

func topicInfo(d *clientpb.DestinationInfo) TopicInfo {
	q := queueInfo(d)
	t := TopicInfo{Name: d.Name, Members: q.Members, Replicas: q.Replicas, TTLMillis: q.TTLMillis, Subscriptions: []SubscriptionInfo{}}
	for _, sd := range d.Subscriptions {
		s, sq := sd.GetSubscription(), queueInfo(sd)
		t.Subscriptions = append(t.Subscriptions, SubscriptionInfo{
			Name: s.GetName(), ClientID: s.GetClientId(), Durable: s.GetDurable(), Shared: s.GetShared(), Selector: s.GetSelector(),
			Pending: sq.Pending, Delivered: sq.Delivered, Consumers: sq.Consumers, Destination: sd.Name, Members: sq.Members,
		})
	}
	return t
}

// CreateTopic creates a topic.
func (a *Admin) CreateTopic(ctx context.Context, name string, o TopicOptions) (TopicInfo, error) {
	if o.Members < 0 || o.Replicas < 0 || o.TTL < 0 {
		return TopicInfo{}, fmt.Errorf("%w: members, replicas and ttl must not be negative", ErrInvalidArgument)
	}
	var info TopicInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		d, err := api.CreateDestination(ctx, &clientpb.CreateDestinationRequest{
			Name: name, Kind: clientpb.DestinationKind_DESTINATION_KIND_TOPIC, Members: uint32(o.Members),
			Replicas: uint32(o.Replicas), TtlMs: o.TTL.Milliseconds(),
		})
		if err == nil {
			info = topicInfo(d)
		}
		return err
	})
	return info, err
}

// ShowTopic reports a topic's members and its subscriptions' counts.
func (a *Admin) ShowTopic(ctx context.Context, name string) (TopicInfo, error) {
	var info TopicInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		d, err := api.ShowDestination(ctx, &clientpb.ShowDestinationRequest{Name: name})
		if err != nil {
			return err
		}
		if d.Kind != clientpb.DestinationKind_DESTINATION_KIND_TOPIC {
			return fmt.Errorf("%w: %s is not a topic", ErrDestinationKind, name)
		}
		info = topicInfo(d)
		return nil
	})
	return info, err
}

// ListTopics lists every topic with its subscriptions.
func (a *Admin) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	var out []TopicInfo
	err := a.call(ctx, func(api clientpb.ClientServiceClient) error {
		resp, err := api.ListDestinations(ctx, &clientpb.ListDestinationsRequest{})
		if err != nil {
			return err
		}
		out = []TopicInfo{}
		for _, d := range resp.Destinations {
			if d.Kind == clientpb.DestinationKind_DESTINATION_KIND_TOPIC {
				out = append(out, topicInfo(d))
			}
		}
		return nil
	})
	return out, err
}

// DeleteTopic deletes a topic, its subscriptions and every message they
// hold.
func (a *Admin) DeleteTopic(ctx context.Context, name string) error {
	if _, err := a.ShowTopic(ctx, name); err != nil {
		return err
	}
	return a.call(ctx, func(api clientpb.ClientServiceClient) error {
		_, err := api.DeleteDestination(ctx, &clientpb.DeleteDestinationRequest{Name: name})
		return err
	})
}

// DeleteSubscription deletes a topic's durable or shared subscription
// named name, of clientID ("" for one without), and the messages it
// holds; refused while a consumer uses it (ErrSubscriptionInUse).
func (a *Admin) DeleteSubscription(ctx context.Context, topic, name, clientID string) error {
	return a.call(ctx, func(api clientpb.ClientServiceClient) error {
		_, err := api.DeleteSubscription(ctx, &clientpb.DeleteSubscriptionRequest{Topic: topic, Name: name, ClientId: clientID})
		return err
	})
}
