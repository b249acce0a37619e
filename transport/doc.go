// Package transport owns what crosses the network: the client API's protobuf
// definitions and generated code (clientpb), the stream multiplexer that lets
// every Raft group of a node share one port (raftmux), the one table that
// maps Cairn's typed errors to gRPC statuses and back (errors.go), the
// flow-control windows every gRPC connection is opened with (options.go),
// the buffer pool gRPC reads and marshals messages into (bufpool.go), and
// the Outbox a stream's writer drains (outbox.go).
//
// It holds no broker logic: the services are implemented by packages
// cluster and cluster/frontend and called by package client.
package transport
