package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnmq/cairn/client"
)

// target is a run's destination: a queue, or a topic with the run's
// subscriptions.
type target struct {
	name    string
	members int
	topic   bool
	// subs are the topic's subscriptions the run makes, durable and shared
	// (so that any number of consumers may share one), deleted at the end.
	subs []string
	// created: the run made the destination.
	created bool
}

// prepare creates the run's queue or topic, or finds the named one.
func prepare(ctx context.Context, a *client.Admin, cfg Config) (target, error) {
	if !cfg.Topic {
		q, created, err := prepareQueue(ctx, a, cfg.Dest, cfg.Members)
		return target{name: q.Name, members: len(q.Members), created: created}, err
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tg := target{name: cfg.Dest, topic: true}
	if tg.name == "" {
		tg.name = "bench-" + client.NewMessageID()[3:11]
	}
	t, err := a.ShowTopic(actx, tg.name)
	if errors.Is(err, client.ErrUnknownDestination) {
		t, err = a.CreateTopic(actx, tg.name, client.TopicOptions{Members: cfg.Members})
		tg.created = err == nil
	}
	if err != nil {
		return target{}, fmt.Errorf("topic %s: %w", tg.name, err)
	}
	tg.members = len(t.Members)
	run := client.NewMessageID()[3:11]
	for i := range cfg.Subscriptions {
		tg.subs = append(tg.subs, fmt.Sprintf("bench-%s-%d", run, i))
	}
	return tg, nil
}

// remove deletes what the run made and is not to keep: a fresh queue or
// topic, and the subscriptions of a named topic.
func (tg target) remove(a *client.Admin, keepDest bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case !keepDest && tg.topic:
		_ = a.DeleteTopic(ctx, tg.name)
	case !keepDest:
		_ = a.DeleteQueue(ctx, tg.name)
	case tg.topic:
		for _, s := range tg.subs {
			// The consumers' connections are closed; a host may take a
			// moment to drop them.
			for a.DeleteSubscription(ctx, tg.name, s, "") != nil && ctx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
}

// subscribe makes the topic's subscriptions before anything is published,
// so that each stores every message: consumers that start only after the
// sends find them there.
func (r *run) subscribe(ctx context.Context, d *dialer, tg target) error {
	conn, err := d.dial(ctx, 0, "")
	if err != nil {
		return err
	}
	s, err := conn.Session(client.AutoAck)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, name := range tg.subs {
		k, err := s.Subscribe(ctx, tg.name, client.Subscription{Name: name, Durable: true, Shared: true})
		if err != nil {
			return fmt.Errorf("subscription %s to %s: %w", name, tg.name, err)
		}
		if err := k.Close(); err != nil {
			return err
		}
	}
	return nil
}

// attach makes consumer i of session s: of its member of a queue, or of
// subscription i (modulo their number) of a topic; it returns the tracker
// of what the consumer receives.
func (r *run) attach(ctx context.Context, s *client.Session, i int) (*client.Consumer, *tracker, error) {
	tg := r.dest
	if !tg.topic {
		dest := r.members[i%len(r.members)]
		k, err := s.Consumer(ctx, dest)
		if err != nil {
			return nil, nil, fmt.Errorf("consumer on %s: %w", dest, err)
		}
		return k, r.t[0], nil
	}
	j := i % len(tg.subs)
	k, err := s.Subscribe(ctx, tg.name, client.Subscription{Name: tg.subs[j], Durable: true, Shared: true})
	if err != nil {
		return nil, nil, fmt.Errorf("subscriber of %s to %s: %w", tg.subs[j], tg.name, err)
	}
	return k, r.t[j], nil
}
