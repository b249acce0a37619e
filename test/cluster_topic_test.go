package test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/client/history"
	"github.com/cairnmq/cairn/test/wait"
)

// topicSubscriber is one consumer of a subscription, recording what it
// gets in its subscription's history; a phase is its session between two
// reconnects.
type topicSubscriber struct {
	name string
	conn *client.Connection
	k    *client.Consumer
	h    *history.History
}

func (s *topicSubscriber) consume(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-stop:
			return
		default:
		}
		m, err := s.k.ReceiveTimeout(300 * time.Millisecond)
		if err != nil {
			time.Sleep(50 * time.Millisecond) // reconnecting: what it held comes again, marked
			continue
		}
		if m == nil {
			continue
		}
		r := s.h.Received(fmt.Sprintf("%s/%d", s.name, s.conn.Reconnects()), m)
		s.h.Acked(r, m.Ack())
	}
}

// TestCluster3_TopicSubscriptionsSurviveSIGKILL: three real nodes, a topic
// with a member on each, a durable subscription with one consumer and a
// shared durable one with a consumer on each of the two other nodes.
// Publishers on every node publish (idempotently) while the host of the
// durable subscriber's member is SIGKILLed, restarted, and then the host
// of another of the topic's members. Each subscription's history must
// hold: every publish that succeeded received, nothing acknowledged
// received again, and whatever came again marked redelivered with its
// count, never a second unmarked copy (the shared one's two consumers
// included).
func TestCluster3_TopicSubscriptionsSurviveSIGKILL(t *testing.T) {
	c := newCluster(t)
	c.startAll()
	c.waitSettled(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.admin(0, func(ctx context.Context, a *client.Admin) error {
		_, err := a.CreateTopic(ctx, "kt", client.TopicOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	durable, shared := newHistory(), newHistory()
	subscribe := func(name string, i int, h *history.History, clientID string, sub client.Subscription) *topicSubscriber {
		conn, err := client.Dial(ctx, c.clientAddrs(i), client.Options{ReconnectPolicy: client.ReconnectAll, ClientID: clientID, RequestTimeout: loadRequestTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s, err := conn.Session(client.ClientAck)
		if err != nil {
			t.Fatal(err)
		}
		k, err := s.Subscribe(ctx, "kt", sub)
		if err != nil {
			t.Fatal(err)
		}
		return &topicSubscriber{name: name, conn: conn, k: k, h: h}
	}
	subs := []*topicSubscriber{
		subscribe("audit", 0, durable, "auditor", client.Subscription{Name: "audit", Durable: true}),
		subscribe("work-1", 1, shared, "", client.Subscription{Name: "work", Durable: true, Shared: true}),
		subscribe("work-2", 2, shared, "", client.Subscription{Name: "work", Durable: true, Shared: true}),
	}
	stopConsumers := make(chan struct{})
	var consumers sync.WaitGroup
	for _, s := range subs {
		consumers.Add(1)
		go s.consume(stopConsumers, &consumers)
	}

	stopPublishers := make(chan struct{})
	var publishers sync.WaitGroup
	var published atomic.Int64
	for i := range c.nodes {
		conn, err := client.Dial(ctx, c.clientAddrs(i), client.Options{ReconnectPolicy: client.ReconnectProducer, RequestTimeout: loadRequestTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s, _ := conn.Session(client.AutoAck)
		p, err := s.Publisher("kt")
		if err != nil {
			t.Fatal(err)
		}
		p.SetIdempotent(true)
		publishers.Add(1)
		go func() {
			defer publishers.Done()
			for j := 0; ; j++ {
				select {
				case <-stopPublishers:
					return
				default:
				}
				id := fmt.Sprintf("n%d-%d", i, j)
				durable.Sending(id)
				shared.Sending(id)
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := p.Send(sctx, &client.Message{ID: id, Body: []byte(id)})
				cancel()
				durable.Sent(id, err)
				shared.Sent(id, err)
				if err == nil {
					published.Add(1)
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}

	show := func() client.TopicInfo {
		var info client.TopicInfo
		if err := c.admin(1, func(ctx context.Context, a *client.Admin) (err error) {
			info, err = a.ShowTopic(ctx, "kt")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return info
	}
	kill := func(what, victim string) {
		t.Helper()
		before := published.Load()
		wait.For(t, 30*time.Second, what+": publishes before the kill", func() bool { return published.Load() >= before+200 })
		_, s := c.node(victim)
		s.kill()
		t.Logf("%s: killed %s", what, victim)
		after := published.Load()
		wait.For(t, 30*time.Second, what+": publishes going on without "+victim, func() bool { return published.Load() >= after+100 })
		s.start()
		wait.For(t, 30*time.Second, what+": every topic member hosted after the restart", func() bool {
			for _, m := range show().Members {
				if m.Host == "" {
					return false
				}
			}
			return true
		})
		t.Logf("%s: %s restarted", what, victim)
	}
	first := hostOfMember(t, show(), subs[0].k.Member())
	kill("the durable subscriber's member's host", first)
	var second string
	for _, m := range show().Members {
		if m.Host != "" && m.Host != first {
			second = m.Host
			break
		}
	}
	kill("another topic member's host", second)

	close(stopPublishers)
	publishers.Wait()
	wait.For(t, 90*time.Second, "every subscription drained", func() bool {
		info := show()
		for _, s := range info.Subscriptions {
			if s.Pending+s.Delivered > 0 {
				return false
			}
		}
		return len(info.Subscriptions) == 2
	})
	close(stopConsumers)
	consumers.Wait()
	t.Logf("%d publishes succeeded", published.Load())
	reportHistory(t, durable)
	reportHistory(t, shared)
}

// hostOfMember is the host of the topic's member whose index the
// subscription member name (TOPIC::ID#I) has.
func hostOfMember(t *testing.T, info client.TopicInfo, member string) string {
	t.Helper()
	_, idx, ok := strings.Cut(member, "#")
	if !ok {
		t.Fatalf("member %q has no index", member)
	}
	for _, m := range info.Members {
		if strings.HasSuffix(m.Name, "#"+idx) && m.Host != "" {
			return m.Host
		}
	}
	t.Fatalf("no host for the topic's member %s: %+v", idx, info.Members)
	return ""
}
