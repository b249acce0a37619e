package transport

import "google.golang.org/grpc"

// Flow-control windows of every gRPC connection Cairn opens, client and
// peer alike. Setting them turns off gRPC's bandwidth-delay estimation,
// which otherwise sends a PING whenever data arrives and no PING is
// outstanding: with a request and its answer per round trip, that was a
// PING and its ack on every send, on both sides of every hop (two more
// writes and two more reads per message for each of the client, the
// front-end and the host). The estimator grows a window to at most 16 MiB;
// these are fixed at the sizes it would reach on a fast link, so throughput
// is not capped on one: a stream may have 4 MiB in flight, a connection 16
// MiB. (Measured in docs/performance.md, "No BDP pings".)
const (
	StreamWindowBytes     = 4 << 20
	ConnectionWindowBytes = 16 << 20
)

// DialWindows are the DialOptions that set the windows on a client.
func DialWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(StreamWindowBytes), grpc.WithInitialConnWindowSize(ConnectionWindowBytes)}
}

// ServerWindows are the ServerOptions that set the windows on a server.
func ServerWindows() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(StreamWindowBytes), grpc.InitialConnWindowSize(ConnectionWindowBytes)}
}
