package cluster

import (
	"context"
	"strconv"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// clientService adapts the front-end to the gRPC client API: every error
// leaves through transport.Status, so the client gets the typed error back.
type clientService struct {
	clientpb.UnimplementedClientServiceServer
	n *Node
}

func (s *clientService) CreateDestination(ctx context.Context, req *clientpb.CreateDestinationRequest) (*clientpb.DestinationInfo, error) {
	d, err := s.n.createDestination(ctx, req)
	if err != nil {
		return nil, transport.Status(err)
	}
	return s.n.destinationInfo(ctx, d), nil
}

func (s *clientService) DeleteDestination(ctx context.Context, req *clientpb.DeleteDestinationRequest) (*clientpb.DeleteDestinationResponse, error) {
	if err := s.n.deleteDestination(ctx, req.Name); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.DeleteDestinationResponse{}, nil
}

func (s *clientService) ListDestinations(ctx context.Context, req *clientpb.ListDestinationsRequest) (*clientpb.ListDestinationsResponse, error) {
	resp := &clientpb.ListDestinationsResponse{}
	for _, d := range s.n.destinations() {
		resp.Destinations = append(resp.Destinations, s.n.destinationInfo(ctx, d))
	}
	return resp, nil
}

func (s *clientService) ShowDestination(ctx context.Context, req *clientpb.ShowDestinationRequest) (*clientpb.DestinationInfo, error) {
	d, _, err := s.n.memberOf(ctx, req.Name, false)
	if err != nil {
		return nil, transport.Status(err)
	}
	return s.n.destinationInfo(ctx, d), nil
}

func (s *clientService) PurgeDestination(ctx context.Context, req *clientpb.PurgeDestinationRequest) (*clientpb.PurgeDestinationResponse, error) {
	n, err := s.n.purge(ctx, req.Name)
	if err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.PurgeDestinationResponse{Purged: n}, nil
}

func (s *clientService) Send(ctx context.Context, req *clientpb.SendRequest) (*clientpb.SendResponse, error) {
	resp, err := s.n.send(ctx, req)
	if err != nil {
		return nil, transport.Status(err)
	}
	return resp, nil
}

func (s *clientService) Connect(stream clientpb.ClientService_ConnectServer) error {
	return s.n.conns.serve(stream)
}

func (s *clientService) ClusterStatus(ctx context.Context, req *clientpb.ClusterStatusRequest) (*clientpb.ClusterStatusResponse, error) {
	return s.n.clusterStatus(), nil
}

// groupStatus describes one Raft group as this node's replica sees it.
func groupStatus(name, self string, r *raft.Raft) *clientpb.GroupStatus {
	_, leader := r.LeaderWithID()
	gs := &clientpb.GroupStatus{Name: name, Leader: string(leader), CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex()}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return gs
	}
	last, _ := strconv.ParseUint(r.Stats()["last_log_index"], 10, 64)
	for _, srv := range f.Configuration().Servers {
		rs := &clientpb.ReplicaStatus{Node: string(srv.ID), Role: "follower"}
		switch {
		case srv.ID == leader:
			rs.Role = "leader"
		case srv.Suffrage == raft.Nonvoter:
			rs.Role = "nonvoter"
		}
		if string(srv.ID) == self {
			rs.MatchIndex = last
			if gs.CommitIndex > gs.AppliedIndex {
				rs.Lag = gs.CommitIndex - gs.AppliedIndex
			}
		}
		gs.Replicas = append(gs.Replicas, rs)
	}
	return gs
}
