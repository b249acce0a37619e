package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"

	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// peerService answers other nodes: it hosts members for their front-ends.
type peerService struct {
	peerpb.UnimplementedPeerServiceServer
	n *Node
}

// notHosting explains why this node cannot take a command for a member.
func (n *Node) notHosting(name string) *peerpb.Error {
	r, ok := n.groups.replica(name)
	if !ok {
		return &peerpb.Error{Code: codeNoMember, Message: "no replica of member " + name + " here"}
	}
	_, leader := r.Raft().LeaderWithID()
	return &peerpb.Error{Code: codeNotLeader, Message: "member " + name + " is not hosted here", Leader: string(leader)}
}

// peerErrorOf gives a member's failure the peer API's code for the
// front-end that asked, from the one classifier of outcomes
// (destination.OutcomeOf), which the front-end applies to a local failure:
// a command relayed meets the same fate as one submitted here
// (TestOutcome_RelayedAsLocal).
func peerErrorOf(n *Node, name string, err error) *peerpb.Error {
	switch destination.OutcomeOf(err) {
	case destination.NotSent: // not the leader, too busy, stopped: the plan tries the host
		e := n.notHosting(name)
		e.Code, e.Message = codeNotLeader, err.Error()
		return e
	case destination.Unknown:
		return &peerpb.Error{Code: codeOutcomeUnknown, Message: err.Error()}
	}
	return &peerpb.Error{Code: codeUnavailable, Message: err.Error()}
}

// Propose submits each command to its member's proposer in arrival order
// and answers as each is applied.
func (s *peerService) Propose(stream peerpb.PeerService_ProposeServer) error {
	s.n.peerStreams.Add(1)
	defer s.n.peerStreams.Add(-1)
	var sendMu sync.Mutex
	send := func(r *peerpb.ProposeResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = stream.Send(r) // a broken stream ends Recv below too
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		id := req.Id
		r, ok := s.n.groups.replica(req.Member)
		if !ok || !r.Leading() {
			send(&peerpb.ProposeResponse{Id: id, Error: s.n.notHosting(req.Member)})
			continue
		}
		body, err := fsm.DecodeMemberCommand(req.Command)
		if err != nil {
			send(&peerpb.ProposeResponse{Id: id, Result: fromResult(fsm.Result{Err: err})})
			continue
		}
		r.Submit(body, func(res fsm.Result, err error) {
			if err != nil {
				e := peerErrorOf(s.n, req.Member, err)
				if e.Code == codeUnavailable {
					// A failure this code does not know: the command may be
					// in the log, so the front-end must not send it elsewhere.
					e.Code = codeOutcomeUnknown
				}
				send(&peerpb.ProposeResponse{Id: id, Error: e})
				return
			}
			send(&peerpb.ProposeResponse{Id: id, Result: fromResult(res)})
		})
	}
}

// Consume attaches a remote front-end's consumer to a member hosted here.
func (s *peerService) Consume(stream peerpb.PeerService_ConsumeServer) error {
	s.n.peerStreams.Add(1)
	defer s.n.peerStreams.Add(-1)
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	a := first.GetAttach()
	if a == nil {
		return stream.Send(&peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Gone{Gone: &peerpb.Error{Code: codeUnavailable, Message: "the first request must be Attach"}}})
	}
	sel, err := selector.Parse(a.Selector)
	if err != nil {
		return stream.Send(&peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Gone{Gone: peerErrorOf(s.n, a.Member, err)}})
	}
	r, ok := s.n.groups.replica(a.Member)
	if !ok || !r.Leading() {
		return stream.Send(&peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Gone{Gone: s.n.notHosting(a.Member)}})
	}
	out := transport.NewOutbox[*peerpb.ConsumeEvent]()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	writeErr := make(chan error, 1)
	go func() { writeErr <- out.Run(ctx, stream.Send) }()
	gone := make(chan error, 1)
	c := &member.Consumer{
		ID: a.Consumer, Session: a.Session, Selector: sel,
		Push: func(ds []fsm.Delivery) bool { return out.Push(deliveryEvents(ds, s.n.maxWire())...) },
		Gone: func(err error) {
			select {
			case gone <- err:
			default:
			}
		},
	}
	if err := r.AttachConsumer(c, int(a.Credit), a.PushedUpTo); err != nil {
		return stream.Send(&peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Gone{Gone: peerErrorOf(s.n, a.Member, err)}})
	}
	defer func() {
		r.RemoveConsumer(c.ID)
		// What is still queued never reached the front-end.
		var ids []uint64
		for _, ev := range out.Stop() {
			for _, d := range ev.GetDeliveries().GetDeliveries() {
				ids = append(ids, d.DeliveryId)
			}
		}
		if len(ids) > 0 {
			r.GiveBack(a.Session, ids)
		}
	}()
	out.Push(&peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Attached{Attached: true}})
	credits := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				credits <- err
				return
			}
			if n := req.GetCredit(); n > 0 {
				r.Credit(c.ID, int(n))
			}
		}
	}()
	select {
	case err := <-gone:
		code := codeNotLeader
		if errors.Is(err, fsm.ErrUnknownSession) {
			code = codeNoMember
		}
		out.Push(&peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Gone{Gone: &peerpb.Error{Code: code, Message: err.Error()}}})
		out.CloseAfterFlush()
		<-writeErr
		return nil
	case <-credits:
		return nil
	case err := <-writeErr:
		return err
	}
}

// deliveryEvents carries deliveries to a front-end in events within the
// frame limit: the front-end passes them on to its client as they come.
func deliveryEvents(ds []fsm.Delivery, limit int) []*peerpb.ConsumeEvent {
	out := make([]*peerpb.Delivery, len(ds))
	for i, d := range ds {
		out[i] = &peerpb.Delivery{DeliveryId: d.DeliveryID, Message: d.Message, Redelivered: d.Redelivered, DeliveryCount: d.DeliveryCount}
	}
	runs := transport.Batches(out, limit)
	evs := make([]*peerpb.ConsumeEvent, len(runs))
	for i, run := range runs {
		evs[i] = &peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Deliveries{Deliveries: &peerpb.Deliveries{Deliveries: run}}}
	}
	return evs
}

func (s *peerService) MetaApply(ctx context.Context, req *peerpb.MetaApplyRequest) (*peerpb.MetaApplyResponse, error) {
	body, err := fsm.DecodeMetaCommand(req.Command)
	if rn, ok := body.(*fsmpb.RemoveNode); ok && err == nil {
		// What the client API would refuse does not get in this way.
		if err = s.n.mayRemove(rn.Id, callerNode(ctx)); err != nil {
			err = fmt.Errorf("%w: %v", fsm.ErrInvalidSettings, err)
		}
	}
	if err != nil {
		return &peerpb.MetaApplyResponse{Result: fromResult(fsm.Result{Err: err})}, nil
	}
	res, index, err := s.n.meta.ApplyLocalAt(ctx, body)
	if err != nil && res.Err == nil {
		code := codeUnavailable
		if errors.Is(err, destination.ErrNotSent) {
			code = codeNotLeader
		}
		return &peerpb.MetaApplyResponse{Error: &peerpb.Error{Code: code, Message: err.Error(), Leader: s.n.meta.LeaderID()}}, nil
	}
	return &peerpb.MetaApplyResponse{Result: fromResult(res), Index: index}, nil
}

func (s *peerService) Member(ctx context.Context, req *peerpb.MemberRequest) (*peerpb.MemberResponse, error) {
	r, ok := s.n.groups.replica(req.Member)
	if !ok {
		return &peerpb.MemberResponse{Error: &peerpb.Error{Code: codeNoMember, Message: "no replica of member " + req.Member + " here"}}, nil
	}
	_, leader := r.Raft().LeaderWithID()
	resp := &peerpb.MemberResponse{Leader: string(leader), Hosting: r.Leading()}
	if !resp.Hosting {
		return resp, nil
	}
	st := hostStats(s.n.cfg.NodeID, r)
	resp.Pending, resp.Delivered, resp.Bytes, resp.Consumers = uint64(st.pending), uint64(st.delivered), st.bytes, uint32(st.consumers)
	resp.Delayed, resp.Moving, resp.DeadLettered, resp.Prepared = uint64(st.delayed), uint64(st.moving), uint64(st.deadLettered), uint64(st.prepared)
	resp.Counters = st.counters.Proto()
	if req.Browse == 0 {
		return resp, nil
	}
	sel, err := selector.Parse(req.Selector)
	var sts []fsm.MessageState
	if err == nil {
		sts, err = r.Browse(sel, int(min(req.Browse, frontend.MaxBrowse)))
	}
	if err != nil {
		resp.Error = &peerpb.Error{Code: codeUnavailable, Message: err.Error()}
		return resp, nil
	}
	for _, m := range sts {
		resp.Browsed = append(resp.Browsed, &peerpb.Delivery{Message: m.Message, Redelivered: m.Redelivered, DeliveryCount: m.DeliveryCount})
	}
	return resp, nil
}

func (s *peerService) Groups(ctx context.Context, req *peerpb.GroupsRequest) (*peerpb.GroupsResponse, error) {
	return &peerpb.GroupsResponse{Node: s.n.cfg.NodeID, Groups: s.n.localGroups()}, nil
}

// Connections lists the client connections this node serves.
func (s *peerService) Connections(ctx context.Context, req *peerpb.ConnectionsRequest) (*clientpb.ListConnectionsResponse, error) {
	return &clientpb.ListConnectionsResponse{Connections: s.n.conns.List()}, nil
}

// DestroyConnection ends a connection this node serves.
func (s *peerService) DestroyConnection(ctx context.Context, req *clientpb.DestroyConnectionRequest) (*clientpb.DestroyConnectionResponse, error) {
	if !s.n.conns.Destroy(req.Id) {
		return nil, transport.Status(fmt.Errorf("%w: node %s serves no connection %q", transport.ErrUnknownConnection, s.n.cfg.NodeID, req.Id))
	}
	return &clientpb.DestroyConnectionResponse{}, nil
}
