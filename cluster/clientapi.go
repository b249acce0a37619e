package cluster

import (
	"context"
	"log/slog"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/destination"
	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/fsm/selector"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// clientAPI is the node as the front-end (package frontend) sees it.
type clientAPI struct{ n *Node }

func (b clientAPI) ID() string               { return b.n.cfg.NodeID }
func (b clientAPI) Owner() string            { return b.n.owner() }
func (b clientAPI) Logger() *slog.Logger     { return b.n.log }
func (b clientAPI) Stopped() <-chan struct{} { return b.n.stopped }
func (b clientAPI) MaxWire() int             { return b.n.maxWire() }
func (b clientAPI) Limits() frontend.Limits {
	return frontend.Limits{SessionsPerConnection: b.n.cfg.MaxSessions, ConsumersPerConnection: b.n.cfg.MaxConsumers, Connections: b.n.cfg.MaxConnections, ConnectionsPerHost: b.n.cfg.MaxConnectionsPerHost}
}
func (b clientAPI) ClientAddrs() []string { return b.n.clientAddrs() }

func (b clientAPI) Send(ctx context.Context, req *clientpb.SendRequest) (*clientpb.SendResponse, error) {
	return b.n.send(ctx, req)
}

func (b clientAPI) ValidateSend(req *clientpb.SendRequest) error { return b.n.validateSend(req) }

func (b clientAPI) BuildMessages(d *fsmpb.Destination, req *clientpb.SendRequest) ([]*fsmpb.Message, bool) {
	return b.n.buildMessages(d, req)
}

func (b clientAPI) MemberOf(ctx context.Context, addr string, create bool) (*fsmpb.Destination, int, error) {
	return b.n.memberOf(ctx, addr, create)
}

func (b clientAPI) SendTarget(ctx context.Context, req *clientpb.SendRequest) (*fsmpb.Destination, int, error) {
	return b.n.sendTarget(ctx, req)
}

func (b clientAPI) ChooseMember(d *fsmpb.Destination) int {
	return destination.ForSendAny(b.n.candidates(d), b.n.rotation.Add(1))
}

func (b clientAPI) Subscribe(ctx context.Context, topic string, sub *clientpb.Subscribe, clientID, selector string) (string, error) {
	d, err := b.n.subscribe(ctx, topic, sub, clientID, selector)
	if err != nil {
		return "", err
	}
	return d.Name, nil
}

func (b clientAPI) DropDestination(name string) { b.n.dropDestination(name) }

func (b clientAPI) CreateTemporaryQueue(ctx context.Context, conn string) (string, error) {
	return b.n.createTemporaryQueue(ctx, conn)
}

func (b clientAPI) TemporaryOwner(addr string) string { return b.n.temporaryOwner(addr) }

func (b clientAPI) ClaimClientID(ctx context.Context, clientID, conn, instance string) error {
	return b.n.claimClientID(ctx, clientID, conn, instance)
}

func (b clientAPI) ReleaseClientID(clientID, conn string, first func(error)) {
	b.n.releaseClientID(clientID, conn, first)
}

func (a adminAPI) DeleteSubscription(ctx context.Context, topic, name, clientID string) error {
	return a.n.deleteSubscription(ctx, topic, name, clientID)
}

func (b clientAPI) PinConsumer(ctx context.Context, addr string) (string, error) {
	return b.n.pinConsumer(ctx, addr)
}

func (b clientAPI) MemberGroup(name string) string             { return b.n.memberGroup(name) }
func (b clientAPI) Host(name string) (*member.Replica, string) { return b.n.host(name) }
func (b clientAPI) ReleaseSession(name, id string, first func(error)) {
	b.n.releaseSession(name, id, first)
}

func (b clientAPI) SubmitAsync(name string, body proto.Message, done func(fsm.Result, error)) {
	b.n.submitAsync(name, body, done)
}

func (b clientAPI) SubmitRepeatable(name string, body proto.Message, done func(fsm.Result, error)) {
	b.n.submitRepeatable(name, body, done)
}

func (b clientAPI) SubmitRepeatableWait(ctx context.Context, name string, body proto.Message) (fsm.Result, error) {
	return b.n.submitRepeatableWait(ctx, name, body)
}

func (b clientAPI) CommitTx(ctx context.Context, session, tx, primary string, sends map[string][]*fsmpb.Message, acks []*clientpb.DeliveryRef) (bool, error) {
	return b.n.commitTx(ctx, session, tx, primary, sends, acks)
}

func (b clientAPI) TxDecision(ctx context.Context, primary, tx string) (bool, error) {
	return b.n.txDecision(ctx, primary, tx)
}

// adminAPI is the node's administration as the client API calls it.
type adminAPI struct{ n *Node }

func (a adminAPI) CreateDestination(ctx context.Context, req *clientpb.CreateDestinationRequest) (*fsmpb.Destination, error) {
	return a.n.createDestination(ctx, req)
}

func (a adminAPI) UpdateDestination(ctx context.Context, req *clientpb.UpdateDestinationRequest) (*fsmpb.Destination, error) {
	return a.n.updateDestination(ctx, req)
}

func (a adminAPI) DeleteDestination(ctx context.Context, name string) error {
	return a.n.deleteDestination(ctx, name)
}

func (a adminAPI) Destinations() []*fsmpb.Destination { return a.n.destinations() }

func (a adminAPI) DestinationInfo(ctx context.Context, d *fsmpb.Destination) *clientpb.DestinationInfo {
	return a.n.destinationInfo(ctx, d)
}

func (a adminAPI) Browse(ctx context.Context, member string, sel *selector.Selector, limit int) ([]fsm.MessageState, error) {
	return a.n.browse(ctx, member, sel, limit)
}

func (a adminAPI) Purge(ctx context.Context, addr string) (uint64, error) {
	return a.n.purge(ctx, addr)
}

func (a adminAPI) ClusterStatus(ctx context.Context) *clientpb.ClusterStatusResponse {
	return a.n.clusterStatus(ctx)
}

func (a adminAPI) RemoveNode(ctx context.Context, id string) error { return a.n.removeNode(ctx, id) }
func (a adminAPI) Leave(ctx context.Context) error                 { return a.n.Leave(ctx) }
func (a adminAPI) Decommission(ctx context.Context) (int, error)   { return a.n.Decommission(ctx) }

func (a adminAPI) Rebalance(ctx context.Context, apply bool) (*clientpb.RebalanceResponse, error) {
	return a.n.rebalance(ctx, apply)
}
