package fsm

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
)

// Group is the state machine of a Raft group shared by several members, of
// one destination or of many: every command names its member
// (Command.member), and each member's commands are applied to it exactly
// as a group of its own would apply them, in log order. AddMember starts an
// empty member, DropMember removes one with all it holds; a command for a
// member the group does not hold is rejected (ErrUnknownMember).
//
// A member's name here is whatever the caller uses to tell members apart
// for good, an incarnation rather than an address: a member dropped and
// added again under the same name starts empty.
type Group struct {
	applied uint64
	members map[string]*Member
	// track: every member tracks its bodies (TrackBodies).
	track bool
	// dropped are the put-away bodies of members dropped since the last
	// DroppedBodies.
	dropped []BodyRef
	// touched names the members the last Apply changed or dropped, each
	// once (in); bytes is the members' bytes together.
	touched []string
	in      map[string]bool
	bytes   int64
	// dirty names the members touched since the last DroppedBodies.
	dirty map[string]bool
	// subs are the subscriptions' members by the topic member they
	// subscribe to, rebuilt from the members' settings when stale.
	subs      map[string][]subscriber
	subsStale bool
}

// subscriber is a subscription's member in the group.
type subscriber struct {
	key string
	m   *Member
	sel *selector.Selector
}

// NewGroup returns a group that holds no member.
func NewGroup() *Group {
	return &Group{members: make(map[string]*Member), in: make(map[string]bool), dirty: make(map[string]bool)}
}

var groupHandlers = func() map[fsmpb.CommandType]handler[*Group] {
	t := make(map[fsmpb.CommandType]handler[*Group])
	// The handlers' apply is unused: Group.Apply needs the command's member.
	on(t, fsmpb.CommandType_COMMAND_TYPE_ADD_MEMBER, func() *fsmpb.AddMember { return new(fsmpb.AddMember) }, nil)
	on(t, fsmpb.CommandType_COMMAND_TYPE_DROP_MEMBER, func() *fsmpb.DropMember { return new(fsmpb.DropMember) }, nil)
	on(t, fsmpb.CommandType_COMMAND_TYPE_PUBLISH, func() *fsmpb.Publish { return new(fsmpb.Publish) }, nil)
	return t
}()

// isGroupCommand reports whether t is a command of the group itself.
func isGroupCommand(t fsmpb.CommandType) bool {
	_, ok := groupHandlers[t]
	return ok
}

// TrackBodies makes every member, present and added later, track its
// bodies (Member.TrackBodies).
func (g *Group) TrackBodies() {
	g.track = true
	for _, m := range g.members {
		m.TrackBodies()
	}
}

// Apply applies the log entry at index and returns one Result per command,
// as Member.Apply does: an entry at or below the last applied index is
// skipped, and an error wraps ErrCorrupt (a command without its member, a
// type no member applies) and means that the entry changed nothing.
func (g *Group) Apply(index uint64, data []byte) ([]Result, error) {
	if index <= g.applied {
		return nil, nil
	}
	e, err := Decode(data)
	if err != nil {
		return nil, err
	}
	members := memberHandlers
	if g.track {
		members = aliasingMemberHandlers
	}
	bodies := make([]proto.Message, len(e.Commands))
	for i, c := range e.Commands {
		if c.Member == "" {
			return nil, fmt.Errorf("%w: command %d (%v) names no member, and this group is shared", ErrCorrupt, i, c.Type)
		}
		h, ok := members[c.Type]
		if !ok {
			h2, ok := groupHandlers[c.Type]
			if !ok {
				return nil, fmt.Errorf("%w: command %d has type %v, which a member group does not apply", ErrCorrupt, i, c.Type)
			}
			bodies[i], err = decodeIn(h2, e.Version, i, c)
		} else {
			bodies[i], err = decodeIn(h, e.Version, i, c)
		}
		if err != nil {
			return nil, err
		}
	}
	results := make([]Result, len(bodies))
	g.touched = g.touched[:0]
	clear(g.in)
	for i, c := range e.Commands {
		results[i] = g.applyOne(c, bodies[i], index, members)
	}
	for _, name := range g.touched {
		if m := g.members[name]; m != nil {
			g.bytes += m.stored
		}
	}
	g.applied = index
	return results, nil
}

// applyOne applies one decoded command of the entry at index.
func (g *Group) applyOne(c *fsmpb.Command, body proto.Message, index uint64, members map[fsmpb.CommandType]handler[*Member]) Result {
	switch c.Type {
	case fsmpb.CommandType_COMMAND_TYPE_ADD_MEMBER:
		// Adding a member held already changes nothing: two leaders in
		// turn may each have proposed it.
		if g.members[c.Member] == nil {
			m := NewMember()
			if g.track {
				m.TrackBodies()
			}
			g.members[c.Member] = m
			g.touch(c.Member, m)
		}
		return Result{}
	case fsmpb.CommandType_COMMAND_TYPE_DROP_MEMBER:
		if m := g.members[c.Member]; m != nil {
			g.touch(c.Member, m)
			g.dropped = append(g.dropped, m.bodiesAway()...)
			delete(g.members, c.Member)
			g.subsStale = true
		}
		return Result{}
	}
	m := g.members[c.Member]
	if m == nil {
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownMember, c.Member)}
	}
	switch c.Type {
	case fsmpb.CommandType_COMMAND_TYPE_PUBLISH:
		return g.publish(c.Member, m, body.(*fsmpb.Publish), index)
	case fsmpb.CommandType_COMMAND_TYPE_TX_PREPARE, fsmpb.CommandType_COMMAND_TYPE_TX_DECIDE:
		if p, ok := body.(*fsmpb.TxPrepare); ok && p.Publish {
			if err := g.admitPublishTx(c.Member, m, p); err != nil {
				return Result{Err: err}
			}
		}
		m.fanOut = func(msgs []*fsmpb.Message, out []Enqueued, now int64) { g.fanOut(c.Member, msgs, out, now, index) }
		defer func() { m.fanOut = nil }()
	}
	g.touch(c.Member, m)
	res := members[c.Type].apply(m, body)
	m.applied = index
	g.subsStale = g.subsStale || c.Type == fsmpb.CommandType_COMMAND_TYPE_CONFIGURE
	return res
}

// touch records that the entry being applied changed member name, m.
func (g *Group) touch(name string, m *Member) {
	if !g.in[name] {
		g.in[name], g.dirty[name] = true, true
		g.touched = append(g.touched, name)
		g.bytes -= m.stored
	}
}

// Applied is the index of the last entry applied.
func (g *Group) Applied() uint64 { return g.applied }

// Touched names the members the last Apply added, changed or dropped
// (a command rejected as for a member the group does not hold touches
// none), in the order first touched; the slice is reused by the next Apply.
func (g *Group) Touched() []string { return g.touched }

// Bytes is what the members hold together (StoredBytes of each).
func (g *Group) Bytes() int64 { return g.bytes }

// Member returns the member of that name, or nil.
func (g *Group) Member(name string) *Member { return g.members[name] }

// Members returns the names of the members the group holds, sorted.
func (g *Group) Members() []string { return slices.Sorted(maps.Keys(g.members)) }

// DroppedBodies returns the bodies that members dropped since the last call
// let go of, for a caller that put them away: a dropped member's are among
// them (Member.DroppedBodies).
func (g *Group) DroppedBodies() []BodyRef {
	var out []BodyRef
	for name := range g.dirty {
		if m := g.members[name]; m != nil {
			out = append(out, m.DroppedBodies()...)
		}
	}
	clear(g.dirty)
	out = append(out, g.dropped...)
	g.dropped = nil
	return out
}

// publish applies messages published to the topic member key (t): the
// topic member's duplicate detection decides which are new, and each
// subscription's member stores the new ones its selector selects. Every
// subscription takes them or none does: each one's admission is checked
// before anything changes. The result is the topic member's: one
// outcome per message.
func (g *Group) publish(key string, t *Member, c *fsmpb.Publish, index uint64) Result {
	out, _, err := t.admit(c.Messages, c.Now)
	if err != nil {
		return Result{Err: err}
	}
	subs, takes, outs, err := g.admitSubscribers(key, c.Messages, out, c.Now)
	if err != nil {
		return Result{Err: err}
	}
	g.touch(key, t)
	t.dedup.evict(c.Now, t.settings.DedupWindowNs)
	for k, msg := range c.Messages {
		if !out[k].Duplicate && msg.DedupId != "" {
			t.dedup.add(msg.DedupId, msg.Id, c.Now, int(t.settings.DedupMaxIds))
		}
	}
	t.applied = index
	for j, s := range subs {
		if len(takes[j]) > 0 {
			g.touch(s.key, s.m)
			s.m.store(takes[j], outs[j], c.Now, false)
			s.m.applied = index
		}
	}
	return Result{Enqueued: out}
}

// admitSubscribers checks that every subscription of the topic member key
// takes the messages its selector selects, but those out marks duplicate;
// it changes nothing and returns the subscribers, what each takes and
// their admissions.
func (g *Group) admitSubscribers(key string, msgs []*fsmpb.Message, out []Enqueued, now int64) ([]subscriber, [][]*fsmpb.Message, [][]Enqueued, error) {
	subs := g.subscribers(key)
	takes := make([][]*fsmpb.Message, len(subs))
	outs := make([][]Enqueued, len(subs))
	var f MessageFields
	for j, s := range subs {
		for k, msg := range msgs {
			if !out[k].Duplicate {
				if f.Reset(msg); s.sel == nil || s.sel.Match(f.Get) {
					takes[j] = append(takes[j], msg)
				}
			}
		}
		if len(takes[j]) == 0 {
			continue
		}
		var err error
		if outs[j], _, err = s.m.admit(takes[j], now); err != nil {
			return nil, nil, nil, fmt.Errorf("subscription member %s: %w", s.key, err)
		}
	}
	return subs, takes, outs, nil
}

// admitPublishTx refuses, before the topic member t prepares it, a
// transaction publishing what a subscription would refuse now (it is
// full, say): a commit must then store it everywhere. A transaction
// prepared or decided already, or one the topic member refuses itself,
// goes on to the member.
func (g *Group) admitPublishTx(key string, t *Member, p *fsmpb.TxPrepare) error {
	if _, decided := t.decisions.byTx[p.Tx]; decided || t.txs[p.Tx] != nil {
		return nil
	}
	out, _, err := t.admit(p.Messages, p.Now)
	if err != nil {
		return nil
	}
	if _, _, _, err := g.admitSubscribers(key, p.Messages, out, p.Now); err != nil {
		return fmt.Errorf("%w: %w", ErrTxRefused, err)
	}
	return nil
}

// fanOut stores a committed transaction's publish to the topic member key
// in each subscription's member that selects them: what the topic member
// did not drop as a duplicate, and the subscription does not hold already.
// A decided commit is not refused: a subscription filled since the
// prepare goes over its limit.
func (g *Group) fanOut(key string, msgs []*fsmpb.Message, out []Enqueued, now int64, index uint64) {
	var f MessageFields
	for _, s := range g.subscribers(key) {
		var take []*fsmpb.Message
		for k, msg := range msgs {
			if out[k].Duplicate || s.m.find(msg.Id) != 0 || s.m.txMsgIDs[msg.Id] != "" {
				continue
			}
			if f.Reset(msg); s.sel == nil || s.sel.Match(f.Get) {
				take = append(take, msg)
			}
		}
		if len(take) > 0 {
			g.touch(s.key, s.m)
			s.m.store(take, make([]Enqueued, len(take)), now, false)
			s.m.applied = index
		}
	}
}

// subscribers are the members subscribed to the topic member key, in key
// order.
func (g *Group) subscribers(key string) []subscriber {
	if g.subsStale || g.subs == nil {
		g.subs = make(map[string][]subscriber)
		for _, k := range g.Members() {
			m := g.members[k]
			st := m.Settings()
			if st.GetSubscribes() == "" {
				continue
			}
			// configure refused a selector that does not parse.
			sel, _ := selector.Parse(st.Selector)
			g.subs[st.Subscribes] = append(g.subs[st.Subscribes], subscriber{key: k, m: m, sel: sel})
		}
		g.subsStale = false
	}
	return g.subs[key]
}
