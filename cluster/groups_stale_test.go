package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/cairnmq/cairn/client"
)

// A member that stays in its shared group after its destination is gone
// (its group changed leaders between the delete and the drop) is dropped
// by the group's leader, with what it holds; a placed member is not.
func TestGroups_LeaderDropsAMemberNoDestinationPlaces(t *testing.T) {
	// Long enough for the wait below to see the ghost before it goes.
	grace := staleGrace
	staleGrace = 3 * time.Second
	t.Cleanup(func() { staleGrace = grace })
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "kept", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	// On its preferred host, whose leadership then stays: the ghost below
	// joins the group only through the replica that leads it.
	host := tc.WaitSpread("kept", 1)[0]
	r, ok := tc.Node(host).groups.replica("kept#0")
	if !ok || r.Shared() == nil {
		t.Fatalf("%s holds no replica of kept#0 in a shared group", host)
	}
	s := r.Shared()
	kept := s.Members()

	// A member the group's state holds and no destination places: opened
	// by hand on the leader, which adds it as it takes over, and closed
	// without being destroyed, as a replica whose group changed leaders
	// before it was.
	cfg := tc.Node(host).replicaConfig()
	cfg.Name = "ghost#0"
	ghost, err := s.Open("ghost#0@gone", cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the ghost in the group", func() bool { return slices.Contains(s.Members(), "ghost#0@gone") })
	if err := ghost.Close(); err != nil {
		t.Fatal(err)
	}
	tc.Node(host).groups.poke()
	wait.For(t, 20*time.Second, "the ghost dropped", func() bool { return !slices.Contains(s.Members(), "ghost#0@gone") })
	for _, id := range tc.IDs() {
		if rr, ok := tc.Node(id).groups.replica("kept#0"); ok {
			wait.For(t, 10*time.Second, id+" applying the drop", func() bool { return !slices.Contains(rr.Shared().Members(), "ghost#0@gone") })
		}
	}
	if got := s.Members(); !slices.Equal(got, kept) {
		t.Fatalf("members after the drop %v, want %v", got, kept)
	}
}
