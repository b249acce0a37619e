package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/cluster/metagroup"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// Raft configurations follow the meta group's decisions, never gossip's
// verdicts: a node is added to a group when it is registered (alive, joined)
// and placed, and removed only when an operator removed it (RemoveNode) and
// the meta group re-placed its replicas.

// reconcileMemberVoters, on a member's leader, makes the group's Raft
// configuration match the member's placement: new replicas are added before
// any is removed, so the group never has fewer voters than it needs.
func (gs *groups) reconcileMemberVoters(r raftMember) error {
	dest, idx, err := fsm.ParseAddress(r.Name())
	if err != nil {
		return err
	}
	d, ok := gs.n.meta.Destination(dest)
	if !ok || idx < 0 || idx >= len(d.Members) {
		return nil
	}
	want := d.Members[idx].Replicas
	group := fsm.GroupKey(d.Name, d.Members[idx])
	rejoining := map[string]bool{}
	gs.n.meta.Read(func(m *fsm.Meta) {
		for _, id := range want {
			rejoining[id] = m.Rejoining(id, group)
		}
	})
	f := r.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	have := map[string]raft.ServerSuffrage{}
	for _, s := range f.Configuration().Servers {
		have[string(s.ID)] = s.Suffrage
	}
	// A new replica joins as a non-voter, so that the group's quorum does
	// not wait for a replica still copying its snapshot and log, and votes
	// once its node says it has caught up; a replica leaves only once every
	// replica placed is a voter, so the group never has fewer voters able
	// to commit than before. A replica that came back empty (rejoining) is
	// made a non-voter again, when the others can commit without it.
	allVote := true
	for _, id := range want {
		suffrage, in := have[id]
		switch {
		case in && suffrage == raft.Voter && rejoining[id]:
			allVote = false
			if err := gs.rejoinVoter(r, id, group, have); err != nil {
				return err
			}
			continue
		case in && suffrage == raft.Voter:
			continue
		case in && !replicaCaughtUp(gs, id, r):
			allVote = false
			continue
		}
		allVote = false
		addr, err := (raftAddresses{gs.n}).ServerAddr(raft.ServerID(id))
		if err != nil {
			return err
		}
		if !in {
			if err := r.Raft().AddNonvoter(raft.ServerID(id), addr, 0, 10*time.Second).Error(); err != nil {
				return fmt.Errorf("adding %s to member %s: %w", id, r.Name(), err)
			}
			gs.n.log.Info("replica added to member group, not voting until caught up", "member", r.Name(), "node", id)
			continue
		}
		if err := r.Raft().AddVoter(raft.ServerID(id), addr, 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("promoting %s in member %s: %w", id, r.Name(), err)
		}
		gs.n.log.Info("replica of member group caught up: now a voter", "member", r.Name(), "node", id)
	}
	if !allVote {
		return nil // remove on a later pass, once the new replicas vote
	}
	return gs.removeUnplaced(r, want, have)
}

// removeUnplaced removes from r's group the servers in have that are not
// placed (want), once every placed one votes; a leader whose own replica
// is not placed hands the group over first.
func (gs *groups) removeUnplaced(r raftMember, want []string, have map[string]raft.ServerSuffrage) error {
	for id := range have {
		if slices.Contains(want, id) {
			continue
		}
		if id == gs.n.cfg.NodeID {
			// A leader whose replica moved away (its node is
			// decommissioning) hands the group over rather than
			// leave it leaderless; the next leader removes it.
			if err := r.Raft().LeadershipTransfer().Error(); err != nil {
				return fmt.Errorf("handing member %s over before its replica here leaves: %w", r.Name(), err)
			}
			gs.n.log.Info("replica moved away: leadership handed over", "member", r.Name())
			return nil
		}
		if err := r.Raft().RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("removing %s from member %s: %w", id, r.Name(), err)
		}
		gs.n.log.Info("replica removed from member group", "member", r.Name(), "node", id)
	}
	return nil
}

// rejoinVoter handles a voter of r's group whose node came back empty:
// caught up again, the meta group hears it (which ends its rejoining);
// otherwise it is demoted to a non-voter, promoted as any new replica once
// caught up, unless another voter is not caught up either, when the group
// needs its vote to commit and it stays a voter.
func (gs *groups) rejoinVoter(r raftMember, id, group string, have map[string]raft.ServerSuffrage) error {
	if id == gs.n.cfg.NodeID || replicaCaughtUp(gs, id, r) { // a leader holds the log
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := gs.n.meta.Apply(ctx, &fsmpb.ReplicaCaughtUp{Node: id, Group: group}); err != nil {
			return fmt.Errorf("telling that %s's replica of %s caught up: %w", id, r.Name(), err)
		}
		gs.n.log.Info("replica back from an empty data directory caught up", "member", r.Name(), "node", id)
		return nil
	}
	for other, suffrage := range have {
		if suffrage == raft.Voter && other != id && other != gs.n.cfg.NodeID && !replicaCaughtUp(gs, other, r) {
			return nil
		}
	}
	if err := r.Raft().DemoteVoter(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("demoting %s, back empty, in member %s: %w", id, r.Name(), err)
	}
	gs.n.log.Info("replica back from an empty data directory: not voting until caught up", "member", r.Name(), "node", id)
	return nil
}

// replicaCaughtUp is groups.caughtUp; tests replace it to hold a new
// replica back.
var replicaCaughtUp = (*groups).caughtUp

// caughtUp reports whether node's replica of r's group has applied all
// but leadSlack of what the group committed, as node reports it.
func (gs *groups) caughtUp(node string, r raftMember) bool {
	g := gs.report(node, r.Name())
	return g != nil && g.AppliedIndex+leadSlack >= r.Raft().CommitIndex()
}

// report is node's report of its replica of group name (a member's, or
// the meta group), or nil when it gives none.
func (gs *groups) report(node, name string) *peerpb.GroupReplica {
	c, err := gs.n.peers.client(node)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.Groups(ctx, &peerpb.GroupsRequest{})
	if err != nil {
		return nil
	}
	for _, g := range resp.Groups {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// raftMember is a member replica or a raftUnit: a member's name and its
// group.
type raftMember interface {
	Name() string
	Raft() *raft.Raft
}

// aliveNodes are the nodes gossip holds alive.
func (n *Node) aliveNodes() map[string]bool {
	alive := map[string]bool{}
	for _, m := range n.gossip.members() {
		if m.State == "alive" {
			alive[m.ID] = true
		}
	}
	return alive
}

// mayRemove refuses the removal of a live node, but for a decommissioned
// node's removal of itself (by is the caller's node id, as its certificate
// says, empty without TLS): whichever API it comes through.
func (n *Node) mayRemove(id, by string) error {
	if !n.aliveNodes()[id] {
		return nil
	}
	var leaving bool
	n.meta.Read(func(m *fsm.Meta) { leaving = m.Decommissioning(id) })
	if leaving && (by == id || (by == "" && n.tls == nil)) {
		return nil
	}
	return fmt.Errorf("%w: node %s %s (or run 'cairn node leave' against it), then remove it", transport.ErrInvalidArgument, id, aliveRefusal)
}

// aliveRefusal is mayRemove's word for a live node, which the meta leader
// answers a remove with as text.
const aliveRefusal = "is alive; stop it first"

// removeAgreement bounds how long a remove waits for the meta leader's
// gossip to see dead a node this node sees dead: each hears of a death
// from the pool in its own time.
const removeAgreement = 10 * time.Second

// removeNode takes a node out of the cluster for good, on the operator's
// word; the meta leader then re-places its replicas and the groups drop it.
func (n *Node) removeNode(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: which node? give its id", transport.ErrInvalidArgument)
	}
	if err := n.mayRemove(id, ""); err != nil {
		return err
	}
	for deadline := time.Now().Add(removeAgreement); ; {
		_, err := n.meta.Apply(ctx, &fsmpb.RemoveNode{Id: id})
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), aliveRefusal) || !time.Now().Before(deadline) || n.aliveNodes()[id] {
			return frontend.WireError(err)
		}
		select {
		case <-ctx.Done():
			return frontend.WireError(err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	n.log.Info("node removed from the cluster", "id", id)
	return nil
}

// Leave hands every leadership this node holds to another node and asks
// the process to stop (Left); the stop then interrupts nothing.
func (n *Node) Leave(ctx context.Context) error {
	n.leaving.Store(true)
	n.handOver(ctx)
	select {
	case <-n.leave:
	default:
		close(n.leave)
	}
	return ctx.Err()
}

// handOver transfers every leadership this node holds to another replica,
// after telling the others (through gossip) not to hand any back, nor to
// wait for it, and after waiting, at most quorumWait or until ctx ends, for
// replicas still catching up that a group needs for a quorum without this
// node. Nodes that stop together (a whole cluster stopped) thus do not wait
// for each other: each may have said it was catching up as the others
// left.
func (n *Node) handOver(ctx context.Context) {
	n.gossip.setLeaving()
	ctx, cancel := context.WithTimeout(ctx, quorumWait)
	n.awaitCaughtUpQuorums(ctx)
	cancel()
	canLead := n.nodesThatCanLead()
	transfer := func(what string, r *raft.Raft) {
		if r.State() != raft.Leader {
			return
		}
		if id, addr, ok := n.voterThatCanLead(r, canLead); ok {
			err := r.LeadershipTransferToServer(id, addr).Error()
			if err == nil {
				return
			}
			n.log.Info("leadership not handed over to a caught-up replica; letting Raft pick one", "group", what, "to", id, "err", err)
		}
		if err := r.LeadershipTransfer().Error(); err != nil {
			n.log.Info("leadership not handed over", "group", what, "err", err)
		}
	}
	var wg sync.WaitGroup
	for _, u := range n.groups.units() {
		wg.Add(1)
		go func() { defer wg.Done(); transfer(u.id, u.raft) }()
	}
	wg.Wait()
	transfer(metagroup.ID, n.meta.Raft())
}

// quorumWait bounds how long a node that stops gracefully waits for
// replicas still catching up (awaitCaughtUpQuorums): replaying the log of
// 1.2 million messages took 7–10 s after the node was ready; Kubernetes
// gives the pod 60 s (deploy/kubernetes/cairn.yaml) and `cairn node leave`
// 30 s.
const quorumWait = 20 * time.Second

// awaitCaughtUpQuorums waits until ctx ends while a group with a replica
// here would keep a quorum without this node only once replicas still
// catching up have: a node restarted a moment ago (the previous pod of a
// rolling restart) reads and applies its log before it answers its groups'
// leaders promptly, and stopping this node meanwhile held a member's sends
// 5.7 s. It does not wait for replicas that are down or leaving, which
// waiting would not bring back.
func (n *Node) awaitCaughtUpQuorums(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var waited []string
	for {
		needed := n.catchingUpForQuorum()
		if len(needed) == 0 {
			if waited != nil {
				n.log.Info("replicas caught up; handing leaderships over", "nodes", waited)
			}
			return
		}
		if waited == nil {
			n.log.Info("waiting for replicas still catching up, so that their groups keep a quorum without this node", "nodes", needed, "at_most", quorumWait)
		}
		waited = needed
		select {
		case <-ctx.Done():
			n.log.Warn("stopping although replicas are still catching up: groups that need them for a quorum pause until they have", "nodes", needed)
			return
		case <-t.C:
		}
	}
}

// catchingUpForQuorum lists the nodes still catching up that a group with a
// replica here needs, beside the replicas that can serve now, for a quorum
// without this node.
func (n *Node) catchingUpForQuorum() []string {
	canLead, catchingUp := n.leadReadiness()
	rafts := []*raft.Raft{n.meta.Raft()}
	for _, u := range n.groups.units() {
		rafts = append(rafts, u.raft)
	}
	needed := map[string]bool{}
	for _, r := range rafts {
		f := r.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		voters, serving := 0, 0
		var waiting []string
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Voter {
				continue
			}
			voters++
			switch id := string(s.ID); {
			case id == n.cfg.NodeID:
			case canLead[id]:
				serving++
			case catchingUp[id]:
				waiting = append(waiting, id)
			}
		}
		if quorum := voters/2 + 1; serving < quorum && serving+len(waiting) >= quorum {
			for _, id := range waiting {
				needed[id] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(needed))
}

// voterThatCanLead picks a voter of a group other than this node that can
// lead it now (nodesThatCanLead). hashicorp/raft's own pick is the voter
// whose log is the most up to date, which a node still applying its log,
// restarted a moment ago, has as well: handed the leadership, it would keep
// the group waiting for its replay, as in a rolling restart.
func (n *Node) voterThatCanLead(r *raft.Raft, canLead map[string]bool) (raft.ServerID, raft.ServerAddress, bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return "", "", false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.cfg.NodeID || !canLead[string(s.ID)] {
			continue
		}
		if addr, err := (raftAddresses{n}).ServerAddr(s.ID); err == nil {
			return s.ID, addr, true
		}
	}
	return "", "", false
}

// nodesThatCanLead are the nodes gossip holds alive, not leaving and not
// catching up (cluster/DESIGN.md, "Preferred hosts").
func (n *Node) nodesThatCanLead() map[string]bool {
	canLead, _ := n.leadReadiness()
	return canLead
}

// leadReadiness splits the nodes gossip holds alive and not leaving into
// those that can lead now and those still catching up.
func (n *Node) leadReadiness() (canLead, catchingUp map[string]bool) {
	canLead, catchingUp = map[string]bool{}, map[string]bool{}
	for _, m := range n.gossip.members() {
		if m.State == "alive" && !m.Meta.Leaving {
			canLead[m.ID], catchingUp[m.ID] = !m.Meta.CatchingUp, m.Meta.CatchingUp
		}
	}
	return canLead, catchingUp
}

// Left is closed once Leave asked the node to stop.
func (n *Node) Left() <-chan struct{} { return n.leave }

// retired reports whether replica r, moved away from this node, is out of
// its group's configuration: as it knows it, or as the group's leader
// reports it (a removed follower may not hear of its removal).
func (gs *groups) retired(r *member.Replica) bool {
	self := gs.n.cfg.NodeID
	f := r.Raft().GetConfiguration()
	if f.Error() != nil {
		return true // shut down
	}
	if !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == self }) {
		return true
	}
	_, id := r.Raft().LeaderWithID()
	leader := string(id)
	if leader == "" {
		leader = gs.n.discoverLeader(r.Name())
	}
	if leader == "" || leader == self {
		return false
	}
	g := gs.report(leader, r.Name())
	return g != nil && g.Leader == leader && len(g.Servers) > 0 && !slices.Contains(g.Servers, self)
}
