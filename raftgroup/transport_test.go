package raftgroup

import (
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/transport/raftmux"
)

// fakeInner is a transport whose incoming RPCs the test feeds.
type fakeInner struct {
	raftTransport
	in chan raft.RPC
}

func (f fakeInner) Consumer() <-chan raft.RPC { return f.in }

func TestGroupTransport_NoVoteWithoutConfiguration(t *testing.T) {
	inner := fakeInner{in: make(chan raft.RPC)}
	g := newGroupTransport(inner, nil)
	defer g.stopWaiting()
	configured := false
	f := func() bool { return configured }
	g.configured.Store(&f)
	ask := func(cmd any) raft.RPCResponse {
		resp := make(chan raft.RPCResponse, 1)
		inner.in <- raft.RPC{Command: cmd, RespChan: resp}
		select {
		case r := <-resp:
			return r
		case rpc := <-g.Consumer():
			return raft.RPCResponse{Response: rpc.Command}
		}
	}
	if r, ok := ask(&raft.RequestVoteRequest{Term: 7}).Response.(*raft.RequestVoteResponse); !ok || r.Granted || r.Term != 7 {
		t.Fatalf("vote request without a configuration: %+v, want refused at term 7", r)
	}
	if r, ok := ask(&raft.RequestPreVoteRequest{Term: 7}).Response.(*raft.RequestPreVoteResponse); !ok || r.Granted || r.Term != 7 {
		t.Fatalf("pre-vote request without a configuration: %+v, want refused at term 7", r)
	}
	if _, ok := ask(&raft.AppendEntriesRequest{Term: 7}).Response.(*raft.AppendEntriesRequest); !ok {
		t.Fatal("an append without a configuration did not reach Raft")
	}
	configured = true
	if _, ok := ask(&raft.RequestVoteRequest{Term: 8}).Response.(*raft.RequestVoteRequest); !ok {
		t.Fatal("a vote request with a configuration did not reach Raft")
	}
}

// logFSM keeps the commands applied, in order.
type logFSM struct {
	mu  sync.Mutex
	log []string
}

func (f *logFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, string(l.Data))
	return nil
}

func (f *logFSM) has(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.log, s)
}

func (f *logFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, raft.ErrNothingNewToSnapshot }
func (f *logFSM) Restore(io.ReadCloser) error         { return nil }

// The danger the refusal removes: n1 leads and commits E with n2 while n3
// is down; n1 stops; n2 comes back with an empty data directory, still a
// voter to the others; n3, which lacks E, campaigns. Granted n2's vote it
// would lead, and E would be lost once n1 came back and followed it.
// Refused, no leader is elected until n1 is back, and E stays.
func TestOpenRaft_AVoterBackEmptyElectsNoOneWithoutTheLog(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	var mu sync.Mutex
	addrs := map[string]raft.ServerAddress{}
	layers := map[string]raft.StreamLayer{}
	muxes := map[string]*raftmux.Mux{}
	// fresh gives id a new listener, so that nothing sent to it while it
	// was down waits there for it.
	fresh := func(id string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mux := raftmux.New(ln, nil, nil, nil)
		l, err := mux.Layer("g")
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		layers[id], addrs[id], muxes[id] = l, raft.ServerAddress(ln.Addr().String()), mux
		mu.Unlock()
	}
	for _, id := range ids {
		fresh(id)
	}
	var peers []raft.Server
	for _, id := range ids {
		peers = append(peers, raft.Server{ID: raft.ServerID(id), Address: addrs[id]})
	}
	provider := addressFunc(func(id raft.ServerID) (raft.ServerAddress, error) {
		mu.Lock()
		defer mu.Unlock()
		return addrs[string(id)], nil
	})
	dirs := map[string]string{}
	groups := map[string]*Group{}
	fsms := map[string]*logFSM{}
	open := func(id string, bootstrap bool) {
		t.Helper()
		if dirs[id] == "" {
			dirs[id] = t.TempDir()
		} else {
			fresh(id)
		}
		cfg := Config{Group: "g", NodeID: id, Dir: dirs[id], Stream: layers[id], Timing: TestTiming, Addresses: provider}
		if bootstrap {
			cfg.Peers = peers
		}
		fsms[id] = &logFSM{}
		g, err := Open(cfg, fsms[id])
		if err != nil {
			t.Fatal(err)
		}
		groups[id] = g
	}
	closeGroup := func(id string) {
		if err := groups[id].Close(); err != nil {
			t.Fatal(err)
		}
		delete(groups, id)
		muxes[id].Close()
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
		for _, m := range muxes {
			m.Close()
		}
	})
	for _, id := range ids {
		open(id, true)
	}
	leader := func() string {
		for id, g := range groups {
			if g.Raft.State() == raft.Leader {
				return id
			}
		}
		return ""
	}
	wait.For(t, 10*time.Second, "a leader", func() bool { return leader() != "" })
	if l := leader(); l != "n1" {
		if err := groups[l].Raft.LeadershipTransferToServer("n1", addrs["n1"]).Error(); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "n1 leading", func() bool { return leader() == "n1" })
	if err := groups["n1"].Raft.Apply([]byte("a"), time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a on n3", func() bool { return fsms["n3"].has("a") })
	closeGroup("n3")
	if err := groups["n1"].Raft.Apply([]byte("E"), time.Second).Error(); err != nil {
		t.Fatalf("E not committed by n1 and n2: %v", err)
	}
	closeGroup("n1")
	closeGroup("n2")
	if err := os.RemoveAll(dirs["n2"]); err != nil {
		t.Fatal(err)
	}
	open("n2", false) // back empty: no bootstrap
	open("n3", false)
	wait.For(t, 10*time.Second, "n3 to campaign and be answered", func() bool {
		return groups["n2"].transport.refused.Load() > 0 || leader() != ""
	})
	open("n1", false)
	wait.For(t, 10*time.Second, "a leader", func() bool { return leader() != "" })
	l := leader()
	if err := groups[l].Raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if !fsms[l].has("E") {
		t.Fatalf("leader %s has applied %v: E, committed by n1 and n2, is lost", l, fsms[l].log)
	}
}

type addressFunc func(raft.ServerID) (raft.ServerAddress, error)

func (f addressFunc) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) { return f(id) }
