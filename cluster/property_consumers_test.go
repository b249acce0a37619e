package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/client"
)

// Random sequences of connections on every node, sessions, consumers
// (several per session, of one queue, of its members by name and of
// another queue), receives, acknowledges, recovers, closes of consumers and
// of sessions, and crashes and restarts of a node, through a three-node
// cluster, against a model of who holds each message:
//
//   - a message is in at most one session's hands at a time, and in one
//     consumer's of that session: one that comes while a live session holds
//     it came twice (promise 3);
//   - one that comes again is marked redelivered with a higher count;
//   - one acknowledged never comes again (promise 2);
//   - at the end, with every connection closed, every message sent and
//     never acknowledged comes in the drain (promise 1).
//
// A session's acknowledge and recover act on what all its consumers took;
// closing a consumer leaves what it handed out to its session (JMS). A
// crashed front-end's sessions lose what they held: it may come again,
// marked; a crashed host's members fail over with their deliveries.
func TestProperty_ConsumersOfSessionsAgainstModel(t *testing.T) {
	t.Parallel()
	tc := NewTestCluster(t, 3)
	round := 0
	rapid.Check(t, func(rt *rapid.T) {
		round++
		p := newConsumersProp(t, rt, tc, round)
		defer p.closeAll()
		rt.Repeat(map[string]func(*rapid.T){
			"send":           p.send,
			"send2":          p.send,
			"connect":        p.connect,
			"session":        p.session,
			"consumer":       p.consumer,
			"consumer2":      p.consumer,
			"receive":        p.receive,
			"receive2":       p.receive,
			"receive3":       p.receive,
			"acknowledge":    p.acknowledge,
			"recover":        p.recover,
			"close consumer": p.closeConsumer,
			"close session":  p.closeSession,
			"crash":          p.crash,
		})
		p.drain(rt)
	})
}

// consumersProp is one sequence: its queues, what it opened, and the
// model.
type consumersProp struct {
	t      *testing.T
	tc     *TestCluster
	q, r   string
	dests  []string
	conns  []*propConn
	crashs int
	down   string // a node crashed and not started yet

	sent  map[string]bool // sends that returned ok
	maybe map[string]bool // sends of unknown outcome
	// holder is the session holding each message a consumer handed out
	// and no acknowledge, recover or close took back.
	holder map[string]*propSession
	acked  map[string]bool
	// uncertain: an acknowledge whose outcome is unknown, or held by a
	// session whose connection lost its node: it may come again, marked.
	uncertain map[string]bool
	lastCount map[string]int
}

type propConn struct {
	c          *client.Connection
	reconnects int
	sessions   []*propSession
}

type propSession struct {
	conn      *propConn
	s         *client.Session
	name      string
	consumers []*client.Consumer
	held      map[string]bool
	closed    bool
}

func newConsumersProp(t *testing.T, rt *rapid.T, tc *TestCluster, round int) *consumersProp {
	p := &consumersProp{t: t, tc: tc, q: fmt.Sprintf("pq%d", round), r: fmt.Sprintf("pr%d", round),
		sent: map[string]bool{}, maybe: map[string]bool{}, holder: map[string]*propSession{}, acked: map[string]bool{},
		uncertain: map[string]bool{}, lastCount: map[string]int{}}
	a := tc.Admin(tc.IDs()[0])
	for _, c := range []struct {
		name    string
		members int
	}{{p.q, 2}, {p.r, 1}} {
		if _, err := a.CreateQueue(stepCtx(t, 20*time.Second), c.name, client.QueueOptions{Members: c.members}); err != nil {
			rt.Fatalf("create %s: %v", c.name, err)
		}
		tc.WaitSpread(c.name, c.members)
	}
	p.dests = []string{p.q, p.q + "#0", p.q + "#1", p.r}
	return p
}

func (p *consumersProp) alive() []string {
	return slices.DeleteFunc(p.tc.IDs(), func(id string) bool { return id == p.down })
}

func (p *consumersProp) send(rt *rapid.T) {
	dest := rapid.SampledFrom([]string{p.q, p.q, p.r}).Draw(rt, "send to")
	node := rapid.SampledFrom(p.alive()).Draw(rt, "through")
	n := rapid.IntRange(1, 4).Draw(rt, "messages")
	conn := p.tc.Dial(node)
	defer conn.Close()
	pr := mustProducer(p.t, mustSession(p.t, conn, client.AutoAck), dest)
	pr.SetIdempotent(true)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		r, err := pr.Send(ctx, &client.Message{Body: []byte("x")})
		cancel()
		switch {
		case err == nil:
			p.sent[r.ID] = true
		case errors.Is(err, client.ErrDeliveryUnknown):
			p.maybe[r.ID] = true
		default:
			rt.Fatalf("send to %s through %s: %v", dest, node, err)
		}
	}
}

func (p *consumersProp) connect(rt *rapid.T) {
	if len(p.conns) >= 3 {
		return
	}
	node := rapid.SampledFrom(p.alive()).Draw(rt, "connect to")
	// Every node's address, this one first: a connection whose node dies
	// goes on through another.
	addrs := []string{p.tc.Node(node).Addrs().Client}
	for _, id := range p.alive() {
		if id != node {
			addrs = append(addrs, p.tc.Node(id).Addrs().Client)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addrs, client.Options{ReconnectPolicy: client.ReconnectAll, ReconnectBlockingTime: 20 * time.Second})
	if err != nil {
		rt.Fatalf("dial %s: %v", node, err)
	}
	p.conns = append(p.conns, &propConn{c: c})
}

// sessions are the open sessions; those of connections that lost their
// node since the last look lose what they held first.
func (p *consumersProp) sessions() []*propSession {
	var out []*propSession
	for _, pc := range p.conns {
		if n := pc.c.Reconnects(); n != pc.reconnects {
			pc.reconnects = n
			for _, ps := range pc.sessions {
				p.release(ps, true)
			}
		}
		for _, ps := range pc.sessions {
			if !ps.closed {
				out = append(out, ps)
			}
		}
	}
	return out
}

// release takes back what ps held: it comes again (marked), or, when
// lost, may.
func (p *consumersProp) release(ps *propSession, lost bool) {
	for id := range ps.held {
		delete(p.holder, id)
		if lost {
			p.uncertain[id] = true
		}
	}
	clear(ps.held)
}

func (p *consumersProp) session(rt *rapid.T) {
	if len(p.conns) == 0 {
		return
	}
	pc := rapid.SampledFrom(p.conns).Draw(rt, "connection")
	if len(pc.sessions) >= 2 {
		return
	}
	s, err := pc.c.Session(client.ClientAck)
	if err != nil {
		rt.Fatalf("session: %v", err)
	}
	pc.sessions = append(pc.sessions, &propSession{conn: pc, s: s, name: fmt.Sprintf("session %d.%d", slices.Index(p.conns, pc), len(pc.sessions)), held: map[string]bool{}})
}

func (p *consumersProp) consumer(rt *rapid.T) {
	ss := p.sessions()
	if len(ss) == 0 {
		return
	}
	ps := rapid.SampledFrom(ss).Draw(rt, "session")
	if len(ps.consumers) >= 3 {
		return
	}
	dest := rapid.SampledFrom(p.dests).Draw(rt, "consume from")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k, err := ps.s.Consumer(ctx, dest, client.WithPrefetch(rapid.IntRange(1, 4).Draw(rt, "prefetch")))
	if err != nil {
		rt.Fatalf("consumer of %s: %v", dest, err)
	}
	ps.consumers = append(ps.consumers, k)
}

func (p *consumersProp) receive(rt *rapid.T) {
	var open []*propSession
	for _, ps := range p.sessions() {
		if len(ps.consumers) > 0 {
			open = append(open, ps)
		}
	}
	if len(open) == 0 {
		return
	}
	ps := rapid.SampledFrom(open).Draw(rt, "session")
	i := rapid.IntRange(0, len(ps.consumers)-1).Draw(rt, "consumer")
	m, err := ps.consumers[i].ReceiveTimeout(100 * time.Millisecond)
	switch {
	case err != nil && (errors.Is(err, client.ErrLostServer) || errors.Is(err, client.ErrUnavailable)):
		return // a reconnect: sessions() sees it next
	case err != nil:
		rt.Fatalf("receive from consumer %d of %s: %v", i, ps.name, err)
	case m == nil:
		return
	}
	p.sessions() // a reconnect before this message came releases first
	p.received(rt, ps.name+fmt.Sprintf(" consumer %d", i), m)
	p.holder[m.ID] = ps
	ps.held[m.ID] = true
}

// received checks a message handed out against the model.
func (p *consumersProp) received(rt *rapid.T, by string, m *client.Message) {
	id := m.ID
	if !p.sent[id] && !p.maybe[id] {
		rt.Fatalf("%s got %s, never sent", by, id)
	}
	if p.acked[id] && !p.uncertain[id] {
		rt.Fatalf("promise 2: %s got %s (redelivered %v, count %d) after its acknowledge returned ok", by, id, m.Redelivered, m.DeliveryCount)
	}
	if h := p.holder[id]; h != nil {
		rt.Fatalf("promise 3: %s got %s (redelivered %v, count %d) while %s holds it", by, id, m.Redelivered, m.DeliveryCount, h.name)
	}
	if last, again := p.lastCount[id]; again && (!m.Redelivered || m.DeliveryCount <= last) {
		rt.Fatalf("promise 3: %s got %s again with redelivered %v, count %d (it came before with count %d)", by, id, m.Redelivered, m.DeliveryCount, last)
	}
	p.lastCount[id] = m.DeliveryCount
}

func (p *consumersProp) acknowledge(rt *rapid.T) {
	ss := p.sessions()
	if len(ss) == 0 {
		return
	}
	ps := rapid.SampledFrom(ss).Draw(rt, "session")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := ps.s.Acknowledge(ctx)
	switch {
	case err == nil:
		for id := range ps.held {
			p.acked[id] = true
			delete(p.holder, id)
		}
		clear(ps.held)
	case errors.Is(err, client.ErrLostServer):
		for id := range ps.held {
			p.acked[id] = true
		}
		p.release(ps, true)
	default:
		rt.Fatalf("acknowledge of %s: %v", ps.name, err)
	}
}

func (p *consumersProp) recover(rt *rapid.T) {
	ss := p.sessions()
	if len(ss) == 0 {
		return
	}
	ps := rapid.SampledFrom(ss).Draw(rt, "session")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := ps.s.Recover(ctx)
	if err != nil && !errors.Is(err, client.ErrLostServer) {
		rt.Fatalf("recover of %s: %v", ps.name, err)
	}
	p.release(ps, err != nil)
}

func (p *consumersProp) closeConsumer(rt *rapid.T) {
	var open []*propSession
	for _, ps := range p.sessions() {
		if len(ps.consumers) > 0 {
			open = append(open, ps)
		}
	}
	if len(open) == 0 {
		return
	}
	ps := rapid.SampledFrom(open).Draw(rt, "session")
	i := rapid.IntRange(0, len(ps.consumers)-1).Draw(rt, "consumer")
	if err := ps.consumers[i].Close(); err != nil {
		rt.Fatalf("close consumer %d of %s: %v", i, ps.name, err)
	}
	// What it handed out stays the session's.
	ps.consumers = slices.Delete(ps.consumers, i, i+1)
}

func (p *consumersProp) closeSession(rt *rapid.T) {
	ss := p.sessions()
	if len(ss) == 0 {
		return
	}
	ps := rapid.SampledFrom(ss).Draw(rt, "session")
	err := ps.s.Close()
	if err != nil && !errors.Is(err, client.ErrLostServer) {
		rt.Fatalf("close %s: %v", ps.name, err)
	}
	ps.closed = true
	p.release(ps, err != nil)
}

// crash kills a node (a front-end, a host, or both) at most once a
// sequence, or starts the one it killed.
func (p *consumersProp) crash(rt *rapid.T) {
	if p.down != "" {
		p.tc.Start(p.down)
		p.tc.WaitReady()
		p.down = ""
		return
	}
	if p.crashs > 0 {
		return
	}
	p.crashs++
	p.down = rapid.SampledFrom(p.tc.IDs()).Draw(rt, "crash")
	p.tc.Crash(p.down)
}

// drain starts a crashed node again, closes every connection (what their
// sessions held comes back), then takes every member's messages and checks
// that nothing sent and never acknowledged is lost.
func (p *consumersProp) drain(rt *rapid.T) {
	if p.down != "" {
		p.tc.Start(p.down)
		p.tc.WaitReady()
		p.down = ""
	}
	p.sessions()
	for _, pc := range p.conns {
		for _, ps := range pc.sessions {
			p.release(ps, false)
		}
		_ = pc.c.Close()
	}
	p.conns = nil
	s := mustSession(p.t, p.tc.Dial(p.tc.IDs()[0]), client.ClientAck)
	defer s.Close()
	var ks []*client.Consumer
	for _, dest := range []string{p.q + "#0", p.q + "#1", p.r + "#0"} {
		ks = append(ks, mustConsumer(p.t, stepCtx(p.t, 20*time.Second), s, dest))
	}
	drained := map[string]bool{}
	a := p.tc.Admin(p.tc.IDs()[0])
	for deadline := time.Now().Add(30 * time.Second); ; {
		got := 0
		for _, k := range ks {
			m, err := k.ReceiveTimeout(100 * time.Millisecond)
			if err != nil {
				rt.Fatalf("drain: %v", err)
			}
			if m != nil {
				got++
				p.received(rt, "the drain", m)
				drained[m.ID] = true
			}
		}
		if got > 0 {
			if err := s.Acknowledge(stepCtx(p.t, 20*time.Second)); err != nil {
				rt.Fatalf("drain's acknowledge: %v", err)
			}
			continue
		}
		qi, err := a.ShowQueue(stepCtx(p.t, 10*time.Second), p.q)
		ri, err2 := a.ShowQueue(stepCtx(p.t, 10*time.Second), p.r)
		if err == nil && err2 == nil && qi.Pending+qi.Delivered+ri.Pending+ri.Delivered == 0 {
			break
		}
		if time.Now().After(deadline) {
			rt.Fatalf("drain: after 30 s %s holds %+v, %s %+v (%v, %v)", p.q, qi, p.r, ri, err, err2)
		}
	}
	for id := range p.sent {
		if !p.acked[id] && !drained[id] {
			rt.Fatalf("promise 1: %s was sent, never acknowledged, and not in the drain", id)
		}
	}
}

func (p *consumersProp) closeAll() {
	for _, pc := range p.conns {
		_ = pc.c.Close()
	}
	if p.down != "" {
		p.tc.Start(p.down)
		p.tc.WaitReady()
	}
}
