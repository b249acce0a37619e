package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
)

// topicReport is what `cairn verify --topics --json` prints: one report per
// subscription.
type topicReport struct {
	Topic         string         `json:"topic"`
	Duration      string         `json:"duration"`
	Subscriptions []verifyReport `json:"subscriptions"`
	OK            bool           `json:"ok"`
}

// verifySub is one subscription of the topic workload, with its history.
type verifySub struct {
	kind      string // durable, shared or non-durable
	sub       client.Subscription
	clientID  string // of an unshared durable subscription's connection
	consumers int
	h         *history.History
}

// histories are every subscription's: a publish is recorded in each.
type histories []*history.History

func (hs histories) Sending(id string) {
	for _, h := range hs {
		h.Sending(id)
	}
}

func (hs histories) Sent(id string, err error) {
	for _, h := range hs {
		h.Sent(id, err)
	}
}

func (hs histories) SentInTx(txID, id string) {
	for _, h := range hs {
		h.SentInTx(txID, id)
	}
}

func (hs histories) Committed(txID string, err error) {
	for _, h := range hs {
		h.Committed(txID, err)
	}
}

// runVerifyTopics publishes to a new topic with three subscriptions
// subscribed before the first publish: an unshared durable one (one
// consumer, on a connection with a client id), a shared durable one
// (--consumers consumers) and a non-durable one. Then it drains the
// durable two and checks each subscription's history: the durable ones
// with the queue's rules, the non-durable one with every rule but loss (it
// is subscribed anew after a reconnect and misses what was published
// meanwhile).
func runVerifyTopics(ctx context.Context, logw io.Writer, cfg verifyConfig, rec *recorder) (topicReport, error) {
	a, err := client.NewAdmin(cfg.servers, cfg.opts)
	if err != nil {
		return topicReport{}, err
	}
	defer a.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = a.CreateTopic(actx, cfg.queue, client.TopicOptions{Members: cfg.members})
	cancel()
	if err != nil {
		return topicReport{}, fmt.Errorf("creating topic %s: %w", cfg.queue, err)
	}
	subs := []*verifySub{
		{kind: "durable", sub: client.Subscription{Name: "durable", Durable: true}, clientID: cfg.queue + "-durable", consumers: 1},
		{kind: "shared", sub: client.Subscription{Name: "shared", Durable: true, Shared: true}, consumers: cfg.consumers},
		{kind: "non-durable", consumers: 1},
	}
	var hs histories
	start := time.Now()
	w := newWorkload(ctx, cfg, rec)
	defer w.close()
	for _, vs := range subs {
		vs.h = history.New()
		vs.h.NonDurable = !vs.sub.Durable
		hs = append(hs, vs.h)
		open := func(s *client.Session) (*client.Consumer, error) { return s.Subscribe(w.ctx, cfg.queue, vs.sub) }
		for i := range vs.consumers {
			// Every second session of the shared subscription has two of
			// its consumers.
			pair := vs.sub.Shared && i%2 == 1
			if err := w.startConsumer(ctx, vs.clientID, open, vs.h, fmt.Sprintf("%s-c%d", vs.kind, i), pair); err != nil {
				return topicReport{}, fmt.Errorf("%s subscriber of %s: %w", vs.kind, cfg.queue, err)
			}
		}
	}
	if err := w.startProducers(ctx, hs); err != nil {
		return topicReport{}, err
	}
	w.finish()
	fmt.Fprintf(logw, "cairn verify: workload done after %v; draining the durable subscriptions of %s\n", time.Since(start).Round(time.Millisecond), cfg.queue)
	rep := topicReport{Topic: cfg.queue, Duration: cfg.duration.String(), OK: true}
	for _, vs := range subs {
		dest := cfg.queue // a non-durable subscription goes with its consumer
		if vs.sub.Durable {
			var err error
			if dest, err = drainSubscription(ctx, a, w, vs); err != nil {
				return topicReport{}, err
			}
		}
		r := report(dest, cfg, vs.h, w.observed())
		r.Subscription = vs.kind
		rep.Subscriptions = append(rep.Subscriptions, r)
		rep.OK = rep.OK && r.OK
	}
	return rep, nil
}

// drainSubscription drains durable subscription vs through its members
// (TOPIC::ID#I) and returns its destination.
func drainSubscription(ctx context.Context, a *client.Admin, w *workload, vs *verifySub) (string, error) {
	cfg := w.cfg
	find := func(ctx context.Context) (client.SubscriptionInfo, error) {
		t, err := a.ShowTopic(ctx, cfg.queue)
		if err != nil {
			return client.SubscriptionInfo{}, err
		}
		for _, si := range t.Subscriptions {
			if si.Name == vs.sub.Name && si.ClientID == vs.clientID {
				return si, nil
			}
		}
		return client.SubscriptionInfo{}, fmt.Errorf("%w: topic %s has no subscription %s of client id %q", client.ErrUnknownDestination, cfg.queue, vs.sub.Name, vs.clientID)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	si, err := find(fctx)
	cancel()
	if err != nil {
		return "", fmt.Errorf("verify: the %s subscription: %w", vs.kind, err)
	}
	holds := func(ctx context.Context) (client.QueueInfo, error) {
		si, err := find(ctx)
		return client.QueueInfo{Name: si.Destination, Pending: si.Pending, Delivered: si.Delivered}, err
	}
	return si.Destination, w.drain(ctx, si.Destination, len(si.Members), vs.h, holds)
}
