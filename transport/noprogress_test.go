package transport

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// pushNode answers a Connect stream by pushing one frame of a body of
// size bytes and then ending the stream with end (nil: holding it open).
type pushNode struct {
	clientpb.UnimplementedClientServiceServer
	size int
	end  error
}

func (n *pushNode) Connect(stream clientpb.ClientService_ConnectServer) error {
	f := &clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Deliveries{Deliveries: &clientpb.Deliveries{Messages: []*clientpb.Delivery{{Body: make([]byte, n.size)}}}}}
	if err := stream.Send(f); err != nil {
		return err
	}
	if n.end != nil {
		return n.end
	}
	<-stream.Context().Done()
	return nil
}

// streamEnd opens a Connect stream to a node run with serverOpts, reads
// until the stream fails, and returns the failure; stop, when set, is
// called once the first frame came.
func streamEnd(t *testing.T, node *pushNode, serverOpts []grpc.ServerOption, callOpts []grpc.CallOption, stop func(*grpc.Server)) error {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(serverOpts...)
	clientpb.RegisterClientServiceServer(gs, node)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := clientpb.NewClientServiceClient(cc).Connect(ctx, callOpts...)
	if err != nil {
		t.Fatal(err)
	}
	for first := true; ; first = false {
		if _, err := st.Recv(); err != nil {
			return err
		}
		if first && stop != nil {
			stop(gs)
		}
	}
}

// A stream's end is reported as one a reconnect cannot get past only for
// gRPC's own refusals of a frame's size and a Cairn node's typed refusals:
// a node that goes away, or ends the stream as unavailable, is reconnected
// to, and so is a reset, whose codes overlap with the refusals'.
func TestNoProgress_OnlyRefusalsThatWouldRecur(t *testing.T) {
	cases := []struct {
		what       string
		node       *pushNode
		serverOpts []grpc.ServerOption
		callOpts   []grpc.CallOption
		stop       func(*grpc.Server)
		want       bool
	}{
		{"node refuses to send a frame over its limit", &pushNode{size: 1000}, []grpc.ServerOption{grpc.MaxSendMsgSize(100)}, nil, nil, true},
		{"client refuses a frame over its limit", &pushNode{size: 1000}, nil, []grpc.CallOption{grpc.MaxCallRecvMsgSize(100)}, nil, true},
		{"node's typed refusal", &pushNode{size: 1, end: Status(fmt.Errorf("%w: no Hello", ErrMalformed))}, nil, nil, nil, true},
		{"node stopping", &pushNode{size: 1, end: Status(fmt.Errorf("%w: node n1 is shutting down", ErrNodeStopping))}, nil, nil, nil, false},
		{"connection closed by node", &pushNode{size: 1, end: Status(fmt.Errorf("%w: connection closed by node n1", ErrUnavailable))}, nil, nil, nil, false},
		{"node gone", &pushNode{size: 1}, nil, nil, func(gs *grpc.Server) { gs.Stop() }, false},
		{"reset, as gRPC reports an RST_STREAM", &pushNode{size: 1, end: status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR")}, nil, nil, nil, false},
		{"reset for calm", &pushNode{size: 1, end: status.Error(codes.ResourceExhausted, "stream terminated by RST_STREAM with error code: ENHANCE_YOUR_CALM")}, nil, nil, nil, false},
		{"proxy's failure", &pushNode{size: 1, end: status.Error(codes.Unimplemented, "unexpected HTTP status code received from server: 404 (Not Found)")}, nil, nil, nil, false},
	}
	for _, c := range cases {
		err := streamEnd(t, c.node, c.serverOpts, c.callOpts, c.stop)
		if got := NoProgress(err); got != c.want {
			t.Errorf("%s: stream ended with %v; NoProgress = %v, want %v", c.what, err, got, c.want)
		}
	}
	if NoProgress(nil) || NoProgress(context.Canceled) {
		t.Error("NoProgress of nil or a context error is true")
	}
}
