package placement

import (
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

func TestSpreadHosts(t *testing.T) {
	all := map[string]bool{"n1": true, "n2": true, "n3": true}
	unit := func(members int, replicas ...string) *hostUnit {
		return &hostUnit{dest: "q" + replicas[0], replicas: replicas, members: members}
	}
	for _, tc := range []struct {
		name    string
		units   map[string]*hostUnit
		canLead map[string]bool
		want    *fsmpb.PreferReplica
	}{
		{"one per node: nothing to do", map[string]*hostUnit{
			"a": unit(1, "n1", "n2", "n3"), "b": unit(1, "n2", "n3", "n1"), "c": unit(1, "n3", "n1", "n2"),
		}, all, nil},
		{"two on n1, none on n3: one moves to n3", map[string]*hostUnit{
			"a": unit(1, "n1", "n2", "n3"), "b": unit(1, "n2", "n3", "n1"), "c": {dest: "qc", replicas: []string{"n1", "n2", "n3"}, members: 1},
		}, all, &fsmpb.PreferReplica{Destination: "qn1", Node: "n3"}},
		{"the group nearest half the gap moves", map[string]*hostUnit{
			"a": {dest: "thirty", replicas: []string{"n1", "n3", "n2"}, members: 30},
			"b": {dest: "fifty", replicas: []string{"n1", "n2", "n3"}, members: 50},
			"c": {dest: "twenty", replicas: []string{"n1", "n2", "n3"}, members: 20},
			"d": unit(10, "n2", "n1", "n3"),
		}, all, &fsmpb.PreferReplica{Destination: "fifty", Node: "n3"}},
		{"no group smaller than the gap: nothing moves", map[string]*hostUnit{
			"a": unit(5, "n1", "n2", "n3"), "b": unit(4, "n2", "n3", "n1"), "c": unit(4, "n3", "n1", "n2"),
		}, all, nil},
		{"the fewest cannot lead yet", map[string]*hostUnit{
			"a": unit(1, "n1", "n2", "n3"), "b": {dest: "b", replicas: []string{"n1", "n2", "n3"}, members: 1}, "c": unit(1, "n2", "n1", "n3"),
		}, map[string]bool{"n1": true, "n2": true}, nil},
		{"no group of the most has a replica on the fewest", map[string]*hostUnit{
			"a": unit(1, "n1", "n2"), "b": {dest: "b", replicas: []string{"n1", "n2"}, members: 1}, "c": unit(1, "n2", "n1"),
		}, all, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spreadHosts(tc.units, []string{"n1", "n2", "n3"}, tc.canLead)
			if !proto.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// metaOf applies bodies, in order, to a new meta state; each must be
// accepted.
func metaOf(t *testing.T, bodies ...proto.Message) *fsm.Meta {
	t.Helper()
	m := fsm.NewMeta()
	for i, b := range bodies {
		data, err := fsm.Encode(fsm.MustCommand(b))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := m.Apply(uint64(i+1), data)
		if err != nil || rs[0].Err != nil {
			t.Fatalf("%v: %v %v", b, err, rs[0].Err)
		}
	}
	return m
}

// queueOn is queue name of one member in the shared group of replicas.
func queueOn(name string, replicas ...string) *fsmpb.CreateDestination {
	return &fsmpb.CreateDestination{Destination: &fsmpb.Destination{
		Name: name, Kind: fsmpb.DestinationKind_DESTINATION_KIND_QUEUE, Replicas: 3,
		Members: []*fsmpb.MemberPlacement{{Replicas: replicas, Group: SharedGroupID(replicas)}},
	}}
}

func TestPlanPlacement(t *testing.T) {
	nodes := func(ids ...string) (out []proto.Message) {
		for _, id := range ids {
			out = append(out, &fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id}})
		}
		return out
	}
	all := map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true}
	hosts := func(plan Plan) (out []string) {
		for _, p := range plan.Hosts {
			out = append(out, p.Destination+">"+p.Node)
		}
		return out
	}

	manual := Scope{Repair: true, SpreadReplicas: math.MaxInt, HostMoves: math.MaxInt}

	// Three groups hosted by n1, the replicas spread as evenly as they
	// can be: every move at once evens the hosts out as far as one member
	// each can, the automatic round takes one.
	m := metaOf(t, append(nodes("n1", "n2", "n3", "n4"),
		queueOn("a", "n1", "n2", "n3"), queueOn("b", "n1", "n3", "n4"), queueOn("c", "n1", "n2", "n4"))...)
	if got := hosts(Decide(m, all, all, manual)); !slices.Equal(got, []string{"a>n2", "b>n3"}) {
		t.Fatalf("every host move: %v, want a to n2 and b to n3", got)
	}
	if got := hosts(Decide(m, all, all, Scope{Repair: true, HostMoves: 1})); len(got) != 1 {
		t.Fatalf("one host move at a time: %v", got)
	}
	if plan := Decide(m, all, all, Scope{HostMoves: math.MaxInt}); len(plan.Hosts)+len(plan.Replicas) != 0 {
		t.Fatalf("without Repair: %+v", plan)
	}
	if plan := Decide(m, map[string]bool{"n1": true, "n2": true, "n4": true}, all, manual); !plan.Degraded || len(plan.Hosts) != 0 {
		t.Fatalf("with n3 down: %+v, want degraded and no host move", plan)
	}

	// n3 removed while no node was free: a and b were left on two; n4
	// joins and takes a replica of each group, and no host moves yet.
	m = metaOf(t, append(nodes("n1", "n2", "n3"),
		queueOn("a", "n1", "n2", "n3"), queueOn("b", "n2", "n3", "n1"),
		&fsmpb.RemoveNode{Id: "n3"},
		&fsmpb.ReplaceReplica{Destination: "a", Old: "n3"}, &fsmpb.ReplaceReplica{Destination: "b", Old: "n3"},
		&fsmpb.RegisterNode{Node: &fsmpb.Node{Id: "n4"}})...)
	plan := Decide(m, all, all, manual)
	want := []Move{{Dest: "a", To: "n4"}, {Dest: "b", To: "n4"}}
	if !slices.Equal(plan.Replicas, want) || len(plan.Hosts) != 0 || !plan.Degraded {
		t.Fatalf("Repair: %+v, want %v, no host move, degraded", plan, want)
	}
	if plan := Decide(m, all, all, Scope{HostMoves: math.MaxInt}); len(plan.Replicas) != 0 {
		t.Fatalf("repair without Repair: %+v", plan)
	}

	// n4 joins three nodes that hold three groups: the replicas spread
	// onto it first (hosts once they vote); the automatic round moves one.
	m = metaOf(t, append(nodes("n1", "n2", "n3", "n4"),
		queueOn("a", "n1", "n2", "n3"), queueOn("b", "n2", "n3", "n1"), queueOn("c", "n3", "n1", "n2"))...)
	plan = Decide(m, all, all, manual)
	want = []Move{{Dest: "a", From: "n1", To: "n4", KeepHost: true}, {Dest: "b", From: "n2", To: "n4", KeepHost: true}}
	if !slices.Equal(plan.Replicas, want) || len(plan.Hosts) != 0 || !plan.Spread {
		t.Fatalf("spread onto n4: %+v, want %v and no host move", plan, want)
	}
	if plan := Decide(m, all, all, Scope{Repair: true, SpreadReplicas: 1, HostMoves: 1}); !slices.Equal(plan.Replicas, want[:1]) || len(plan.Hosts) != 0 {
		t.Fatalf("the automatic round: %+v, want %v alone", plan, want[:1])
	}
	if plan := Decide(m, all, all, Scope{SpreadReplicas: math.MaxInt, HostMoves: math.MaxInt}); len(plan.Replicas) != 0 {
		t.Fatalf("spreading without repair (auto-rebalance off): %+v", plan)
	}
}
