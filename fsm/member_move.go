package fsm

import (
	"fmt"

	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// target returns the index plus one that records use for a move target.
func (m *Member) target(addr string) uint32 {
	if i, ok := m.targetIndex[addr]; ok {
		return i
	}
	m.targets = append(m.targets, addr)
	i := uint32(len(m.targets))
	m.targetIndex[addr] = i
	return i
}

// targetOf is the member a message moves to, "" if none.
func (m *Member) targetOf(rec *record) string {
	if rec.movingTo == 0 {
		return ""
	}
	return m.targets[rec.movingTo-1]
}

func (m *Member) move(c *fsmpb.Move) Result {
	if _, i, err := ParseAddress(c.Target); err != nil || i < 0 {
		return Result{Err: fmt.Errorf("%w: move target %q is not a member address", ErrMalformed, c.Target)}
	}
	var res Result
	for _, id := range c.MessageIds {
		r := m.find(id)
		if r == 0 {
			continue
		}
		rec := m.rec(r)
		switch {
		case c.Retarget:
			if rec.movingTo != 0 && m.targetOf(rec) != c.Target {
				rec.movingTo = m.target(c.Target)
				res.Moved++
			}
			continue
		case rec.session != 0 || rec.availableAt != 0 || rec.movingTo != 0:
			continue
		case rec.has(flagDead):
			m.aside.Delete(seqItem(r, rec))
		default:
			m.popPending(r, rec)
		}
		rec.movingTo = m.target(c.Target)
		m.aside.ReplaceOrInsert(seqItem(r, rec))
		res.Moved++
	}
	return res
}

func (m *Member) moved(c *fsmpb.Moved) Result {
	var res Result
	for _, id := range c.MessageIds {
		if r := m.find(id); r != 0 && m.rec(r).movingTo != 0 {
			if m.rec(r).has(flagDead) {
				m.deadLettered++
			} else {
				m.counted.Moved++
			}
			m.remove(r)
			res.Removed++
		}
	}
	return res
}

func (m *Member) wake(c *fsmpb.Wake) Result {
	var due []item
	m.delayed.Ascend(func(it item) bool {
		if it.at > c.Now {
			return false
		}
		due = append(due, it)
		return true
	})
	for _, it := range due {
		m.delayed.Delete(it)
		rec := m.rec(it.r)
		rec.availableAt = 0
		m.pushPending(it.r, rec)
	}
	return Result{Returned: len(due)}
}

func (m *Member) seal(c *fsmpb.Seal) Result {
	m.sealed = c.Sealed
	return Result{Held: m.records.live, Watermark: m.nextDelivery}
}
