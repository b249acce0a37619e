package cluster

import (
	"testing"

	"google.golang.org/protobuf/proto"

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
