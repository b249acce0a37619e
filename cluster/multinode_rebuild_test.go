package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/test/wait"
)

// A damaged replica stops alone and is rebuilt from the others: a node
// whose replica of a member's group holds an entry it cannot apply (the
// same index and term as the leader's, other bytes, as a disk that
// returns wrong data makes), or a configuration entry that does not decode
// (on which hashicorp/raft panics at every start), stays up: the replica
// is stopped, counted and logged, emptied, copied again from the group's
// other replicas, and votes again; the node is ready again; nothing is
// lost and nothing is delivered twice.
func TestCluster_DamagedReplicaIsRebuiltFromTheOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("three nodes, a stop and a restart")
	}
	for _, c := range []struct {
		reason string
		entry  raft.LogType
	}{
		{rebuildEntry, raft.LogCommand},
		{rebuildLog, raft.LogConfiguration},
	} {
		t.Run(c.reason, func(t *testing.T) {
			t.Parallel()
			tc := NewTestCluster(t, 3)
			ctx := testCtx(t)
			meta, victim, op, sent := queueOfThree(t, tc)
			// A member whose host is not the victim, so that stopping
			// the victim changes no term in its group.
			d, _ := tc.Node(meta).meta.Destination("rp")
			var k int
			var host string
			wait.For(t, 20*time.Second, "a member of rp hosted on another node than "+victim, func() bool {
				for i := range d.Members {
					if h := tc.HostOf(fsm.MemberName("rp", uint32(i))); h != "" && h != victim {
						k, host = i, h
						return true
					}
				}
				return false
			})
			name := fsm.MemberName("rp", uint32(k))
			id := groupID(d, uint32(k))
			if g := d.Members[k].Group; g != "" {
				id = g
			}
			key := fsm.GroupKey("rp", d.Members[k])
			dir := filepath.Join(tc.cfgs[tc.index(victim)].DataDir, "members", id, "wal")

			tc.Stop(victim)
			// The leader appends entries the victim does not hold, in
			// the same term; the victim's log gets other bytes at the
			// first of them.
			more := sendN(t, ctx, mustProducer(t, mustSession(t, tc.Dial(host), client.AutoAck), name), "more-", 5)
			appendJunk(t, dir, c.entry)

			tc.Start(victim)
			gs := tc.Node(victim).groups
			wait.For(t, 30*time.Second, victim+" stopping its replica of "+id+" to rebuild it ("+c.reason+")", func() bool {
				_, total := gs.rebuildState()
				return total[c.reason] == 1
			})
			all := tc.IDs()
			wait.Until(t, 60*time.Second, "the rebuilt replica caught up and voting, "+victim+" ready", func() string {
				if now, _ := gs.rebuildState(); now != 0 {
					return fmt.Sprintf("%d replicas being rebuilt", now)
				}
				var rejoining bool
				tc.Node(meta).meta.Read(func(m *fsm.Meta) { rejoining = m.Rejoining(victim, key) })
				if rejoining {
					return victim + " still rejoining " + key
				}
				if msg := placedOn(tc, op, "rp", all, all); msg != "" {
					return msg
				}
				if err := tc.Node(victim).Ready(); err != nil {
					return victim + " not ready: " + err.Error()
				}
				return ""
			})
			if _, total := gs.rebuildState(); total[rebuildEntry]+total[rebuildLog] != 1 {
				t.Fatalf("rebuilds on %s: %v; want one, for the damaged group", victim, total)
			}
			// The rebuilt replica holds what its host holds.
			wait.Until(t, 10*time.Second, "the rebuilt replica of "+name+" holding its host's messages", func() string {
				r, _ := tc.Node(victim).groups.replica(name)
				h, _ := tc.Node(host).groups.replica(name)
				if got, want := r.Stats().Pending, h.Stats().Pending; got != want {
					return fmt.Sprintf("%s holds %d pending; its host %s %d", victim, got, host, want)
				}
				return ""
			})
			every := append(slices.Clone(sent), more...)
			s := mustSession(t, tc.Dial(victim), client.ClientAck)
			sameSet(t, "received after the rebuild", drainMembers(t, s, "rp", len(d.Members), len(every)), every)
		})
	}
}

// appendJunk appends to the stopped replica's raft-wal log in dir one
// entry of type typ, of bytes nothing decodes, at the next index, in the
// term of its last entry: where the leader holds another entry in the
// same term, the replica keeps its own (Raft compares terms only).
func appendJunk(t *testing.T, dir string, typ raft.LogType) {
	t.Helper()
	w, err := wal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	last, err := w.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := w.GetLog(last, &l); err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{{Index: last + 1, Term: l.Term, Type: typ, Data: []byte{0xc1, 0xff, 0x00, 0xc1}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A meta entry a node cannot apply stops its meta replica, not the node:
// it stays up, not ready, saying why, its meta Raft shut down, while the
// two others go on; emptied and started again, it is back in the cluster.
func TestCluster_DamagedMetaReplicaStopsAloneNotTheNode(t *testing.T) {
	if testing.Short() {
		t.Skip("three nodes, a stop and two restarts")
	}
	t.Parallel()
	tc := NewTestCluster(t, 3)
	ctx := testCtx(t)
	var meta string
	wait.For(t, 10*time.Second, "a meta leader", func() bool { meta = tc.MetaLeader(); return meta != "" })
	victim := tc.Others(meta)[1]
	op := tc.Admin(meta)
	tc.Stop(victim)
	if _, err := op.CreateQueue(ctx, "while-down", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	appendJunk(t, filepath.Join(tc.cfgs[tc.index(victim)].DataDir, "meta", "wal"), raft.LogCommand)

	nd := tc.launch(victim)
	wait.Until(t, 30*time.Second, victim+"'s meta replica stopping on the junk entry", func() string {
		if err := nd.Ready(); !errors.Is(err, metagroup.ErrStopped) {
			return fmt.Sprintf("ready: %v; want metagroup.ErrStopped", err)
		}
		if st := nd.meta.Raft().State(); st != raft.Shutdown {
			return "its meta Raft is " + st.String()
		}
		return ""
	})
	if _, err := op.CreateQueue(ctx, "after", client.QueueOptions{}); err != nil {
		t.Fatalf("the two others creating a queue: %v", err)
	}
	p := mustProducer(t, mustSession(t, tc.Dial(meta), client.AutoAck), "after")
	sent := sendN(t, ctx, p, "m", 3)
	sameSet(t, "received from the two others", bodiesOf(recvN(t, mustConsumer(t, ctx, mustSession(t, tc.Dial(meta), client.AutoAck), "after"), 3)), sent)

	tc.Stop(victim)
	if err := os.RemoveAll(tc.cfgs[tc.index(victim)].DataDir); err != nil {
		t.Fatal(err)
	}
	tc.Start(victim)
	if _, ok := tc.Node(victim).meta.Destination("after"); !ok {
		t.Fatalf("%s, emptied and started again, does not know queue after", victim)
	}
}
