package placement

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
)

func TestRenewalStep(t *testing.T) {
	member := func(index uint32, r int, mod ...func(*fsmpb.MemberPlacement)) *fsmpb.MemberPlacement {
		p := &fsmpb.MemberPlacement{Index: index, Uid: "u"}
		for j := range r {
			p.Replicas = append(p.Replicas, fmt.Sprintf("n%d", j+1))
		}
		p.Initial = p.Replicas
		for _, f := range mod {
			f(p)
		}
		return p
	}
	draining := func(p *fsmpb.MemberPlacement) { p.Draining = true }
	queue := func(r uint32, spare bool, ms ...*fsmpb.MemberPlacement) *fsmpb.Destination {
		return &fsmpb.Destination{Name: "q", Replicas: r, Spare: spare, Members: ms}
	}
	cases := []struct {
		name string
		d    *fsmpb.Destination
		live int
		want string // the command, printed; "" for none
	}{
		{"nothing to renew", queue(3, false, member(0, 3), member(1, 3)), 3, ""},
		{"the first member placed with another factor", queue(1, false, member(0, 1), member(1, 3), member(2, 3)), 3, "renew q#1"},
		{"one at a time", queue(1, false, member(0, 3, draining, func(p *fsmpb.MemberPlacement) { p.Renewing = true }), member(1, 3)), 3, ""},
		{"not while a shrink drains", queue(1, false, member(0, 3), member(1, 3, draining)), 3, ""},
		{"not without enough live nodes", queue(3, false, member(0, 1), member(1, 1)), 2, ""},
		{"a spare for the only member", queue(3, false, member(0, 1)), 3, "spare"},
		{"the spare drains once done", queue(3, true, member(0, 3), member(1, 3)), 3, "active 1"},
		{"the spare stays while a member is left", queue(3, true, member(0, 3), member(1, 3), member(2, 1)), 3, "renew q#2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got string
			switch cmd := RenewalStep(c.d, c.live).(type) {
			case nil:
			case *fsmpb.RenewMember:
				got = "renew " + fsm.MemberName(cmd.Name, cmd.Index)
			case *fsmpb.ResizeDestination:
				if got = fmt.Sprintf("active %d", cmd.Active); cmd.Spare {
					got = "spare"
				}
			default:
				got = fmt.Sprintf("%T", cmd)
			}
			if got != c.want {
				t.Fatalf("step %q; want %q", got, c.want)
			}
		})
	}
}

func TestRehomes(t *testing.T) {
	five := []string{"n1", "n2", "n3", "n4", "n5"}
	all := map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true, "n5": true}
	register := func(ids ...string) []proto.Message {
		var out []proto.Message
		for _, id := range ids {
			out = append(out, &fsmpb.RegisterNode{Node: &fsmpb.Node{Id: id}})
		}
		return out
	}
	renewing := func(name string, index uint32) proto.Message { return &fsmpb.RenewMember{Name: name, Index: index} }
	for _, c := range []struct {
		name    string
		bodies  []proto.Message
		canLead map[string]bool
		max     int
		want    []string // "member->node"
	}{
		{"three nodes evenly hosted", append(register(five[:3]...), queueHosted("a", "n1", "n2", "n3")), all, 9, nil},
		{"two new nodes: one member each, of two queues, from the nodes that host the most",
			append(register(five...), queueHosted("a", "n1", "n2", "n3"), queueHosted("b", "n1", "n2", "n3")), all, 9,
			[]string{"a#0->n4", "b#1->n5"}},
		{"preferring a queue with no member on the node yet",
			append(register(five...), queueHosted("a", "n1", "n2"), queueHosted("b", "n1", "n3"), queueHosted("c", "n1", "n4"), queueHosted("d", "n1", "n5")), all, 9,
			[]string{"b#0->n2", "a#0->n3"}},
		{"one at a time automatically", append(register(five...), queueHosted("a", "n1", "n2", "n3"), queueHosted("b", "n1", "n2", "n3")), all, 1,
			[]string{"a#0->n4"}},
		{"not onto a node that cannot lead", append(register(five...), queueHosted("a", "n1", "n2", "n3"), queueHosted("b", "n1", "n2", "n3")),
			map[string]bool{"n1": true, "n2": true, "n3": true, "n5": true}, 1, []string{"a#0->n5"}},
		{"not while a member is renewed", append(register(five...), queueHosted("a", "n1", "n2", "n3"), queueHosted("b", "n1", "n2", "n3"), renewing("b", 2)), all, 9, nil},
		{"a queue of one member stays", append(register(five...), queueHosted("a", "n1"), queueHosted("b", "n1"), queueHosted("c", "n1")), all, 9, nil},
		{"a gap of one stays", append(register(five...), queueHosted("a", "n1", "n2", "n3", "n4")), all, 9, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, r := range rehomes(metaOf(t, c.bodies...), five, c.canLead, c.max) {
				got = append(got, fmt.Sprintf("%s->%s", fsm.MemberName(r.Name, r.Index), r.On))
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %v; want %v", got, c.want)
			}
		})
	}
}

// queueHosted is queue name with one member per host, each in the shared
// group of three replicas that host prefers.
func queueHosted(name string, hosts ...string) *fsmpb.CreateDestination {
	all := []string{"n1", "n2", "n3", "n4", "n5"}
	d := &fsmpb.Destination{Name: name, Kind: fsmpb.DestinationKind_DESTINATION_KIND_QUEUE, Replicas: 3}
	for i, h := range hosts {
		at := slices.Index(all, h)
		rs := []string{all[at], all[(at+1)%3], all[(at+2)%3]}
		if at >= 3 {
			rs = []string{h, "n1", "n2"}
		}
		d.Members = append(d.Members, &fsmpb.MemberPlacement{Index: uint32(i), Replicas: rs, Initial: rs, Group: SharedGroupID(rs)})
	}
	return &fsmpb.CreateDestination{Destination: d}
}

// A group named after n2,n3,n1 whose preferred host moved to n3 is joined
// as it stands by a new member, but not by one renewed onto n2, which
// joins a group on exactly n2,n3,n1 or a new one.
func TestJoinSharedGroup_RenewedOntoANodeKeepsItAsHost(t *testing.T) {
	named := []string{"n2", "n3", "n1"}
	m := metaOf(t, queueOn("a", named...), &fsmpb.PreferReplica{Destination: "a", Member: 0, Node: "n3"})
	place := func(sameHost bool) *fsmpb.MemberPlacement {
		p := &fsmpb.MemberPlacement{Replicas: slices.Clone(named), Initial: slices.Clone(named)}
		JoinSharedGroup(m, p, sameHost, "x")
		return p
	}
	if p := place(false); p.Group != SharedGroupID(named) || p.Replicas[0] != "n3" {
		t.Fatalf("a new member: group %s on %v; want %s as it stands, preferring n3", p.Group, p.Replicas, SharedGroupID(named))
	}
	p := place(true)
	if !strings.HasPrefix(p.Group, SharedGroupID(named)+".") || !slices.Equal(p.Replicas, named) {
		t.Fatalf("a member renewed onto n2: group %s on %v; want a new group on %v", p.Group, p.Replicas, named)
	}
}
