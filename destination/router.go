// Package destination is the distributed-destination router's policy: which
// member of a destination a send goes to, and which member a consumer is
// pinned to. It decides from a snapshot of the members (where each is
// hosted, how many messages wait, how many consumers it has) and holds no
// state of its own, so the same inputs always give the same choice.
//
// It does not send or retry; the front-end (package cluster) calls it,
// carries out the choice, and asks again with the failed member marked
// unavailable.
package destination

// Candidate is one member of a destination as the front-end sees it.
type Candidate struct {
	// Index is the member's index in its destination.
	Index int
	// Local is true when the member is hosted on the front-end's node.
	Local bool
	// Available is true when the member has a host that can serve.
	Available bool
	Pending   int
	Consumers int
}

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

// ForSend chooses the member a send goes to: an available member hosted on
// the front-end first (server affinity), then the one with the fewest
// pending messages per consumer, so sends go where consumers are. Among
// equals, rotation picks one, so equal members share the sends. It returns
// false if none is available.
func ForSend(cands []Candidate, rotation uint64) (int, bool) {
	return choose(cands, rotation, func(a, b load) bool { return a.less(b) })
}

// ForConsumer chooses the member a consumer is pinned to: an available
// member hosted on the front-end first, then the most loaded one, where a
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
		if !c.Available {
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
