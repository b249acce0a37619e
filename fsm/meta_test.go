package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

// meta drives a Meta through Apply with rising indexes.
type meta struct {
	t   *testing.T
	m   *fsm.Meta
	idx uint64
}

func newMeta(t *testing.T) *meta { return &meta{t: t, m: fsm.NewMeta()} }

func (f *meta) do(body proto.Message) fsm.Result {
	f.t.Helper()
	f.idx++
	rs, err := f.m.Apply(f.idx, entry(f.t, body))
	if err != nil || len(rs) != 1 {
		f.t.Fatalf("apply %d: %+v, %v", f.idx, rs, err)
	}
	return rs[0]
}

func (f *meta) ok(body proto.Message) {
	f.t.Helper()
	if r := f.do(body); r.Err != nil {
		f.t.Fatalf("%T rejected: %v", body, r.Err)
	}
}

// metaState is the meta state machine's snapshot bytes.
func metaState(t *testing.T, m *fsm.Meta) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := m.WriteSnapshot(&buf); err != nil {
		t.Fatalf("write meta snapshot: %v", err)
	}
	return buf.Bytes()
}

// withoutApplied is meta snapshot bytes with the applied index zeroed.
func withoutApplied(t *testing.T, b []byte) []byte {
	t.Helper()
	m, err := fsm.RestoreMeta(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Snapshot()
	s.Applied = 0
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dest builds a valid destination with members members and r replicas each.
func dest(name string, members, r int) *fsmpb.Destination {
	d := &fsmpb.Destination{Name: name, Kind: fsmpb.DestinationKind_DESTINATION_KIND_QUEUE, Replicas: uint32(r), CreatedAt: 42}
	for i := range members {
		p := &fsmpb.MemberPlacement{Index: uint32(i)}
		for j := range r {
			p.Replicas = append(p.Replicas, fmt.Sprintf("n%d", (i+j)%5+1))
		}
		d.Members = append(d.Members, p)
	}
	return d
}

func TestCreateDestination_StoresDefinition(t *testing.T) {
	f := newMeta(t)
	q := dest("orders", 3, 3)
	f.ok(&fsmpb.CreateDestination{Destination: q})
	topic := dest("events.all", 1, 1)
	topic.Kind = fsmpb.DestinationKind_DESTINATION_KIND_TOPIC
	topic.Members[0].Group = "events"
	topic.TtlNs, topic.MaxBytes = 1e9, 1<<30
	f.ok(&fsmpb.CreateDestination{Destination: topic})
	got, ok := f.m.Destination("orders")
	if !ok || !proto.Equal(got, q) {
		t.Fatalf("Destination(orders) = %v, %v", got, ok)
	}
	if _, ok := f.m.Destination("nope"); ok {
		t.Fatal("unknown destination found")
	}
	var names []string
	for _, d := range f.m.Destinations() {
		names = append(names, d.GetName())
	}
	if !slices.Equal(names, []string{"events.all", "orders"}) {
		t.Fatalf("Destinations = %v", names)
	}
	if got, _ := f.m.Destination("events.all"); !proto.Equal(got, topic) {
		t.Fatalf("Destination(events.all) = %v", got)
	}
}

func TestCreateDestination_RejectsInvalidAndChangesNothing(t *testing.T) {
	cases := []struct {
		name string
		d    func() *fsmpb.Destination
		want error
	}{
		{"missing", func() *fsmpb.Destination { return nil }, fsm.ErrMalformed},
		{"empty name", func() *fsmpb.Destination { return dest("", 1, 1) }, fsm.ErrInvalidName},
		{"name with a space", func() *fsmpb.Destination { return dest("a b", 1, 1) }, fsm.ErrInvalidName},
		{"member address as name", func() *fsmpb.Destination { return dest("orders#1", 1, 1) }, fsm.ErrInvalidName},
		{"name too long", func() *fsmpb.Destination { return dest(strings.Repeat("x", 201), 1, 1) }, fsm.ErrInvalidName},
		{"unknown kind", func() *fsmpb.Destination {
			d := dest("q", 1, 1)
			d.Kind = fsmpb.DestinationKind_DESTINATION_KIND_UNKNOWN
			return d
		}, fsm.ErrInvalidSettings},
		{"kind out of range", func() *fsmpb.Destination {
			d := dest("q", 1, 1)
			d.Kind = 7
			return d
		}, fsm.ErrInvalidSettings},
		{"no members", func() *fsmpb.Destination { return dest("q", 0, 1) }, fsm.ErrInvalidSettings},
		{"too many members", func() *fsmpb.Destination { return dest("q", fsm.MaxMembers+1, 1) }, fsm.ErrInvalidSettings},
		{"replication factor 0", func() *fsmpb.Destination { return dest("q", 1, 0) }, fsm.ErrInvalidSettings},
		{"negative ttl", func() *fsmpb.Destination {
			d := dest("q", 1, 1)
			d.TtlNs = -1
			return d
		}, fsm.ErrInvalidSettings},
		{"negative max bytes", func() *fsmpb.Destination {
			d := dest("q", 1, 1)
			d.MaxBytes = -1
			return d
		}, fsm.ErrInvalidSettings},
		{"member index out of order", func() *fsmpb.Destination {
			d := dest("q", 2, 1)
			d.Members[0].Index, d.Members[1].Index = 1, 0
			return d
		}, fsm.ErrInvalidSettings},
		{"member with too few replicas", func() *fsmpb.Destination {
			d := dest("q", 2, 3)
			d.Members[1].Replicas = d.Members[1].Replicas[:2]
			return d
		}, fsm.ErrInvalidSettings},
		{"member with too many replicas", func() *fsmpb.Destination {
			d := dest("q", 1, 1)
			d.Members[0].Replicas = append(d.Members[0].Replicas, "n9")
			return d
		}, fsm.ErrInvalidSettings},
		{"existing name", func() *fsmpb.Destination { return dest("existing", 2, 2) }, fsm.ErrDestinationExists},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newMeta(t)
			f.ok(&fsmpb.CreateDestination{Destination: dest("existing", 1, 1)})
			before := metaState(t, f.m)
			r := f.do(&fsmpb.CreateDestination{Destination: c.d()})
			mustErr(t, r.Err, c.want, "create")
			if err := fsm.ValidateDestination(c.d()); c.want != fsm.ErrDestinationExists && !errors.Is(err, c.want) {
				t.Errorf("ValidateDestination = %v, want %v", err, c.want)
			}
			if !bytes.Equal(withoutApplied(t, before), withoutApplied(t, metaState(t, f.m))) {
				t.Error("a rejected create changed the state")
			}
		})
	}
	// The largest valid destination.
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: dest(strings.Repeat("x", fsm.MaxNameLength), fsm.MaxMembers, 5)})
}

func TestCreateDestination_RejectsImpossiblePlacement(t *testing.T) {
	same := dest("q", 1, 3)
	same.Members[0].Replicas = []string{"n1", "n1", "n2"}
	empty := dest("q", 1, 2)
	empty.Members[0].Replicas = []string{"n1", ""}
	for name, d := range map[string]*fsmpb.Destination{"one node twice": same, "empty node id": empty} {
		f := newMeta(t)
		r := f.do(&fsmpb.CreateDestination{Destination: d})
		if !errors.Is(r.Err, fsm.ErrInvalidSettings) {
			t.Errorf("%s: CreateDestination = %v, want ErrInvalidSettings", name, r.Err)
		}
		if _, ok := f.m.Destination("q"); ok {
			t.Errorf("%s: the destination was created", name)
		}
	}
}

func TestDeleteDestination_RemovesIt(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: dest("a", 1, 1)})
	f.ok(&fsmpb.CreateDestination{Destination: dest("b", 1, 1)})
	f.ok(&fsmpb.DeleteDestination{Name: "a"})
	if _, ok := f.m.Destination("a"); ok {
		t.Fatal("a still exists")
	}
	if ds := f.m.Destinations(); len(ds) != 1 || ds[0].GetName() != "b" {
		t.Fatalf("Destinations = %v", ds)
	}
	// Deleted, the name can be created again.
	f.ok(&fsmpb.CreateDestination{Destination: dest("a", 2, 1)})
	if d, _ := f.m.Destination("a"); len(d.GetMembers()) != 2 {
		t.Fatalf("recreated a = %v", d)
	}
}

func TestDeleteDestination_RejectsUnknownAndChangesNothing(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.CreateDestination{Destination: dest("a", 1, 1)})
	before := withoutApplied(t, metaState(t, f.m))
	for _, name := range []string{"b", "", "a#0", "A"} {
		mustErr(t, f.do(&fsmpb.DeleteDestination{Name: name}).Err, fsm.ErrUnknownDestination, "delete "+name)
	}
	if !bytes.Equal(before, withoutApplied(t, metaState(t, f.m))) {
		t.Fatal("a rejected delete changed the state")
	}
}

func TestRegisterNode_StoresAndReplaces(t *testing.T) {
	f := newMeta(t)
	n1 := &fsmpb.Node{Id: "n1", ClientAddr: "127.0.0.1:7650", PeerAddr: "127.0.0.1:7651", RaftAddr: "127.0.0.1:7652", GossipAddr: "127.0.0.1:7653", HttpAddr: "127.0.0.1:7654"}
	f.ok(&fsmpb.RegisterNode{Node: n1})
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n0"}})
	if got, ok := f.m.Node("n1"); !ok || !proto.Equal(got, n1) {
		t.Fatalf("Node(n1) = %v, %v", got, ok)
	}
	// A node that comes back with new addresses registers again.
	n1b := &fsmpb.Node{Id: "n1", ClientAddr: "127.0.0.1:9650"}
	f.ok(&fsmpb.RegisterNode{Node: n1b})
	if got, _ := f.m.Node("n1"); !proto.Equal(got, n1b) {
		t.Fatalf("Node(n1) = %v", got)
	}
	var ids []string
	for _, n := range f.m.Nodes() {
		ids = append(ids, n.GetId())
	}
	if !slices.Equal(ids, []string{"n0", "n1"}) {
		t.Fatalf("Nodes = %v", ids)
	}
	if _, ok := f.m.Node("n2"); ok {
		t.Fatal("unknown node found")
	}
}

func TestRegisterNode_RejectsMissingIDAndChangesNothing(t *testing.T) {
	f := newMeta(t)
	f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1"}})
	before := withoutApplied(t, metaState(t, f.m))
	for _, n := range []*fsmpb.Node{nil, {ClientAddr: "x"}} {
		mustErr(t, f.do(&fsmpb.RegisterNode{Node: n}).Err, fsm.ErrMalformed, "register")
	}
	if !bytes.Equal(before, withoutApplied(t, metaState(t, f.m))) {
		t.Fatal("a rejected register changed the state")
	}
}

func TestMetaApply_SkipsEntriesAtOrBelowApplied(t *testing.T) {
	m := fsm.NewMeta()
	e := entry(t, &fsmpb.CreateDestination{Destination: dest("q", 1, 1)})
	if rs, err := m.Apply(3, e); err != nil || rs[0].Err != nil || m.Applied() != 3 {
		t.Fatalf("Apply(3) = %+v, %v, applied %d", rs, err, m.Applied())
	}
	before := metaState(t, m)
	for _, idx := range []uint64{0, 2, 3} {
		// The replay would be rejected as existing if it were applied.
		if rs, err := m.Apply(idx, e); rs != nil || err != nil {
			t.Fatalf("Apply(%d) = %+v, %v", idx, rs, err)
		}
		if rs, err := m.Apply(idx, []byte("garbage")); rs != nil || err != nil {
			t.Fatalf("Apply(%d, garbage) = %+v, %v", idx, rs, err)
		}
	}
	if !bytes.Equal(before, metaState(t, m)) {
		t.Fatal("old entries changed the state")
	}
}

func TestMetaApply_CorruptEntriesReturnErrCorruptAndChangeNothing(t *testing.T) {
	good := fsm.MustCommand(&fsmpb.CreateDestination{Destination: dest("new", 1, 1)})
	cases := map[string][]byte{
		"garbage":          []byte("\xff\xfe not an entry"),
		"version 0":        rawEntry(t, 0, good),
		"version 99":       rawEntry(t, 99, good),
		"member command":   entry(t, &fsmpb.Enqueue{Messages: []*fsmpb.Message{msg("a")}}),
		"purge":            entry(t, &fsmpb.Purge{}),
		"unknown type":     rawEntry(t, 1, &fsmpb.Command{Type: 1000, Payload: good.Payload}),
		"bad payload":      rawEntry(t, 1, &fsmpb.Command{Type: fsmpb.CommandType_COMMAND_TYPE_CREATE_DESTINATION, Payload: []byte{0x0a, 0x05, 0x01}}),
		"good then member": rawEntry(t, 1, good, fsm.MustCommand(&fsmpb.Recover{Session: "s"})),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			f := newMeta(t)
			f.ok(&fsmpb.CreateDestination{Destination: dest("q", 1, 1)})
			f.ok(&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n1"}})
			before := metaState(t, f.m)
			rs, err := f.m.Apply(f.m.Applied()+1, data)
			if !errors.Is(err, fsm.ErrCorrupt) || rs != nil {
				t.Fatalf("Apply = %+v, %v; want ErrCorrupt", rs, err)
			}
			if !bytes.Equal(before, metaState(t, f.m)) {
				t.Fatal("a corrupt entry changed the state")
			}
		})
	}
}
