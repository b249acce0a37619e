package frontend

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/member"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// FuzzConnection_Frames: whatever frames a client sends on a Connect
// stream, each length-prefixed as gRPC carries it, a node decodes them as
// gRPC does and serves the connection to its end without a panic, and the
// stream ends once the client's side does.
func FuzzConnection_Frames(f *testing.F) {
	for _, seed := range connectionSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var frames [][]byte
		for len(data) > 0 {
			b, n := protowire.ConsumeBytes(data)
			if n < 0 {
				break
			}
			frames, data = append(frames, b), data[n:]
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- NewConnections(fuzzNode{}).Serve(&fuzzStream{ctx: ctx, frames: frames}) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the connection was still served a minute after its client's side ended")
		}
	})
}

// connectionSeeds are streams of every frame a client sends, in the order
// a client sends them, and a few that break the rules.
func connectionSeeds() [][]byte {
	msgs := []*clientpb.Message{{Body: []byte("hello"), Properties: map[string]string{"k": "v"}}}
	ops := []*clientpb.ClientFrame{
		{RequestId: 1, Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{ClientId: "app", ClientInstance: "i1"}}},
		{RequestId: 2, Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_CLIENT}}},
		{RequestId: 3, Op: &clientpb.ClientFrame_CreateConsumer{CreateConsumer: &clientpb.CreateConsumer{Session: 1, Consumer: 1, Destination: "q", Prefetch: 8, Selector: "k = 'v'"}}},
		{Op: &clientpb.ClientFrame_Credit{Credit: &clientpb.Credit{Consumer: 1, Messages: 4}}},
		{RequestId: 4, Op: &clientpb.ClientFrame_Send{Send: &clientpb.Send{Request: &clientpb.SendRequest{Destination: "q", Messages: msgs}, TimeoutMs: 100}}},
		{RequestId: 5, Op: &clientpb.ClientFrame_Acknowledge{Acknowledge: &clientpb.Acknowledge{Session: 1, Deliveries: []*clientpb.DeliveryRef{{Member: "q#0", DeliveryId: 1}}}}},
		{RequestId: 6, Op: &clientpb.ClientFrame_ReturnDeliveries{ReturnDeliveries: &clientpb.ReturnDeliveries{Session: 1, Deliveries: []*clientpb.DeliveryRef{{Member: "q#0", DeliveryId: 2}}}}},
		{RequestId: 7, Op: &clientpb.ClientFrame_Recover{Recover: &clientpb.RecoverSession{Session: 1}}},
		{RequestId: 8, Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: 2, AckMode: clientpb.AckMode_ACK_MODE_TRANSACTED}}},
		{RequestId: 9, Op: &clientpb.ClientFrame_TxSend{TxSend: &clientpb.TxSend{Session: 2, Send: &clientpb.SendRequest{Destination: "q", Messages: msgs}}}},
		{RequestId: 10, Op: &clientpb.ClientFrame_Commit{Commit: &clientpb.Commit{Session: 2, Tx: "tx1", Primary: "q#0"}}},
		{RequestId: 11, Op: &clientpb.ClientFrame_Rollback{Rollback: &clientpb.Rollback{Session: 2}}},
		{RequestId: 12, Op: &clientpb.ClientFrame_TxOutcome{TxOutcome: &clientpb.TxOutcome{Tx: "tx1", Primary: "q#0"}}},
		{RequestId: 13, Op: &clientpb.ClientFrame_CreateTemporaryQueue{CreateTemporaryQueue: &clientpb.CreateTemporaryQueue{}}},
		{RequestId: 14, Op: &clientpb.ClientFrame_CloseConsumer{CloseConsumer: &clientpb.CloseConsumer{Consumer: 1}}},
		{RequestId: 15, Op: &clientpb.ClientFrame_CloseSession{CloseSession: &clientpb.CloseSession{Session: 1}}},
	}
	stream := func(fs ...*clientpb.ClientFrame) []byte {
		var b []byte
		for _, f := range fs {
			raw, err := proto.Marshal(f)
			if err != nil {
				panic(err)
			}
			b = protowire.AppendBytes(b, raw)
		}
		return b
	}
	return [][]byte{
		stream(ops...),
		stream(ops[1:]...), // no Hello first
		stream(ops[0], ops[0], &clientpb.ClientFrame{RequestId: 2}),
		append(stream(ops[:3]...), 0x05, 0xff, 0xff, 0xff, 0xff, 0xff),
	}
}

// fuzzStream is a Connect stream whose client sent frames (each an
// encoded ClientFrame) and then half-closed; what the node sends is
// dropped.
type fuzzStream struct {
	grpc.ServerStream
	ctx    context.Context
	frames [][]byte
}

func (s *fuzzStream) Context() context.Context         { return s.ctx }
func (s *fuzzStream) Send(*clientpb.ServerFrame) error { return nil }
func (s *fuzzStream) Recv() (*clientpb.ClientFrame, error) {
	if len(s.frames) == 0 {
		return nil, io.EOF
	}
	b := s.frames[0]
	s.frames = s.frames[1:]
	f := &clientpb.ClientFrame{}
	if err := proto.Unmarshal(b, f); err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return f, nil
}

// fuzzNode is a node whose every member takes every command at once and
// whose sends and commits fail, so that a fuzzed connection reaches each
// frame's handling without a cluster.
type fuzzNode struct{}

var errFuzzNode = fmt.Errorf("%w: the fuzz target's node stores nothing", transport.ErrUnavailable)

var fuzzStopped = make(chan struct{})

func (fuzzNode) ID() string                                          { return "n1" }
func (fuzzNode) Owner() string                                       { return "n1/1" }
func (fuzzNode) Logger() *slog.Logger                                { return slog.New(slog.DiscardHandler) }
func (fuzzNode) Stopped() <-chan struct{}                            { return fuzzStopped }
func (fuzzNode) MaxWire() int                                        { return 1 << 20 }
func (fuzzNode) Limits() Limits                                      { return Limits{4, 4, 16, 16} }
func (fuzzNode) Authorize(context.Context, fsm.Action, string) error { return nil }
func (fuzzNode) ClientAddrs() []string                               { return []string{"127.0.0.1:7650"} }
func (fuzzNode) Send(context.Context, *clientpb.SendRequest) (*clientpb.SendResponse, error) {
	return nil, errFuzzNode
}
func (fuzzNode) ValidateSend(*clientpb.SendRequest) error { return nil }
func (fuzzNode) BuildMessages(_ *fsmpb.Destination, req *clientpb.SendRequest) ([]*fsmpb.Message, bool) {
	out := make([]*fsmpb.Message, len(req.Messages))
	for i, m := range req.Messages {
		out[i] = &fsmpb.Message{Id: fmt.Sprint("m", i), Body: m.Body}
	}
	return out, false
}
func (fuzzNode) MemberOf(context.Context, string, bool) (*fsmpb.Destination, int, error) {
	return nil, 0, errFuzzNode
}
func (fuzzNode) SendTarget(_ context.Context, req *clientpb.SendRequest) (*fsmpb.Destination, int, error) {
	return &fsmpb.Destination{Name: req.Destination, Members: []*fsmpb.MemberPlacement{{Index: 0}}}, -1, nil
}
func (fuzzNode) ChooseMember(*fsmpb.Destination) int                        { return 0 }
func (fuzzNode) PinConsumer(_ context.Context, addr string) (string, error) { return addr + "#0", nil }
func (fuzzNode) Subscribe(context.Context, string, *clientpb.Subscribe, string, string) (string, error) {
	return "", errFuzzNode
}
func (fuzzNode) DropDestination(string)                                       {}
func (fuzzNode) CreateTemporaryQueue(context.Context, string) (string, error) { return "tmp.n1.1", nil }
func (fuzzNode) TemporaryOwner(string) string                                 { return "" }
func (fuzzNode) ClaimClientID(context.Context, string, string, string) error  { return nil }
func (fuzzNode) ReleaseClientID(_, _ string, first func(error)) {
	if first != nil {
		first(nil)
	}
}
func (fuzzNode) MemberGroup(string) string                                   { return "g1" }
func (fuzzNode) Host(string) (*member.Replica, string)                       { return nil, "n2" }
func (fuzzNode) AttachRemote(string, *peerpb.Attach, Receiver) (Link, error) { return fuzzLink{}, nil }
func (fuzzNode) SubmitAsync(_ string, _ proto.Message, done func(fsm.Result, error)) {
	go done(fsm.Result{}, nil)
}
func (fuzzNode) SubmitRepeatable(_ string, _ proto.Message, done func(fsm.Result, error)) {
	go done(fsm.Result{}, nil)
}
func (fuzzNode) SubmitRepeatableWait(context.Context, string, proto.Message) (fsm.Result, error) {
	return fsm.Result{}, nil
}
func (fuzzNode) ReleaseSession(_, _ string, first func(error)) {
	if first != nil {
		first(nil)
	}
}
func (fuzzNode) CommitTx(context.Context, string, string, string, map[string][]*fsmpb.Message, []*clientpb.DeliveryRef) (bool, error) {
	return false, errFuzzNode
}
func (fuzzNode) TxDecision(context.Context, string, string) (bool, error) { return false, errFuzzNode }

// fuzzLink is a link to a member's host that carries nothing.
type fuzzLink struct{}

func (fuzzLink) Grant(int) {}
func (fuzzLink) Close()    {}
