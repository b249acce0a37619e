package destination

import "testing"

func TestForSend_PrefersLocalThenLeastLoaded(t *testing.T) {
	cands := []Candidate{
		{Index: 0, Available: true, Pending: 0, Consumers: 1},
		{Index: 1, Available: true, Local: true, Pending: 50, Consumers: 1},
		{Index: 2, Available: true, Local: true, Pending: 10, Consumers: 1},
	}
	if got, ok := ForSend(cands, 0); !ok || got != 2 {
		t.Fatalf("ForSend = %d, %v; want the least loaded local member 2", got, ok)
	}
	cands[1].Available, cands[2].Available = false, false
	if got, ok := ForSend(cands, 0); !ok || got != 0 {
		t.Fatalf("with no local member available, ForSend = %d, %v; want 0", got, ok)
	}
}

func TestForSend_LoadIsPendingPerConsumer(t *testing.T) {
	cands := []Candidate{
		{Index: 0, Available: true, Pending: 30, Consumers: 1},
		{Index: 1, Available: true, Pending: 40, Consumers: 4},
	}
	if got, _ := ForSend(cands, 0); got != 1 {
		t.Fatalf("ForSend = %d; want 1 (10 per consumer beats 30)", got)
	}
	if got, _ := ForConsumer(cands, 0); got != 0 {
		t.Fatalf("ForConsumer = %d; want 0 (30 per consumer)", got)
	}
}

func TestForSend_RotatesAmongEquals(t *testing.T) {
	cands := []Candidate{{Index: 0, Available: true}, {Index: 1, Available: true}, {Index: 2, Available: true}}
	seen := map[int]bool{}
	for r := range uint64(3) {
		got, _ := ForSend(cands, r)
		seen[got] = true
	}
	if len(seen) != 3 {
		t.Fatalf("rotation over equal members chose %v; want all three", seen)
	}
}

func TestForSend_NoneAvailable(t *testing.T) {
	if _, ok := ForSend([]Candidate{{Index: 0}}, 0); ok {
		t.Fatal("ForSend chose an unavailable member")
	}
	if _, ok := ForConsumer(nil, 0); ok {
		t.Fatal("ForConsumer chose from no members")
	}
}

func TestForSend_AvoidsMembersWithoutConsumers(t *testing.T) {
	cands := []Candidate{
		{Index: 0, Available: true, Local: true, Pending: 0, Consumers: 0},
		{Index: 1, Available: true, Local: true, Pending: 500, Consumers: 1},
	}
	for r := range uint64(4) {
		if got, _ := ForSend(cands, r); got != 1 {
			t.Fatalf("rotation %d: ForSend = %d; want 1, the member with a consumer", r, got)
		}
	}
	cands[1].Consumers = 0
	if got, _ := ForSend(cands, 1); got != 0 {
		t.Fatalf("with no consumers anywhere, ForSend = %d; want 0, the emptier member", got)
	}
}

func TestForConsumer_PrefersMembersWithoutConsumers(t *testing.T) {
	cands := []Candidate{
		{Index: 0, Available: true, Pending: 100, Consumers: 1},
		{Index: 1, Available: true, Pending: 0, Consumers: 0},
		{Index: 2, Available: true, Pending: 3, Consumers: 0},
	}
	if got, _ := ForConsumer(cands, 0); got != 2 {
		t.Fatalf("ForConsumer = %d; want 2, the member without consumers holding the most", got)
	}
}
