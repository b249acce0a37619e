package destination

import (
	"hash/fnv"
	"slices"
)

// Candidate is one member of a destination as the front-end sees it.
type Candidate struct {
	// Index is the member's index in its destination.
	Index int
	// Local is true when the member is hosted on the front-end's node.
	Local bool
	// Available is true when the member has a host that can serve.
	Available bool
	// Draining is true for a member that takes no new sends or consumers
	// (a shrink removes it, or it is renewed).
	Draining  bool
	Pending   int
	Consumers int
}

// open reports whether c may be chosen: hosted and not draining.
func (c Candidate) open() bool { return c.Available && !c.Draining }

// load is pending messages per consumer, compared without division (a/b <
// c/d as a*d < c*b). A member without consumers strands whatever it holds,
// so it counts as more loaded than any member with consumers; among members
// without consumers, the one with fewer pending messages is less loaded.
type load struct{ pending, consumers int }

func loadOf(c Candidate) load { return load{c.Pending, c.Consumers} }

func (a load) less(b load) bool {
	switch {
	case (a.consumers == 0) != (b.consumers == 0):
		return b.consumers == 0
	case a.consumers == 0:
		return a.pending < b.pending
	}
	return a.pending*b.consumers < b.pending*a.consumers
}

// ForSend chooses the member a send goes to: an open member hosted on
// the front-end first (server affinity), then the one with the fewest
// pending messages per consumer, so sends go where consumers are. Among
// equals, rotation picks one, so equal members share the sends. It returns
// false if none is available.
func ForSend(cands []Candidate, rotation uint64) (int, bool) {
	return choose(cands, rotation, func(a, b load) bool { return a.less(b) })
}

// ForConsumer chooses the member a consumer is pinned to: an open member
// hosted on the front-end first, then the most loaded one, where a
// new consumer is most needed: a member without consumers first (the most
// pending of them), then the most pending messages per consumer.
func ForConsumer(cands []Candidate, rotation uint64) (int, bool) {
	return choose(cands, rotation, func(a, b load) bool { return b.less(a) })
}

func choose(cands []Candidate, rotation uint64, better func(a, b load) bool) (int, bool) {
	best := -1
	bestLocal := false
	var bestLoad load
	n := len(cands)
	for k := range n {
		// Starting the scan at the rotation makes the first of equals vary.
		i := int((rotation + uint64(k)) % uint64(n))
		c := cands[i]
		if !c.open() {
			continue
		}
		l := loadOf(c)
		if best < 0 || (c.Local && !bestLocal) || (c.Local == bestLocal && better(l, bestLoad)) {
			best, bestLocal, bestLoad = i, c.Local, l
		}
	}
	if best < 0 {
		return 0, false
	}
	return cands[best].Index, true
}

// ForMove chooses the member that the messages a member from holds move
// to: another open member, the least loaded; while from drains any will
// do, otherwise (messages stranded without consumers) only one with
// consumers. It returns false if none qualifies.
func ForMove(cands []Candidate, from int, rotation uint64) (int, bool) {
	draining := from >= 0 && from < len(cands) && cands[from].Draining
	others := slices.Clone(cands)
	for i := range others {
		others[i].Available = others[i].Available && i != from && (draining || others[i].Consumers > 0)
	}
	return ForSend(others, rotation)
}

// ForSendAny is ForSend's choice or, when no member has a host now (an
// election, a restart), any member not draining: for a command that then
// waits for its member's host.
func ForSendAny(cands []Candidate, rotation uint64) int {
	if i, ok := ForSend(cands, rotation); ok {
		return i
	}
	return anyMember(cands, nil, rotation)
}

// Pin is the member a new consumer is pinned to: ForConsumer's choice, or,
// when no member has a host now (an election, a restart), any member not
// draining; the consumer then waits for its host.
func Pin(cands []Candidate, rotation uint64) int {
	if i, ok := ForConsumer(cands, rotation); ok {
		return i
	}
	return anyMember(cands, nil, rotation)
}

// anyMember is the choice when no member has a host now: one not failed,
// not draining if it can, in rotation from start; the command then waits
// for its host. failed may be nil.
func anyMember(cands []Candidate, failed []bool, start uint64) int {
	n := uint64(len(cands))
	fallback := -1
	for k := range n {
		i := int((start + k) % n)
		switch {
		case failed != nil && failed[i]:
		case !cands[i].Draining:
			return cands[i].Index
		case fallback < 0:
			fallback = cands[i].Index
		}
	}
	return max(fallback, 0)
}

// DedupMember is the member, among those not draining, that a dedup id
// names; -1 if every member drains. It depends only on the id and the
// members, so every node names the same one: a client that lost its
// front-end mid-send resends through another node, and only the same
// member's dedup window can drop the copy.
func DedupMember(cands []Candidate, dedupID string) int {
	var open []int
	for _, c := range cands {
		if !c.Draining {
			open = append(open, c.Index)
		}
	}
	if len(open) == 0 {
		return -1
	}
	h := fnv.New64a()
	h.Write([]byte(dedupID))
	return open[h.Sum64()%uint64(len(open))]
}
