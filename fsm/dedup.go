package fsm

// dedupWindow remembers duplicate-detection ids for a time and up to a
// count, oldest first out. Time is the leader's, carried in each Enqueue, so
// every replica forgets the same ids at the same entry.
type dedupWindow struct {
	byID map[string]*dedupRecord
	// order is a FIFO of records by arrival; head is its first live slot.
	order []*dedupRecord
	head  int
}

type dedupRecord struct {
	dedupID, messageID string
	at                 int64
}

func newDedupWindow() dedupWindow {
	return dedupWindow{byID: make(map[string]*dedupRecord)}
}

func (w *dedupWindow) len() int { return len(w.order) - w.head }

// lookup finds a remembered id still inside the window at now.
func (w *dedupWindow) lookup(dedupID string, now, window int64) (string, bool) {
	r, ok := w.byID[dedupID]
	if !ok || (window > 0 && r.at <= now-window) {
		return "", false
	}
	return r.messageID, true
}

func (w *dedupWindow) add(dedupID, messageID string, now int64, maxIDs int) {
	if maxIDs <= 0 {
		return
	}
	w.trim(maxIDs - 1)
	r := &dedupRecord{dedupID: dedupID, messageID: messageID, at: now}
	w.byID[dedupID] = r
	w.order = append(w.order, r)
}

// evict forgets the ids older than the window at now.
func (w *dedupWindow) evict(now, window int64) {
	for w.len() > 0 && window > 0 && w.order[w.head].at <= now-window {
		w.popOldest()
	}
}

// trim forgets the oldest ids until at most maxIDs remain.
func (w *dedupWindow) trim(maxIDs int) {
	for w.len() > max(maxIDs, 0) {
		w.popOldest()
	}
}

func (w *dedupWindow) popOldest() {
	r := w.order[w.head]
	w.order[w.head] = nil
	w.head++
	// A record may have been replaced by a newer one with the same id.
	if w.byID[r.dedupID] == r {
		delete(w.byID, r.dedupID)
	}
	// Compact once the dead prefix is the larger half, so memory stays bounded.
	if w.head > 1024 && w.head*2 > len(w.order) {
		w.order = append([]*dedupRecord(nil), w.order[w.head:]...)
		w.head = 0
	}
}

// records lists the remembered ids, oldest first.
func (w *dedupWindow) records() []*dedupRecord { return w.order[w.head:] }

// forget drops dedupID if it still names messageID (a transaction that
// recorded it was rolled back). Its record keeps its place in order, with
// no message, until it ages out, so every replica and every snapshot of
// the window counts the same records.
func (w *dedupWindow) forget(dedupID, messageID string) {
	if r := w.byID[dedupID]; r != nil && r.messageID == messageID {
		delete(w.byID, dedupID)
		r.messageID = ""
	}
}
