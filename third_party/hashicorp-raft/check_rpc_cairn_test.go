package raft

import (
	"errors"
	"net"
	"testing"
	"time"
)

// Cairn: NetworkTransportConfig.CheckRPC sees each RPC with its connection
// before Raft does; an RPC it refuses never reaches the consumer and its
// sender gets no answer, while one it accepts is served as before.
func TestCairnCheckRPC_RefusedRPCsNeverReachRaft(t *testing.T) {
	var seenConn net.Conn
	refuse := "bad-leader"
	trans1, err := NewTCPTransportWithConfig("localhost:0", nil, &NetworkTransportConfig{
		MaxPool: 2, Timeout: time.Second, Logger: newTestLogger(t),
		CheckRPC: func(conn net.Conn, command interface{}) error {
			seenConn = conn
			if req, ok := command.(*AppendEntriesRequest); ok && string(req.RPCHeader.ID) == refuse {
				return errors.New("refused")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer trans1.Close()
	served := make(chan *AppendEntriesRequest, 4)
	go func() {
		for rpc := range trans1.Consumer() {
			req := rpc.Command.(*AppendEntriesRequest)
			served <- req
			rpc.Respond(&AppendEntriesResponse{Term: req.Term, Success: true}, nil)
		}
	}()
	trans2, err := NewTCPTransportWithConfig("localhost:0", nil, &NetworkTransportConfig{MaxPool: 2, Timeout: time.Second, Logger: newTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer trans2.Close()

	args := makeAppendRPC()
	args.RPCHeader.ID = []byte(refuse)
	var out AppendEntriesResponse
	if err := trans2.AppendEntries("id1", trans1.LocalAddr(), &args, &out); err == nil {
		t.Fatal("a refused AppendEntries was answered")
	}
	args.RPCHeader.ID = []byte("good-leader")
	if err := trans2.AppendEntries("id1", trans1.LocalAddr(), &args, &out); err != nil || !out.Success {
		t.Fatalf("an accepted AppendEntries: %v, %+v", err, out)
	}
	select {
	case req := <-served:
		if string(req.RPCHeader.ID) != "good-leader" {
			t.Fatalf("Raft was handed %q's RPC", req.RPCHeader.ID)
		}
	case <-time.After(time.Second):
		t.Fatal("the accepted RPC never reached Raft")
	}
	select {
	case req := <-served:
		t.Fatalf("Raft was handed a second RPC, %q's", req.RPCHeader.ID)
	default:
	}
	if seenConn == nil {
		t.Fatal("CheckRPC was given no connection")
	}
}
