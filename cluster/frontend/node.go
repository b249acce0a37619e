package frontend

import (
	"context"
	"log/slog"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// Node is what the front-end asks of the node it runs on: who it is, the
// routing and relaying of member commands, and the transaction
// coordinator. Package cluster implements it.
type Node interface {
	// ID is the node's id; Owner names this run of it, as the sessions it
	// opens on members record.
	ID() string
	Owner() string
	Logger() *slog.Logger
	// Stopped is closed when the node stops.
	Stopped() <-chan struct{}
	// MaxWire bounds one frame on a client stream.
	MaxWire() int
	// Limits are what one connection may hold.
	Limits() Limits
	// Authorize says whether the connection of ctx may do act on dest:
	// ErrNotAuthorised (or ErrNotAuthenticated) if not; nil on a node
	// without authentication.
	Authorize(ctx context.Context, act fsm.Action, dest string) error
	// ClientAddrs are the client addresses of the live nodes, this node's
	// first: a client reconnects to them when it loses this node.
	ClientAddrs() []string

	// Send stores a Send request's messages on a member and waits for the
	// commit; ValidateSend checks one; BuildMessages makes its messages
	// for destination d (idempotent: every one has a dedup id).
	Send(ctx context.Context, req *clientpb.SendRequest) (*clientpb.SendResponse, error)
	ValidateSend(req *clientpb.SendRequest) error
	BuildMessages(d *fsmpb.Destination, req *clientpb.SendRequest) (msgs []*fsmpb.Message, idempotent bool)
	// MemberOf resolves an address (NAME or NAME#I: index -1 for a plain
	// name), creating the destination on first use when create allows.
	MemberOf(ctx context.Context, addr string, create bool) (*fsmpb.Destination, int, error)
	// SendTarget is the destination a send goes to (a queue, made on
	// first use) or a publish (a topic), and the member it names (-1: any).
	SendTarget(ctx context.Context, req *clientpb.SendRequest) (*fsmpb.Destination, int, error)
	// ChooseMember is the router's member for a command to d that waits
	// for its member's host.
	ChooseMember(d *fsmpb.Destination) int
	// PinConsumer is the member a new consumer of addr is pinned to.
	PinConsumer(ctx context.Context, addr string) (string, error)
	// Subscribe finds or makes the subscription to topic a consumer asks
	// for and returns its name (TOPIC::ID) once it takes the topic's
	// publishes. DropDestination deletes, in the background, a destination
	// whose life ended with its consumer's (a non-durable subscription) or
	// its connection's (a temporary queue).
	Subscribe(ctx context.Context, topic string, sub *clientpb.Subscribe, clientID, selector string) (string, error)
	DropDestination(name string)
	// CreateTemporaryQueue makes a temporary queue for the connection of
	// that id; TemporaryOwner names the connection (Owner()/id) a
	// temporary queue belongs to, "" for any other destination.
	CreateTemporaryQueue(ctx context.Context, conn string) (string, error)
	TemporaryOwner(addr string) string
	// ClaimClientID gives a client id to the connection of that id, for
	// the client instance (the same across its reconnects): refused with
	// ErrClientIDInUse while another connection of the cluster holds it.
	// ReleaseClientID lets it go, calling first after the first try (in
	// the background it tries again if that failed).
	ClaimClientID(ctx context.Context, clientID, conn, instance string) error
	ReleaseClientID(clientID, conn string, first func(error))
	// MemberGroup is the Raft group of member name ("" if none): it
	// changes when the member is renewed.
	MemberGroup(name string) string
	// Host is where member name's host is: this node's replica, or
	// another node's id; both empty while none is known.
	Host(name string) (*member.Replica, string)
	// AttachRemote links a consumer to member's host on node.
	AttachRemote(node string, attach *peerpb.Attach, to Receiver) (Link, error)

	// SubmitAsync, SubmitRepeatable and SubmitRepeatableWait relay a
	// member command to its host (package cluster, relay.go).
	SubmitAsync(name string, body proto.Message, done func(fsm.Result, error))
	SubmitRepeatable(name string, body proto.Message, done func(fsm.Result, error))
	SubmitRepeatableWait(ctx context.Context, name string, body proto.Message) (fsm.Result, error)
	// ReleaseSession returns what session id holds on member name to
	// pending, retrying until the member says so; first, if not nil, gets
	// the first try's outcome.
	ReleaseSession(name, id string, first func(error))

	// CommitTx runs a transaction's two phases on its members;
	// TxDecision asks a transaction's primary for its decision.
	CommitTx(ctx context.Context, session, tx, primary string, sends map[string][]*fsmpb.Message, acks []*clientpb.DeliveryRef) (bool, error)
	TxDecision(ctx context.Context, primary, tx string) (bool, error)
}

// Link carries a member's deliveries to one consumer from the member's
// host: Grant gives the host room for n more, Close ends the link.
type Link interface {
	Grant(n int)
	Close()
}

// Receiver takes what a link receives: Push hands deliveries to the
// consumer (false: it left, and the link gives them back with GiveBack),
// and Ended says the link ended, and why.
type Receiver interface {
	Push(ds []fsm.Delivery) bool
	GiveBack(ds []fsm.Delivery)
	Ended(err error)
}
