package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// fakeServer answers a connection's frames as a Cairn node would for the
// sends these tests make, and counts how each send arrived.
type fakeServer struct {
	clientpb.UnimplementedClientServiceServer
	addr string
	// maxFrame is what the Hello answer gives as max_frame_bytes.
	maxFrame uint64
	// dropFrames ends the stream on this many Send frames, unanswered.
	dropFrames int

	mu      sync.Mutex
	hellos  int
	unary   int
	framed  int
	dedupes []string
}

func startFakeServer(t *testing.T, maxFrame uint64, opts ...grpc.ServerOption) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{addr: lis.Addr().String(), maxFrame: maxFrame}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(maxWireBytes)}, opts...)...)
	clientpb.RegisterClientServiceServer(gs, f)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return f
}

func (f *fakeServer) answer(req *clientpb.SendRequest) *clientpb.SendResponse {
	resp := &clientpb.SendResponse{}
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

func (f *fakeServer) Connect(stream clientpb.ClientService_ConnectServer) error {
	for {
		in, err := stream.Recv()
		if err != nil {
			return err
		}
		reply := &clientpb.Reply{RequestId: in.RequestId}
		switch op := in.Op.(type) {
		case *clientpb.ClientFrame_Hello:
			f.mu.Lock()
			f.hellos++
			f.mu.Unlock()
			reply.Result = &clientpb.Reply_Hello{Hello: &clientpb.HelloResult{
				ConnectionId: "fake", NodeId: "fake", ClientAddrs: []string{f.addr}, MaxFrameBytes: f.maxFrame,
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
			if err := stream.Send(&clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Reply{Reply: reply}}); err != nil {
				return err
			}
		}
	}
}

func (f *fakeServer) counts() (unary, framed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unary, f.framed
}

func fakeProducer(t *testing.T, f *fakeServer) *Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, []string{f.addr}, Options{ReconnectBlockingTime: 10 * time.Second})
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
	return p
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
