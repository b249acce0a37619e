package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// fakeServer answers a connection's frames as a Cairn node would for the
// sends these tests make, and counts how each send arrived.
type fakeServer struct {
	clientpb.UnimplementedClientServiceServer
	addr, node string
	// maxFrame is what the Hello answer gives as max_frame_bytes.
	maxFrame uint64
	// dropFrames ends the stream on this many Send frames, unanswered.
	dropFrames int
	// script, when set, may take a frame over from the default answers:
	// conn counts the connections, from 1.
	script func(stream clientpb.ClientService_ConnectServer, conn int, in *clientpb.ClientFrame) (handled bool, err error)
	// holdFirst, when set, keeps the first connection's stream open after
	// the client half-closed it, until holdFirst is closed.
	holdFirst chan struct{}

	// accepted counts the TCP connections the fake node accepted; tcp
	// holds them, for breakConnections.
	accepted atomic.Int32
	tcp      *sync.Map
	// heartbeat, when set, sends each stream a heartbeat this often, as a
	// node does; without, every link falls silent after its silence limit.
	// silentStream, from 1, is a stream that gets none.
	heartbeat    time.Duration
	silentStream int

	mu sync.Mutex
	// host is the node a send's answer names as the member's host.
	host *fakeServer
	// directs counts the sends marked direct.
	directs int
	// clientIDs are the client ids of the Hellos, in order.
	clientIDs []string
	conns     int
	ended     int // streams ended
	hellos    int
	unary     int
	framed    int
	dedupes   []string
}

func startFakeServer(t testing.TB, maxFrame uint64, opts ...grpc.ServerOption) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{addr: lis.Addr().String(), maxFrame: maxFrame}
	f.node = "fake-" + f.addr
	// Opened as a node opens its client port (cluster.Start).
	gs := grpc.NewServer(append(append(transport.ServerOptions(), grpc.MaxRecvMsgSize(maxWireBytes)), opts...)...)
	clientpb.RegisterClientServiceServer(gs, f)
	f.tcp = new(sync.Map)
	go func() { _ = gs.Serve(countingListener{lis, &f.accepted, f.tcp}) }()
	t.Cleanup(gs.Stop)
	return f
}

type countingListener struct {
	net.Listener
	n    *atomic.Int32
	held *sync.Map
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
		l.held.Store(c, true)
	}
	return c, err
}

// breakConnections closes every TCP connection the fake node accepted, as
// a crash or a network failure does: no status, no Goodbye.
func (f *fakeServer) breakConnections() {
	f.tcp.Range(func(c, _ any) bool {
		_ = c.(net.Conn).Close()
		f.tcp.Delete(c)
		return true
	})
}

// lockedStream lets the heartbeat and the answers share a stream.
type lockedStream struct {
	clientpb.ClientService_ConnectServer
	mu sync.Mutex
}

func (s *lockedStream) Send(f *clientpb.ServerFrame) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ClientService_ConnectServer.Send(f)
}

func (f *fakeServer) answer(req *clientpb.SendRequest) *clientpb.SendResponse {
	resp := &clientpb.SendResponse{}
	if f.host != nil {
		resp.HostNode, resp.HostAddr = f.host.node, f.host.addr
	}
	if req.Direct {
		f.directs++
	}
	for _, m := range req.Messages {
		f.dedupes = append(f.dedupes, m.DedupId)
		resp.Results = append(resp.Results, &clientpb.SendResult{Id: m.Id, Member: req.Destination})
	}
	return resp
}

func (f *fakeServer) Send(_ context.Context, req *clientpb.SendRequest) (*clientpb.SendResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unary++
	return f.answer(req), nil
}

func (f *fakeServer) Connect(raw clientpb.ClientService_ConnectServer) error {
	stream := &lockedStream{ClientService_ConnectServer: raw}
	f.mu.Lock()
	f.conns++
	conn := f.conns
	f.mu.Unlock()
	if f.heartbeat > 0 && conn != f.silentStream {
		t := time.NewTicker(f.heartbeat)
		defer t.Stop()
		go func() {
			beat := &clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Heartbeat{Heartbeat: &clientpb.Heartbeat{}}}
			for {
				select {
				case <-raw.Context().Done():
					return
				case <-t.C:
					if stream.Send(beat) != nil {
						return
					}
				}
			}
		}()
	}
	defer func() {
		f.mu.Lock()
		f.ended++
		f.mu.Unlock()
	}()
	for {
		in, err := stream.Recv()
		if err != nil {
			if conn == 1 && f.holdFirst != nil {
				<-f.holdFirst
			}
			return err
		}
		if f.script != nil {
			if handled, err := f.script(stream, conn, in); err != nil || handled {
				if err != nil {
					return err
				}
				continue
			}
		}
		reply := &clientpb.Reply{RequestId: in.RequestId}
		switch op := in.Op.(type) {
		case *clientpb.ClientFrame_Hello:
			f.mu.Lock()
			f.hellos++
			f.clientIDs = append(f.clientIDs, op.Hello.ClientId)
			f.mu.Unlock()
			reply.Result = &clientpb.Reply_Hello{Hello: &clientpb.HelloResult{
				ConnectionId: "fake", NodeId: f.node, ClientAddrs: []string{f.addr}, MaxFrameBytes: f.maxFrame,
			}}
		case *clientpb.ClientFrame_Send:
			f.mu.Lock()
			f.framed++
			drop := f.dropFrames > 0
			if drop {
				f.dropFrames--
			} else {
				reply.Result = &clientpb.Reply_Send{Send: f.answer(op.Send.Request)}
			}
			f.mu.Unlock()
			if drop {
				// As a node ends a connection it closes: the status
				// wraps ErrUnavailable, which must not read as "not sent".
				return transport.Status(fmt.Errorf("%w: connection closed by node fake", transport.ErrUnavailable))
			}
		}
		if in.RequestId != 0 {
			if err := f.sendReply(stream, reply); err != nil {
				return err
			}
		}
	}
}

func (f *fakeServer) sendReply(stream clientpb.ClientService_ConnectServer, r *clientpb.Reply) error {
	return stream.Send(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Reply{Reply: r}})
}

func (f *fakeServer) counts() (unary, framed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unary, f.framed
}

func fakeProducer(t testing.TB, f *fakeServer) *Producer {
	t.Helper()
	_, p := dialFake(t, f, Options{ReconnectBlockingTime: 10 * time.Second})
	return p
}

// dialFake connects to the fake node with opts and opens a producer of
// queue q on an AutoAck session; the connection closes with the test.
func dialFake(t testing.TB, f *fakeServer, opts Options) (*Connection, *Producer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, []string{f.addr}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.Session(AutoAck)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Producer("q")
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

func TestSendBatch_GoesOnTheStreamOnlyWhereTheServerReadsItsFrame(t *testing.T) {
	big := make([]byte, 600<<10)
	for _, tc := range []struct {
		name               string
		maxFrame           uint64
		bodies             [][]byte
		wantUnary, wantFrm int
	}{
		{"a small send on a server that reads Send frames", 1 << 20, [][]byte{[]byte("x")}, 0, 1},
		{"a batch over the server's frame limit", 1 << 20, [][]byte{big, big}, 1, 0},
		{"a server that predates Send frames", 0, [][]byte{[]byte("x")}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFakeServer(t, tc.maxFrame)
			p := fakeProducer(t, f)
			var ms []*Message
			for _, b := range tc.bodies {
				ms = append(ms, &Message{Body: b})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rs, err := p.SendBatch(ctx, ms)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != len(ms) || rs[0].ID != ms[0].ID || rs[0].Member != "q" {
				t.Fatalf("receipts %+v for messages %s...", rs, ms[0].ID)
			}
			if u, fr := f.counts(); u != tc.wantUnary || fr != tc.wantFrm {
				t.Fatalf("%d unary calls and %d frames, want %d and %d", u, fr, tc.wantUnary, tc.wantFrm)
			}
		})
	}
}

// A stream lost after a Send frame left may have stored it: a plain send
// says so, and an idempotent one is sent again, with its dedup id, once the
// connection reconnected.
func TestSendBatch_StreamLostAfterTheFrameLeft(t *testing.T) {
	t.Run("plain send", func(t *testing.T) {
		f := startFakeServer(t, 1<<20)
		f.dropFrames = 1
		p := fakeProducer(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.Send(ctx, &Message{Body: []byte("x")})
		if !errors.Is(err, ErrDeliveryUnknown) {
			t.Fatalf("err = %v, want ErrDeliveryUnknown", err)
		}
	})
	t.Run("idempotent send", func(t *testing.T) {
		f := startFakeServer(t, 1<<20)
		f.dropFrames = 1
		p := fakeProducer(t, f)
		p.SetIdempotent(true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m := &Message{Body: []byte("x")}
		r, err := p.Send(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.framed != 2 || r.ID != m.ID || len(f.dedupes) != 1 || f.dedupes[0] != m.ID {
			t.Fatalf("%d frames, receipt %+v, dedup ids answered %v; want 2 frames and the message's id %s", f.framed, r, f.dedupes, m.ID)
		}
	})
}

// gRPC's own refusal of an oversized request is final, even for an
// idempotent send: sending it again, after a reconnect, would be refused
// the same way.
func TestSendBatch_OversizedIdempotentSendIsRefusedOnce(t *testing.T) {
	f := startFakeServer(t, 0, grpc.MaxRecvMsgSize(1<<20))
	p := fakeProducer(t, f)
	p.SetIdempotent(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.Send(ctx, &Message{Body: make([]byte, 2<<20)})
	if !errors.Is(err, ErrMessageTooLarge) || ctx.Err() != nil {
		t.Fatalf("err = %v (context: %v), want ErrMessageTooLarge at once", err, ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hellos != 1 {
		t.Fatalf("the connection said Hello %d times: it reconnected to send again", f.hellos)
	}
}

// A frame that never left, because its link was down, is known not sent:
// the producer may send it again whatever its dedup ids.
func TestSendOn_LinkDownBeforeTheFrameLeft(t *testing.T) {
	f := startFakeServer(t, 1<<20)
	p := fakeProducer(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := p.s.conn.awaitLink(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.close(errors.New("cut by the test"))
	req := &clientpb.SendRequest{Destination: "q", Messages: []*clientpb.Message{{Id: "m1", Body: []byte("x")}}}
	_, answered, err := sendOn(ctx, l, req, "m1")
	if answered || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDeliveryUnknown) {
		t.Fatalf("answered %v, err = %v; want a send known not to have left", answered, err)
	}
	if _, framed := f.counts(); framed != 0 {
		t.Fatalf("the server got %d Send frames", framed)
	}
}

// A node that refuses a send because it is stopping still answers the sends
// it is serving: the client waits for the node to end the link rather than
// closing it under them, then sends the refused one again elsewhere.
func TestSendBatch_StoppingNodeAnswersTheSendsInFlight(t *testing.T) {
	f := startFakeServer(t, 1<<20)
	var held *clientpb.ClientFrame // the first send, answered late
	f.script = func(stream clientpb.ClientService_ConnectServer, conn int, in *clientpb.ClientFrame) (bool, error) {
		if conn != 1 || in.GetSend() == nil {
			return false, nil
		}
		f.mu.Lock()
		first := held == nil
		if first {
			held = in
		}
		f.mu.Unlock()
		if first {
			return true, nil
		}
		refusal := &clientpb.Reply{RequestId: in.RequestId, Error: transport.ToProto(fmt.Errorf("%w: node fake is shutting down", transport.ErrNodeStopping))}
		if err := f.sendReply(stream, refusal); err != nil {
			return true, err
		}
		// A client that closed the link on the refusal cut the held
		// send off; give it time to do so.
		select {
		case <-stream.Context().Done():
			return true, stream.Context().Err()
		case <-time.After(200 * time.Millisecond):
		}
		f.mu.Lock()
		answer := &clientpb.Reply{RequestId: held.RequestId, Result: &clientpb.Reply_Send{Send: f.answer(held.GetSend().Request)}}
		f.mu.Unlock()
		if err := f.sendReply(stream, answer); err != nil {
			return true, err
		}
		if err := sayGoodbye(stream); err != nil {
			return true, err
		}
		return true, errors.New("stream ended after the goodbye")
	}
	p := fakeProducer(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := p.Send(ctx, &Message{Body: []byte("in flight")})
		first <- err
	}()
	eventuallyTrue(t, "the first send held by the node", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return held != nil
	})
	if _, err := p.Send(ctx, &Message{Body: []byte("refused")}); err != nil {
		t.Fatalf("the refused send, sent again after the reconnect: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the send in flight when the node refused another: %v", err)
	}
}

// Once the node said Goodbye, the client half-closes the link and no send
// goes out on it: the send goes on the next link.
func TestSendBatch_NoFrameAfterTheGoodbye(t *testing.T) {
	f := startFakeServer(t, 1<<20)
	afterGoodbye := 0
	f.script = func(stream clientpb.ClientService_ConnectServer, conn int, in *clientpb.ClientFrame) (bool, error) {
		switch {
		case conn != 1:
			return false, nil
		case in.GetOpenSession() != nil:
			if err := f.sendReply(stream, &clientpb.Reply{RequestId: in.RequestId}); err != nil {
				return true, err
			}
			return true, sayGoodbye(stream)
		case in.GetSend() != nil:
			f.mu.Lock()
			afterGoodbye++
			f.mu.Unlock()
			return true, nil // unanswered, as by a node that has ended
		}
		return false, nil
	}
	f.holdFirst = make(chan struct{})
	p := fakeProducer(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := duringGoodbye(t, f, p.s.conn, "the send", func() error {
		_, err := p.Send(ctx, &Message{Body: []byte("x")})
		return err
	})
	if err != nil {
		t.Fatalf("the send, on the next link: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if afterGoodbye != 0 || f.conns != 2 {
		t.Fatalf("%d Send frames went out on the link after its Goodbye; %d connections, want 2", afterGoodbye, f.conns)
	}
}

func sayGoodbye(stream clientpb.ClientService_ConnectServer) error {
	return stream.Send(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Goodbye{Goodbye: &clientpb.Goodbye{Reason: "node fake is shutting down"}}})
}

// duringGoodbye runs op once c's first link has read its Goodbye, while
// the fake node holds that link up (holdFirst): op must then wait for the
// link's end, not fail or go out on it. It returns op's error, once the
// link is released.
func duringGoodbye(t *testing.T, f *fakeServer, c *Connection, what string, op func() error) error {
	t.Helper()
	eventuallyTrue(t, "the goodbye read on the first link", func() bool {
		l, _, _ := c.state()
		return l != nil && l.gen == 1 && l.saidGoodbye()
	})
	done := make(chan error, 1)
	go func() { done <- op() }()
	// Room for op to find the link half-closed.
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while the first link was still up", what, err)
	case <-time.After(200 * time.Millisecond):
	}
	close(f.holdFirst)
	return <-done
}

func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The frame is sized with its request id: one that fits only without it
// would be refused by the node's gRPC, which ends the whole connection, so
// it goes as a unary call.
func TestSendOn_FrameSizedWithItsRequestID(t *testing.T) {
	const limit = 4096
	req := &clientpb.SendRequest{Destination: "q", Messages: []*clientpb.Message{{Id: "m1"}}}
	frame := &clientpb.ClientFrame{Op: &clientpb.ClientFrame_Send{Send: &clientpb.Send{Request: req}}}
	for proto.Size(frame) < limit {
		req.Messages[0].Body = append(req.Messages[0].Body, 'x')
	}
	if proto.Size(frame) != limit {
		t.Fatalf("could not size the frame to %d bytes exactly (got %d)", limit, proto.Size(frame))
	}
	f := startFakeServer(t, limit, grpc.MaxRecvMsgSize(limit))
	p := fakeProducer(t, f)
	l, err := p.s.conn.awaitLink(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	resp, _, err := sendOn(context.Background(), l, req, "m1")
	if err != nil || len(resp.GetResults()) != 1 {
		t.Fatalf("results %v, err %v", resp.GetResults(), err)
	}
	if u, fr := f.counts(); u != 1 || fr != 0 {
		t.Fatalf("%d unary calls and %d frames, want the unary call", u, fr)
	}
}

// A session opened while the node says Goodbye is opened on the next link,
// not refused: the half-closed link takes no frame.
func TestSession_OpenedDuringTheGoodbyeGoesToTheNextLink(t *testing.T) {
	f := startFakeServer(t, 1<<20)
	f.script = func(stream clientpb.ClientService_ConnectServer, conn int, in *clientpb.ClientFrame) (bool, error) {
		if conn != 1 || in.GetOpenSession() == nil {
			return false, nil
		}
		if err := f.sendReply(stream, &clientpb.Reply{RequestId: in.RequestId}); err != nil {
			return true, err
		}
		return true, sayGoodbye(stream)
	}
	f.holdFirst = make(chan struct{})
	p := fakeProducer(t, f)
	err := duringGoodbye(t, f, p.s.conn, "the session's opening", func() error {
		_, err := p.s.conn.Session(AutoAck)
		return err
	})
	if err != nil {
		t.Fatalf("a session opened during the goodbye: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns != 2 {
		t.Fatalf("%d connections, want the session on the second", f.conns)
	}
}

// BenchmarkSend compares a send as a unary call with one as a frame on the
// connection, against the fake node (no work behind the answer): what the
// gRPC layer costs per send, client and server in one process.
func BenchmarkSend(b *testing.B) {
	for _, bc := range []struct {
		name     string
		maxFrame uint64
	}{{"unary", 0}, {"frame", 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			p := fakeProducer(b, startFakeServer(b, bc.maxFrame))
			body := make([]byte, 1024)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := p.Send(ctx, &Message{Body: body}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
