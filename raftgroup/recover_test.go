package raftgroup

import (
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// countFSM counts the commands applied to it.
type countFSM struct{ applied []string }

func (f *countFSM) Apply(l *raft.Log) any {
	f.applied = append(f.applied, string(l.Data))
	return nil
}
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return countSnapshot{}, nil }
func (f *countFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type countSnapshot struct{}

func (countSnapshot) Persist(s raft.SnapshotSink) error { return s.Close() }
func (countSnapshot) Release()                          {}

// Recover drops the log from its first entry the state machine refuses, or
// whose configuration does not decode, replays what is left, and leaves a
// group whose configuration is the servers given, on either log store.
func TestRecover_DropsWhatCannotBeAppliedAndSetsTheVoters(t *testing.T) {
	for _, kind := range []string{LogStoreBolt, LogStoreWAL} {
		for what, junk := range map[string]raft.Log{
			"a command the state machine refuses":  {Type: raft.LogCommand, Data: []byte("junk")},
			"a configuration that does not decode": {Type: raft.LogConfiguration, Data: []byte{0xff, 0x00}},
		} {
			t.Run(kind+"/"+what, func(t *testing.T) {
				dir := t.TempDir()
				s, err := openStore(kind, dir)
				if err != nil {
					t.Fatal(err)
				}
				conf := raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "n1"}, {ID: "n2", Address: "n2"}, {ID: "n3", Address: "n3"}}})
				junk.Index, junk.Term = 4, 1
				logs := []*raft.Log{
					{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: conf},
					{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("a")},
					{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte("b")},
					&junk,
					{Index: 5, Term: 1, Type: raft.LogCommand, Data: []byte("c")},
				}
				if err := s.StoreLogs(logs); err != nil {
					t.Fatal(err)
				}
				s.Close()
				f := &countFSM{}
				sound := func(l *raft.Log) bool { return string(l.Data) != "junk" }
				dropped, err := Recover(Config{Group: "meta", NodeID: "n1", Dir: dir, LogStore: kind}, f, []raft.Server{{ID: "n1", Address: "n1"}}, sound)
				if err != nil {
					t.Fatal(err)
				}
				if dropped != 2 || len(f.applied) != 2 || f.applied[0] != "a" || f.applied[1] != "b" {
					t.Fatalf("dropped %d, applied %q; want 2 dropped, a and b applied", dropped, f.applied)
				}
				s, err = openStore(kind, dir)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				_, trans := raft.NewInmemTransport("n1")
				rc := raft.DefaultConfig()
				rc.LocalID = "n1"
				got, err := raft.GetConfiguration(rc, &countFSM{}, s, s, snaps, trans)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Servers) != 1 || got.Servers[0].ID != "n1" {
					t.Fatalf("configuration after the recovery: %+v; want n1 alone", got)
				}
			})
		}
	}
}
