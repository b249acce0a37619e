package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnmq/cairn/transport/clientpb"
)

// stuckNode answers a connection's Hello, session and consumer, then ends
// the stream as a node that cannot push a frame does.
type stuckNode struct {
	clientpb.UnimplementedClientServiceServer
	refusal string
}

func (n *stuckNode) Connect(stream clientpb.ClientService_ConnectServer) error {
	for {
		in, err := stream.Recv()
		if err != nil {
			return err
		}
		reply := &clientpb.Reply{RequestId: in.RequestId}
		switch in.Op.(type) {
		case *clientpb.ClientFrame_Hello:
			reply.Result = &clientpb.Reply_Hello{Hello: &clientpb.HelloResult{ConnectionId: "c1", NodeId: "stuck", MaxFrameBytes: 2 << 20}}
		case *clientpb.ClientFrame_CreateConsumer:
			reply.Result = &clientpb.Reply_CreateConsumer{CreateConsumer: &clientpb.CreateConsumerResult{Member: "q#0"}}
			if err := stream.Send(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Reply{Reply: reply}}); err != nil {
				return err
			}
			return status.Error(codes.ResourceExhausted, n.refusal)
		}
		if err := stream.Send(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Reply{Reply: reply}}); err != nil {
			return err
		}
	}
}

// A receive that cannot make progress fails with the reason, whatever its
// reconnect policy or timeout, instead of waiting in a silent loop.
func TestReceive_FailsWhenItCannotMakeProgress(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node := &stuckNode{refusal: "trying to send message larger than max (2097311 vs. 2097152)"}
	gs := grpc.NewServer()
	clientpb.RegisterClientServiceServer(gs, node)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	for _, args := range [][]string{
		{"receive", "q"},
		{"receive", "q", "--count", "5", "--timeout", "30s"},
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--server", lis.Addr().String()))
		done := make(chan error, 1)
		go func() { done <- root.Execute() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), node.refusal) {
				t.Errorf("cairn %s: %v; want an error with the node's refusal", strings.Join(args, " "), err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("cairn %s still runs after 20 s: it loops instead of failing", strings.Join(args, " "))
		}
	}
}
