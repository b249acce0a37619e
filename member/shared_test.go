package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairnmq/cairn/raftgroup"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
)

// sharedGroup opens a shared group "g" with a replica on each of ids (one
// replica alone when ids has one), in dirs.
func sharedGroup(t testing.TB, ids []string, dirs []string, opts ...func(*Config)) []*Shared {
	t.Helper()
	var peers []raft.Server
	var layers []raft.StreamLayer
	for _, id := range ids {
		layer, addr := loopbackLayer(t, "g")
		peers = append(peers, raft.Server{ID: raft.ServerID(id), Address: addr})
		layers = append(layers, layer)
	}
	var out []*Shared
	for i, id := range ids {
		cfg := Config{Name: "g", GroupID: "g", NodeID: id, Dir: dirs[i], Stream: layers[i], Peers: peers, Timing: raftgroup.TestTiming, ExpiryInterval: 20 * time.Millisecond}
		for _, o := range opts {
			o(&cfg)
		}
		s, err := OpenShared(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// openIn opens member key of the shared group s.
func openIn(t *testing.T, s *Shared, key string) *Replica {
	t.Helper()
	r, err := s.Open(key, Config{Name: key, ExpiryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestShared_MembersOfOneGroupKeepApart(t *testing.T) {
	ctx := context.Background()
	s := sharedGroup(t, []string{"n1"}, []string{t.TempDir()})[0]
	a, b := openIn(t, s, "a#0@1"), openIn(t, s, "b#0@1")
	wait.For(t, 10*time.Second, "both members hosted", func() bool { return a.Leading() && b.Leading() })
	if a.Raft() != b.Raft() || a.Raft() != s.Raft() {
		t.Fatal("the members do not share the group's Raft")
	}
	if _, err := a.Enqueue(ctx, msgs(3, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, msgs(5, "b")); err != nil {
		t.Fatal(err)
	}
	// The same message id in two members is two messages.
	if _, err := b.Enqueue(ctx, msgs(1, "a")); err != nil {
		t.Fatal(err)
	}
	if sa, sb := a.Stats(), b.Stats(); sa.Pending != 3 || sb.Pending != 6 {
		t.Fatalf("pending a %d, b %d; want 3 and 6", sa.Pending, sb.Pending)
	}
	if got := s.Members(); !slices.Equal(got, []string{"a#0@1", "b#0@1"}) {
		t.Fatalf("Members = %v", got)
	}
	if err := a.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	var c collector
	if err := a.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push}, 10); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a's three messages", func() bool { return c.count() == 3 })
	for _, d := range c.deliveries() {
		if d.Message.Id[0] != 'a' {
			t.Fatalf("a's consumer got %s", d.Message.Id)
		}
	}
	if _, _, err := b.Ack(ctx, "s1", []uint64{1}); !errors.Is(err, fsm.ErrUnknownSession) {
		t.Fatalf("b acked a's delivery: %v; want ErrUnknownSession", err)
	}
	if st := b.Stats(); st.Pending != 6 || st.Delivered != 0 {
		t.Fatalf("b after a's deliveries: %+v", st)
	}
}

func TestShared_NewLeaderHostsEveryMember(t *testing.T) {
	ctx := context.Background()
	ids := []string{"n1", "n2", "n3"}
	groups := sharedGroup(t, ids, []string{t.TempDir(), t.TempDir(), t.TempDir()})
	keys := []string{"a#0@1", "b#0@1", "c#0@1"}
	replicas := make([][]*Replica, len(groups))
	for i, s := range groups {
		for _, k := range keys {
			replicas[i] = append(replicas[i], openIn(t, s, k))
		}
	}
	leaderOf := func(skip int) int {
		for i, rs := range replicas {
			if i != skip && !slices.ContainsFunc(rs, func(r *Replica) bool { return !r.Leading() }) {
				return i
			}
		}
		return -1
	}
	wait.For(t, 10*time.Second, "one node hosting every member", func() bool { return leaderOf(-1) >= 0 })
	old := leaderOf(-1)
	for k, r := range replicas[old] {
		if _, err := r.Enqueue(ctx, msgs(k+1, fmt.Sprintf("k%d-", k))); err != nil {
			t.Fatal(err)
		}
	}
	if err := groups[old].Close(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "another node hosting every member", func() bool { return leaderOf(old) >= 0 })
	next := leaderOf(old)
	for k, r := range replicas[next] {
		if st := r.Stats(); st.Pending != k+1 {
			t.Fatalf("member %s on the new host: %d pending, want %d", keys[k], st.Pending, k+1)
		}
		if _, err := r.Enqueue(ctx, msgs(1, "after-")); err != nil {
			t.Fatalf("member %s on the new host: %v", keys[k], err)
		}
	}
}

func TestShared_RestartRestoresEveryMemberFromSnapshotAndLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	small := func(c *Config) { c.SnapshotThreshold, c.BodyMemory = 64, 0 }
	s := sharedGroup(t, []string{"n1"}, []string{dir}, small)[0]
	a, b := openIn(t, s, "a#0@1"), openIn(t, s, "b#0@1")
	wait.For(t, 10*time.Second, "both members hosted", func() bool { return a.Leading() && b.Leading() })
	for i := range 100 {
		if _, err := a.Enqueue(ctx, msgs(1, fmt.Sprintf("a%03d-", i))); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := b.Enqueue(ctx, msgs(1, fmt.Sprintf("b%03d-", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.host.snapshot()
	if _, err := b.Enqueue(ctx, msgs(1, "last")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = sharedGroup(t, []string{"n1"}, []string{dir}, small)[0]
	a, b = openIn(t, s, "a#0@1"), openIn(t, s, "b#0@1")
	wait.For(t, 10*time.Second, "both members hosted again", func() bool { return a.Leading() && b.Leading() })
	if sa, sb := a.Stats(), b.Stats(); sa.Pending != 100 || sb.Pending != 51 {
		t.Fatalf("after the restart a holds %d, b %d; want 100 and 51", sa.Pending, sb.Pending)
	}
	if n := s.Raft().Stats()["last_snapshot_index"]; n == "0" {
		t.Fatal("no snapshot was taken")
	}
	// Bodies put away come back with the deliveries.
	if err := b.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	var c collector
	if err := b.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push}, 100); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "b's messages", func() bool { return c.count() == 51 })
	for _, d := range c.deliveries() {
		if string(d.Message.Body) != "body" {
			t.Fatalf("%s delivered with body %q", d.Message.Id, d.Message.Body)
		}
	}
}

func TestShared_DestroyDropsOnlyThatMember(t *testing.T) {
	ctx := context.Background()
	s := sharedGroup(t, []string{"n1"}, []string{t.TempDir()})[0]
	a, b := openIn(t, s, "a#0@1"), openIn(t, s, "b#0@1")
	wait.For(t, 10*time.Second, "both members hosted", func() bool { return a.Leading() && b.Leading() })
	if _, err := a.Enqueue(ctx, msgs(2, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, msgs(2, "b")); err != nil {
		t.Fatal(err)
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := s.Members(); !slices.Equal(got, []string{"b#0@1"}) {
		t.Fatalf("Members after destroying a = %v", got)
	}
	if _, err := a.Enqueue(ctx, msgs(1, "x")); err == nil {
		t.Fatal("a destroyed replica took a send")
	}
	if st := b.Stats(); st.Pending != 2 {
		t.Fatalf("b after a's destroy: %+v", st)
	}
	if _, err := s.Open("a#0@1", Config{Name: "a#0@1"}); err != nil {
		t.Fatalf("opening the key again: %v", err)
	}
	if _, err := s.Open("b#0@1", Config{Name: "b#0@1"}); err == nil {
		t.Fatal("a key opened twice")
	}
}

// The group's one timer runs each hosted member's expiry; a member that
// holds nothing is left alone.
func TestShared_LeaderExpiresTheMessagesOfEachMember(t *testing.T) {
	ctx := context.Background()
	s := sharedGroup(t, []string{"n1"}, []string{t.TempDir()})[0]
	a, b := openIn(t, s, "a#0@1"), openIn(t, s, "b#0@1")
	wait.For(t, 10*time.Second, "both members hosted", func() bool { return a.Leading() && b.Leading() })
	soon := time.Now().Add(50 * time.Millisecond).UnixNano()
	m := msgs(2, "a")
	m[0].Expiration = soon
	if _, err := a.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a's expired message removed", func() bool { return a.Stats().Pending == 1 })
	if !b.idle() || a.idle() {
		t.Fatalf("idle: a %v, b %v; want a busy and b idle", a.idle(), b.idle())
	}
}
