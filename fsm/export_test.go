package fsm

// DecodeEnqueueAliasing exposes the aliasing decoder to the tests, which
// hold it to proto.Unmarshal.
var DecodeEnqueueAliasing = decodeEnqueueAliasing

// NarrowIDHash makes m's id hash keep only the bits of mask, so that its
// ids collide: the tests' way to reach the index's second map. It indexes
// again the ids m holds.
func NarrowIDHash(m *Member, mask uint64) {
	m.ids.mask = mask
	m.ids.remake()
	for r := ref(1); uint32(r) <= m.records.used; r++ {
		if m.rec(r).has(flagLive) {
			m.index(m.idOf(r), r)
		}
	}
}

// DecodeStoredByHand exposes the hand decoder of snapshot records, which
// must know every field this build writes.
var DecodeStoredByHand = decodeStoredByHand
