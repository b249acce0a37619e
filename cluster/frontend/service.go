package frontend

import (
	"context"
	"fmt"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Admin is the node's administration, as the client API's admin calls
// reach it. Package cluster implements it.
type Admin interface {
	CreateDestination(ctx context.Context, req *clientpb.CreateDestinationRequest) (*fsmpb.Destination, error)
	UpdateDestination(ctx context.Context, req *clientpb.UpdateDestinationRequest) (*fsmpb.Destination, error)
	DeleteDestination(ctx context.Context, name string) error
	Destinations() []*fsmpb.Destination
	// DestinationInfo describes d with its members' counts.
	DestinationInfo(ctx context.Context, d *fsmpb.Destination) *clientpb.DestinationInfo
	// Purge removes the pending messages of addr (a destination or one
	// member), and says how many.
	Purge(ctx context.Context, addr string) (uint64, error)
	// DeleteSubscription deletes topic's subscription of that name for
	// clientID, refused while a consumer uses it.
	DeleteSubscription(ctx context.Context, topic, name, clientID string) error
	// Browse lists up to limit pending messages of a member that sel
	// selects, in delivery order, without changing anything.
	Browse(ctx context.Context, member string, sel *selector.Selector, limit int) ([]fsm.MessageState, error)
	ClusterStatus(ctx context.Context) *clientpb.ClusterStatusResponse
	RemoveNode(ctx context.Context, id string) error
	Leave(ctx context.Context) error
	Decommission(ctx context.Context) (int, error)
	Rebalance(ctx context.Context, apply bool) (*clientpb.RebalanceResponse, error)
	// ListConnections lists the cluster's client connections (localOnly:
	// this node's); DestroyConnection ends one, wherever it is served.
	ListConnections(ctx context.Context, localOnly bool) *clientpb.ListConnectionsResponse
	DestroyConnection(ctx context.Context, id string) error
	// UsersAllowed says why users cannot be made, changed or deleted here
	// (nil if they can); PutUser makes u (create) or replaces the user of
	// its name; DeleteUser deletes one; Users lists them (they must not be
	// changed).
	UsersAllowed() error
	PutUser(ctx context.Context, u *fsmpb.User, create bool) error
	DeleteUser(ctx context.Context, name string) error
	Users() []*fsmpb.User
}

// NewService is the client API: the admin calls go to admin, sends and
// connections to the front-end. Every error leaves through
// transport.Status, so the client gets the typed error back.
func NewService(n Node, admin Admin, conns *Connections) clientpb.ClientServiceServer {
	return &clientService{n: n, a: admin, conns: conns}
}

type clientService struct {
	clientpb.UnimplementedClientServiceServer
	n     Node
	a     Admin
	conns *Connections
}

func (s *clientService) CreateDestination(ctx context.Context, req *clientpb.CreateDestinationRequest) (*clientpb.DestinationInfo, error) {
	d, err := s.a.CreateDestination(ctx, req)
	if err != nil {
		return nil, transport.Status(err)
	}
	return s.a.DestinationInfo(ctx, d), nil
}

func (s *clientService) UpdateDestination(ctx context.Context, req *clientpb.UpdateDestinationRequest) (*clientpb.DestinationInfo, error) {
	d, err := s.a.UpdateDestination(ctx, req)
	if err != nil {
		return nil, transport.Status(err)
	}
	return s.a.DestinationInfo(ctx, d), nil
}

func (s *clientService) DeleteDestination(ctx context.Context, req *clientpb.DeleteDestinationRequest) (*clientpb.DeleteDestinationResponse, error) {
	if err := s.a.DeleteDestination(ctx, req.Name); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.DeleteDestinationResponse{}, nil
}

func (s *clientService) ListDestinations(ctx context.Context, req *clientpb.ListDestinationsRequest) (*clientpb.ListDestinationsResponse, error) {
	resp := &clientpb.ListDestinationsResponse{}
	for _, d := range s.a.Destinations() {
		if d.Subscription != nil || s.n.Authorize(ctx, fsm.ActionBrowse, d.Name) != nil {
			continue // listed under its topic, or not the caller's to see
		}
		resp.Destinations = append(resp.Destinations, s.a.DestinationInfo(ctx, d))
	}
	return resp, nil
}

func (s *clientService) ShowDestination(ctx context.Context, req *clientpb.ShowDestinationRequest) (*clientpb.DestinationInfo, error) {
	d, _, err := s.n.MemberOf(ctx, req.Name, false)
	if err != nil {
		return nil, transport.Status(err)
	}
	return s.a.DestinationInfo(ctx, d), nil
}

func (s *clientService) PurgeDestination(ctx context.Context, req *clientpb.PurgeDestinationRequest) (*clientpb.PurgeDestinationResponse, error) {
	n, err := s.a.Purge(ctx, req.Name)
	if err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.PurgeDestinationResponse{Purged: n}, nil
}

func (s *clientService) DeleteSubscription(ctx context.Context, req *clientpb.DeleteSubscriptionRequest) (*clientpb.DeleteSubscriptionResponse, error) {
	if err := s.a.DeleteSubscription(ctx, req.Topic, req.Name, req.ClientId); err != nil {
		return nil, transport.Status(WireError(err))
	}
	return &clientpb.DeleteSubscriptionResponse{}, nil
}

// DefaultBrowse and MaxBrowse bound how many messages a browse returns.
const (
	DefaultBrowse = 100
	MaxBrowse     = 10_000
)

func (s *clientService) BrowseDestination(ctx context.Context, req *clientpb.BrowseDestinationRequest) (*clientpb.BrowseDestinationResponse, error) {
	count := int(req.Count)
	switch {
	case count == 0:
		count = DefaultBrowse
	case count > MaxBrowse:
		return nil, transport.Status(fmt.Errorf("%w: a browse returns at most %d messages, not %d", transport.ErrInvalidArgument, MaxBrowse, count))
	}
	sel, err := selector.Parse(req.Selector)
	if err != nil {
		return nil, transport.Status(fmt.Errorf("%w: %v", transport.ErrInvalidSelector, err))
	}
	d, idx, err := s.n.MemberOf(ctx, req.Name, false)
	if err != nil {
		return nil, transport.Status(err)
	}
	resp := &clientpb.BrowseDestinationResponse{}
	for i := range d.Members {
		if idx >= 0 && i != idx {
			continue
		}
		name := fsm.MemberName(d.Name, uint32(i))
		sts, err := s.a.Browse(ctx, name, sel, count-len(resp.Messages))
		if err != nil {
			return nil, transport.Status(WireError(err))
		}
		for _, st := range sts {
			resp.Messages = append(resp.Messages, delivery(name, d.Name, fsm.Delivery{Message: st.Message, Redelivered: st.Redelivered, DeliveryCount: st.DeliveryCount}))
		}
		if len(resp.Messages) >= count {
			break
		}
	}
	return resp, nil
}

func (s *clientService) Send(ctx context.Context, req *clientpb.SendRequest) (*clientpb.SendResponse, error) {
	resp, err := s.n.Send(ctx, req)
	if err != nil {
		return nil, transport.Status(err)
	}
	return resp, nil
}

func (s *clientService) Connect(stream clientpb.ClientService_ConnectServer) error {
	return s.conns.Serve(stream)
}

func (s *clientService) ClusterStatus(ctx context.Context, req *clientpb.ClusterStatusRequest) (*clientpb.ClusterStatusResponse, error) {
	return s.a.ClusterStatus(ctx), nil
}

func (s *clientService) RemoveNode(ctx context.Context, req *clientpb.RemoveNodeRequest) (*clientpb.RemoveNodeResponse, error) {
	if err := s.a.RemoveNode(ctx, req.Id); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.RemoveNodeResponse{}, nil
}

func (s *clientService) LeaveNode(ctx context.Context, req *clientpb.LeaveNodeRequest) (*clientpb.LeaveNodeResponse, error) {
	if req.Decommission {
		moved, err := s.a.Decommission(ctx)
		if err != nil {
			return nil, transport.Status(err)
		}
		return &clientpb.LeaveNodeResponse{Node: s.n.ID(), Moved: uint32(moved)}, nil
	}
	if err := s.a.Leave(ctx); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.LeaveNodeResponse{Node: s.n.ID()}, nil
}

func (s *clientService) Rebalance(ctx context.Context, req *clientpb.RebalanceRequest) (*clientpb.RebalanceResponse, error) {
	resp, err := s.a.Rebalance(ctx, !req.DryRun)
	if err != nil {
		return nil, transport.Status(err)
	}
	return resp, nil
}

func (s *clientService) ListConnections(ctx context.Context, req *clientpb.ListConnectionsRequest) (*clientpb.ListConnectionsResponse, error) {
	return s.a.ListConnections(ctx, req.LocalOnly), nil
}

func (s *clientService) DestroyConnection(ctx context.Context, req *clientpb.DestroyConnectionRequest) (*clientpb.DestroyConnectionResponse, error) {
	if err := s.a.DestroyConnection(ctx, req.Id); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.DestroyConnectionResponse{}, nil
}
