package cluster

import (
	"fmt"
	"testing"
)

func gossipWith(nodes ...gossipMember) *gossip {
	g := &gossip{nodes: make(map[string]gossipMember)}
	for _, m := range nodes {
		g.nodes[m.ID] = m
	}
	return g
}

func TestGossip_RaftAddrIsTheAnnouncedOne(t *testing.T) {
	t.Parallel()
	g := gossipWith(
		gossipMember{ID: "n1", State: "alive", Meta: nodeMeta{Raft: "10.0.0.1:7652"}},
		gossipMember{ID: "n2", State: "dead", Meta: nodeMeta{Raft: "10.0.0.2:7652"}},
		gossipMember{ID: "n3", State: "alive"},
	)
	for _, c := range []struct {
		id, want string
		ok       bool
	}{
		{"n1", "10.0.0.1:7652", true},
		// A node gossip holds dead keeps its last address: Raft still
		// tries it, and the registry has nothing fresher.
		{"n2", "10.0.0.2:7652", true},
		{"n3", "", false}, // announced no Raft address: ask the registry
		{"n4", "", false},
	} {
		got, ok := g.raftAddr(c.id)
		if got != c.want || ok != c.ok {
			t.Errorf("raftAddr(%s) = %q, %v; want %q, %v", c.id, got, ok, c.want, c.ok)
		}
	}
}

// BenchmarkRaftAddr: hashicorp/raft asks for an address up to three times
// per AppendEntries; "members" is how it was found before raftAddr.
func BenchmarkRaftAddr(b *testing.B) {
	for _, size := range []int{3, 9} {
		var nodes []gossipMember
		for i := range size {
			nodes = append(nodes, gossipMember{ID: fmt.Sprintf("n%d", i+1), State: "alive", Meta: nodeMeta{Raft: fmt.Sprintf("10.0.0.%d:7652", i+1)}})
		}
		g := gossipWith(nodes...)
		b.Run(fmt.Sprintf("lookup/%d-nodes", size), func(b *testing.B) {
			for b.Loop() {
				if _, ok := g.raftAddr("n2"); !ok {
					b.Fatal("n2 not found")
				}
			}
		})
		b.Run(fmt.Sprintf("members/%d-nodes", size), func(b *testing.B) {
			for b.Loop() {
				found := false
				for _, m := range g.members() {
					found = found || m.ID == "n2"
				}
				if !found {
					b.Fatal("n2 not found")
				}
			}
		})
	}
}
