package fsm_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// txWatch is what the transaction property test knows of one prepared
// transaction: the ids it sends and the messages it acknowledges.
type txWatch struct {
	sends []string
	acks  []string
}

// Random interleavings of sends, deliveries, acknowledgements, recovers,
// releases, wakes, prepares and decisions (recorded or not), on a member with
// random redelivery settings, with snapshots taken and restored on the way.
// After every step: the counts agree with the queries; a prepared
// transaction's sends are not stored and its acknowledged messages are held
// by it; a committed transaction's sends are all stored and its acknowledged
// messages all gone; a rolled-back one's sends are never stored and its
// acknowledged messages are all back, marked redelivered, pending, delayed or
// dead as the settings say, and come again with their delivery count raised;
// and no message is ever lost: each one stored is stored until acknowledged.
func TestProperty_Transactions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := newMember(t)
		f.open("s1", "s2")
		settings := fsm.DefaultSettings()
		settings.MaxDeliveries = rapid.Uint32Range(0, 3).Draw(t, "max deliveries")
		if rapid.Bool().Draw(t, "redelivery delay") {
			settings.RedeliveryDelayNs = rapid.Int64Range(1, 4).Draw(t, "delay")
			settings.RedeliveryBackoff = rapid.Uint32Range(0, 3).Draw(t, "backoff")
			// A backed-off delay is capped, so that it stays small however
			// often a message comes back.
			if settings.RedeliveryBackoff > 1 || rapid.Bool().Draw(t, "capped") {
				settings.RedeliveryMaxDelayNs = 10
			}
		}
		f.ok(&fsmpb.Configure{Settings: settings})
		stored := map[string]bool{}       // stored now, as the test knows
		prepared := map[string]*txWatch{} // prepared, by tx id
		gone := map[string]bool{}         // acknowledged, never to come back
		dropped := map[string]bool{}      // sent by a rolled-back transaction, never to be stored
		counts := map[string]uint32{}     // the delivery count of each message's last delivery
		// Acknowledged by a rolled-back transaction, with the count of the
		// delivery it acknowledged, until delivered again.
		rolledBack := map[string]uint32{}
		next, txs := 0, 0
		now := int64(1)
		newID := func() string { next++; return fmt.Sprint("m", next) }
		deliveries := func(session string) []uint64 {
			var ids []uint64
			for _, d := range f.m.SessionDeliveries(session) {
				if st, _ := f.m.Lookup(d.Message.Id); st.Tx == "" {
					ids = append(ids, d.DeliveryID)
				}
			}
			return ids
		}
		idOf := func(session string, delivery uint64) string {
			for _, d := range f.m.SessionDeliveries(session) {
				if d.DeliveryID == delivery {
					return d.Message.Id
				}
			}
			return ""
		}
		session := rapid.SampledFrom([]string{"s1", "s2"})
		t.Repeat(map[string]func(*rapid.T){
			"send": func(t *rapid.T) {
				id := newID()
				f.enqueue(now, msg(id))
				stored[id] = true
			},
			"deliver": func(t *rapid.T) {
				ids := allPending(f.m)
				if len(ids) == 0 {
					t.Skip("nothing pending")
				}
				for _, d := range f.deliver(session.Draw(t, "session"), now, ids[:rapid.IntRange(1, len(ids)).Draw(t, "n")]...) {
					id := d.Message.Id
					if d.DeliveryCount != counts[id]+1 {
						t.Fatalf("%s delivered with count %d; its last delivery had %d", id, d.DeliveryCount, counts[id])
					}
					if c, ok := rolledBack[id]; ok && (!d.Redelivered || d.DeliveryCount <= c) {
						t.Fatalf("%s, back from a rollback with count %d, delivered again as %+v", id, c, d)
					}
					counts[id] = d.DeliveryCount
					delete(rolledBack, id)
				}
			},
			"wake": func(t *rapid.T) { f.ok(&fsmpb.Wake{Now: now}) },
			"ack": func(t *rapid.T) {
				s := session.Draw(t, "session")
				ds := deliveries(s)
				if len(ds) == 0 {
					t.Skip("nothing delivered")
				}
				d := rapid.SampledFrom(ds).Draw(t, "delivery")
				id := idOf(s, d)
				f.ok(&fsmpb.Ack{Session: s, DeliveryIds: []uint64{d}})
				delete(stored, id)
				gone[id] = true
			},
			"recover": func(t *rapid.T) { f.ok(&fsmpb.Recover{Session: session.Draw(t, "session"), Now: now}) },
			"release and reopen": func(t *rapid.T) {
				s := session.Draw(t, "session")
				f.ok(&fsmpb.Release{Session: s, Now: now})
				f.open(s)
			},
			"prepare": func(t *rapid.T) {
				s := session.Draw(t, "session")
				txs++
				tx := fmt.Sprint("t", txs)
				w := &txWatch{}
				var sends []*fsmpb.Message
				for range rapid.IntRange(0, 3).Draw(t, "sends") {
					id := newID()
					w.sends = append(w.sends, id)
					sends = append(sends, msg(id))
				}
				var acks []uint64
				for _, d := range deliveries(s) {
					if rapid.Bool().Draw(t, "ack it") {
						acks = append(acks, d)
						w.acks = append(w.acks, idOf(s, d))
					}
				}
				if rapid.Bool().Draw(t, "a delivery not the session's") {
					acks = append(acks, 1<<40)
				}
				onePhase := rapid.Bool().Draw(t, "one phase")
				before := state(t, f.m)
				r := f.do(&fsmpb.TxPrepare{Tx: tx, Primary: "q#0", Session: s, Now: now, Messages: sends, DeliveryIds: acks, OnePhase: onePhase})
				switch {
				case slices.Contains(acks, 1<<40):
					mustErr(t, r.Err, fsm.ErrTxRefused, "prepare with a foreign delivery")
					sameState(t, f.m, before, "a refused prepare")
				case r.Err != nil:
					t.Fatalf("prepare: %v", r.Err)
				case onePhase:
					applyDecision(w, true, stored, gone)
				default:
					prepared[tx] = w
				}
			},
			"decide": func(t *rapid.T) {
				if len(prepared) == 0 {
					t.Skip("nothing prepared")
				}
				tx := rapid.SampledFrom(slices.Sorted(mapKeys(prepared))).Draw(t, "tx")
				commit := rapid.Bool().Draw(t, "commit")
				r := f.ok(&fsmpb.TxDecide{Tx: tx, Commit: commit, Record: rapid.Bool().Draw(t, "record"), Now: now})
				if r.Committed != commit {
					t.Fatalf("decide %v: result says committed %v", commit, r.Committed)
				}
				w := prepared[tx]
				delete(prepared, tx)
				if !commit {
					// The sends are dropped; each acknowledged message is
					// returned as a recover returns it: its delivery counts.
					for _, id := range w.sends {
						if _, ok := f.m.Lookup(id); ok {
							t.Fatalf("%s, sent by rolled-back %s, is stored", id, tx)
						}
						dropped[id] = true
					}
					for _, id := range w.acks {
						st, want := f.lookup(id), waitAfterReturn(settings, counts[id], now)
						if !st.Redelivered || st.DeliveryCount != counts[id] || st.Tx != "" || st.Session != "" ||
							st.Pending != want.Pending || st.AvailableAt != want.AvailableAt || st.Dead != want.Dead {
							t.Fatalf("%s after rollback: %+v; want redelivered, count %d, pending %v, available at %d, dead %v",
								id, st, counts[id], want.Pending, want.AvailableAt, want.Dead)
						}
						rolledBack[id] = counts[id]
					}
				}
				applyDecision(w, commit, stored, gone)
			},
			"snapshot": func(t *rapid.T) {
				b := snapshotBytes(t, f.m)
				r := restore(t, b)
				if !bytes.Equal(state(t, f.m), state(t, r)) {
					t.Fatal("restored state differs")
				}
				f.m = r
			},
			"": func(t *rapid.T) {
				now++
				checkCounts(t, f.m)
				for tx, w := range prepared {
					for _, id := range w.sends {
						if _, ok := f.m.Lookup(id); ok {
							t.Fatalf("%s, sent by prepared %s, is stored", id, tx)
						}
					}
					for _, id := range w.acks {
						if st := f.lookup(id); st.Tx != tx {
							t.Fatalf("%s, acknowledged by prepared %s, is %+v", id, tx, st)
						}
					}
				}
				for id := range stored {
					if _, ok := f.m.Lookup(id); !ok {
						t.Fatalf("%s was lost", id)
					}
				}
				for id := range gone {
					if _, ok := f.m.Lookup(id); ok {
						t.Fatalf("%s was acknowledged and is stored", id)
					}
				}
				for id := range dropped {
					if _, ok := f.m.Lookup(id); ok {
						t.Fatalf("%s was sent by a rolled-back transaction and is stored", id)
					}
				}
				if st := f.m.Stats(); st.Prepared != preparedCount(prepared) {
					t.Fatalf("Stats().Prepared = %d; the test holds %d", st.Prepared, preparedCount(prepared))
				}
			},
		})
	})
}

func applyDecision(w *txWatch, commit bool, stored, gone map[string]bool) {
	if !commit {
		return
	}
	for _, id := range w.sends {
		stored[id] = true
	}
	for _, id := range w.acks {
		delete(stored, id)
		gone[id] = true
	}
}

// waitAfterReturn is where a message delivered count times waits once
// returned at now: dead once delivered max_deliveries times, else delayed by
// delay·backoff^(count-1) (capped) when there is a delay, else pending.
func waitAfterReturn(st *fsmpb.MemberSettings, count uint32, now int64) fsm.MessageState {
	switch {
	case st.MaxDeliveries > 0 && count >= st.MaxDeliveries:
		return fsm.MessageState{Dead: true}
	case st.RedeliveryDelayNs > 0:
		d := st.RedeliveryDelayNs
		for i := uint32(1); i < count && st.RedeliveryBackoff > 1; i++ {
			if st.RedeliveryMaxDelayNs > 0 && d >= st.RedeliveryMaxDelayNs {
				break
			}
			d *= int64(st.RedeliveryBackoff)
		}
		if st.RedeliveryMaxDelayNs > 0 {
			d = min(d, st.RedeliveryMaxDelayNs)
		}
		return fsm.MessageState{AvailableAt: now + d}
	}
	return fsm.MessageState{Pending: true}
}

func preparedCount(p map[string]*txWatch) int {
	n := 0
	for _, w := range p {
		n += len(w.sends) + len(w.acks)
	}
	return n
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
