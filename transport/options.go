package transport

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
)

// Flow-control windows of every gRPC connection Cairn opens, client and
// peer alike. Fixed windows turn off gRPC's bandwidth-delay estimator,
// which otherwise sends a PING whenever data arrives and no PING is
// outstanding: with a request and its answer per round trip, that was a
// PING and its ack on every send, on both ends of every hop (two more
// writes and two more reads per message for each end). The estimator would
// grow a window to at most 16 MiB; 4 MiB a stream and 16 MiB a connection
// cap nothing on a LAN. The Static options are gRPC's documented way to
// turn it off (grpc-go once made the plain window options leave it on, and
// means to again).
const (
	StreamWindowBytes     = 4 << 20
	ConnectionWindowBytes = 16 << 20
)

// DialOptions are what every client connection Cairn opens is dialled
// with: the windows, and the buffer pool for the frames it reads
// (bufpool.go).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindowBytes), grpc.WithStaticConnWindowSize(ConnectionWindowBytes), experimental.WithBufferPool(bufferPool)}
}

// ServerOptions are what every gRPC server of Cairn's starts with: the
// windows, and the buffer pool for the frames it reads (bufpool.go).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(StreamWindowBytes), grpc.StaticConnWindowSize(ConnectionWindowBytes), experimental.BufferPool(bufferPool)}
}
