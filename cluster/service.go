package cluster

import (
	"context"
	"slices"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
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

func (s *clientService) UpdateDestination(ctx context.Context, req *clientpb.UpdateDestinationRequest) (*clientpb.DestinationInfo, error) {
	d, err := s.n.updateDestination(ctx, req)
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
	return s.n.clusterStatus(ctx), nil
}

func (s *clientService) RemoveNode(ctx context.Context, req *clientpb.RemoveNodeRequest) (*clientpb.RemoveNodeResponse, error) {
	if err := s.n.removeNode(ctx, req.Id); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.RemoveNodeResponse{}, nil
}

func (s *clientService) LeaveNode(ctx context.Context, req *clientpb.LeaveNodeRequest) (*clientpb.LeaveNodeResponse, error) {
	if req.Decommission {
		moved, err := s.n.Decommission(ctx)
		if err != nil {
			return nil, transport.Status(err)
		}
		return &clientpb.LeaveNodeResponse{Node: s.n.cfg.NodeID, Moved: uint32(moved)}, nil
	}
	if err := s.n.Leave(ctx); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.LeaveNodeResponse{Node: s.n.cfg.NodeID}, nil
}

func (s *clientService) Rebalance(ctx context.Context, req *clientpb.RebalanceRequest) (*clientpb.RebalanceResponse, error) {
	resp, err := s.n.rebalance(ctx, !req.DryRun)
	if err != nil {
		return nil, transport.Status(err)
	}
	return resp, nil
}

// groupStatus describes one Raft group from its replicas' reports: the
// leader, the leader's commit index, and each replica's progress.
func groupStatus(name string, replicas []string, reports map[string]map[string]*peerpb.GroupReplica) *clientpb.GroupStatus {
	gs := &clientpb.GroupStatus{Name: name}
	for _, id := range replicas {
		if r := reports[id][name]; r != nil && r.Leader != "" {
			gs.Leader = r.Leader
		}
	}
	var nonvoters []string
	if r := reports[gs.Leader][name]; r != nil {
		gs.CommitIndex, gs.AppliedIndex, nonvoters = r.CommitIndex, r.AppliedIndex, r.Nonvoters
	}
	for _, id := range replicas {
		rs := &clientpb.ReplicaStatus{Node: id, Role: "follower", CatchingUp: slices.Contains(nonvoters, id)}
		if id == gs.Leader {
			rs.Role = "leader"
		}
		if r := reports[id][name]; r != nil {
			rs.Reachable, rs.MatchIndex = true, r.LastIndex
			if gs.CommitIndex > r.AppliedIndex {
				rs.Lag = gs.CommitIndex - r.AppliedIndex
			}
		}
		gs.Replicas = append(gs.Replicas, rs)
	}
	return gs
}

func (s *clientService) ListConnections(ctx context.Context, req *clientpb.ListConnectionsRequest) (*clientpb.ListConnectionsResponse, error) {
	return s.n.listConnections(ctx, req.LocalOnly), nil
}

func (s *clientService) DestroyConnection(ctx context.Context, req *clientpb.DestroyConnectionRequest) (*clientpb.DestroyConnectionResponse, error) {
	if err := s.n.destroyConnection(ctx, req.Id); err != nil {
		return nil, transport.Status(err)
	}
	return &clientpb.DestroyConnectionResponse{}, nil
}
