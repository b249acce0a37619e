package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnmq/cairn/cluster/frontend"
	"github.com/cairnmq/cairn/test/wait"

	"google.golang.org/grpc"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// Promise 7: bad input gets a clear error, changes nothing, and the node
// keeps serving.

func TestBadInput_MessageOverMaxSizeIsRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir(), withMaxMessageBytes(1024)))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	p := mustProducer(t, s, "big")
	_, err := p.Send(ctx, &client.Message{Body: make([]byte, 1025)})
	wantErr(t, "1025-byte body", err, client.ErrMessageTooLarge)
	_, err = p.Send(ctx, &client.Message{Body: make([]byte, 1000), Properties: map[string]any{"k": strings.Repeat("v", 30)}})
	wantErr(t, "body and properties over the limit", err, client.ErrMessageTooLarge)
	// One bad message fails its whole batch.
	_, err = p.SendBatch(ctx, []*client.Message{{Body: []byte("fine")}, {Body: make([]byte, 2000)}})
	wantErr(t, "batch with one oversized message", err, client.ErrMessageTooLarge)
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("refused sends created queues: %v", names)
	}

	// At the limit is fine, and the node serves on.
	send(t, ctx, p, strings.Repeat("x", 1024))
	checkQueue(t, a, "big", 1, 0)
	if m := recv(t, mustConsumer(t, ctx, s, "big")); len(m.Body) != 1024 {
		t.Fatalf("got %d bytes", len(m.Body))
	}
	assertServes(t, n, "alive")
}

// A message larger than the gRPC receive limit (MaxMessageBytes + 1 MiB) is
// refused by gRPC itself before the server looks at it: still a known
// non-delivery, too large.
func TestBadInput_MessageOverTransportLimitIsTooLarge(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir(), withMaxMessageBytes(1024)))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	_, err := mustProducer(t, s, "huge").Send(ctx, &client.Message{Body: make([]byte, 1024+1<<20+1)})
	if err == nil {
		t.Fatal("a message over the transport limit was accepted")
	}
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("refused send created queues: %v", names)
	}
	assertServes(t, n, "alive")
	if !errors.Is(err, client.ErrMessageTooLarge) {
		t.Fatalf("a send refused by gRPC's own size limit returns %q, which does not match ErrMessageTooLarge", err)
	}
}

func TestBadInput_InvalidNamesAreRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	for _, name := range []string{"bad name", "", "a#b#c", "-dash", "q#01", "q#", "q#-1", "ünï"} {
		_, err := mustProducer(t, s, name).Send(ctx, &client.Message{Body: []byte("x")})
		wantErr(t, "send to "+name, err, client.ErrInvalidName)
		_, err = s.Consumer(ctx, name)
		wantErr(t, "consumer of "+name, err, client.ErrInvalidName)
		_, err = a.CreateQueue(ctx, name, client.QueueOptions{})
		wantErr(t, "create "+name, err, client.ErrInvalidName)
		_, err = a.ShowQueue(ctx, name)
		wantErr(t, "show "+name, err, client.ErrInvalidName)
		err = a.DeleteQueue(ctx, name)
		wantErr(t, "delete "+name, err, client.ErrInvalidName)
	}
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("invalid names created queues: %v", names)
	}
	assertServes(t, n, "alive")
}

func TestBadInput_UnknownDestinationWithoutAutoCreate(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir(), withNoAutoCreate()))
	ctx := testCtx(t)
	a := admin(t, n)

	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	for _, name := range []string{"ghost", "ghost#0"} {
		_, err := mustProducer(t, s, name).Send(ctx, &client.Message{Body: []byte("x")})
		wantErr(t, "send to "+name, err, client.ErrUnknownDestination)
		_, err = s.Consumer(ctx, name)
		wantErr(t, "consumer of "+name, err, client.ErrUnknownDestination)
		_, err = a.ShowQueue(ctx, name)
		wantErr(t, "show "+name, err, client.ErrUnknownDestination)
		_, err = a.PurgeQueue(ctx, name)
		wantErr(t, "purge "+name, err, client.ErrUnknownDestination)
	}
	wantErr(t, "delete ghost", a.DeleteQueue(ctx, "ghost"), client.ErrUnknownDestination)
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("unknown destinations were created: %v", names)
	}
	// The session that saw the errors still works once the queue exists.
	if _, err := a.CreateQueue(ctx, "ghost", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	send(t, ctx, mustProducer(t, s, "ghost"), "boo")
	if m := recv(t, mustConsumer(t, ctx, s, "ghost")); string(m.Body) != "boo" {
		t.Fatalf("got %q", m.Body)
	}
	assertServes(t, n, "alive")
}

func TestBadInput_FullQueueRefusesSends(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	// A message counts what it costs in memory (fsm.MessageCost), its
	// body's 60 bytes and about 600 more: one fits in 1,000 bytes, not two.
	if _, err := a.CreateQueue(ctx, "small", client.QueueOptions{MaxBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, n)
	s := mustSession(t, c, client.ClientAck)
	p := mustProducer(t, s, "small")
	send(t, ctx, p, strings.Repeat("a", 60))
	_, err := p.Send(ctx, &client.Message{Body: []byte(strings.Repeat("b", 60))})
	wantErr(t, "send over max bytes", err, client.ErrDestinationFull)
	q := checkQueue(t, a, "small", 1, 0)
	if q.MaxBytes != 1000 || q.Members[0].Bytes < 500+60 || q.Members[0].Bytes > 1000 {
		t.Fatalf("after the refused send: %+v", q)
	}
	// Room again once the first is consumed.
	k := mustConsumer(t, ctx, s, "small")
	m := recv(t, k)
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	send(t, ctx, p, strings.Repeat("c", 60))
	if m := recv(t, k); string(m.Body) != strings.Repeat("c", 60) {
		t.Fatalf("got %q", m.Body)
	}
}

// --max-messages bounds the messages a queue holds, each member its share.
func TestBadInput_QueueOfMaxMessagesRefusesSends(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	if _, err := a.CreateQueue(ctx, "few", client.QueueOptions{MaxMessages: 3}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, n)
	p := mustProducer(t, mustSession(t, c, client.ClientAck), "few")
	for i := range 3 {
		send(t, ctx, p, fmt.Sprint("m", i))
	}
	_, err := p.Send(ctx, &client.Message{Body: []byte("one too many")})
	wantErr(t, "a fourth message", err, client.ErrDestinationFull)
	if q := checkQueue(t, a, "few", 3, 0); q.MaxMessages != 3 {
		t.Fatalf("queue show: %+v, want max messages 3", q)
	}
	_, err = a.CreateQueue(ctx, "neg", client.QueueOptions{MaxMessages: -1})
	wantErr(t, "negative max messages", err, client.ErrInvalidArgument)
}

func TestBadInput_CreateQueueArguments(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	_, err := a.CreateQueue(ctx, "r3", client.QueueOptions{Replicas: 3})
	wantErr(t, "3 replicas on one node", err, client.ErrInvalidArgument)
	_, err = a.CreateQueue(ctx, "m65", client.QueueOptions{Members: 65})
	wantErr(t, "65 members", err, client.ErrInvalidArgument)
	_, err = a.CreateQueue(ctx, "neg", client.QueueOptions{TTL: -time.Second})
	wantErr(t, "negative ttl", err, client.ErrInvalidArgument)
	// Straight to the server, past the client's own check.
	_, err = rawClient(t, n).CreateDestination(ctx, &clientpb.CreateDestinationRequest{Name: "neg", MaxBytes: -1})
	wantErr(t, "negative max bytes", transport.FromStatus(err), client.ErrInvalidArgument)
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("refused creates made queues: %v", names)
	}

	if _, err := a.CreateQueue(ctx, "once", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, n)
	send(t, ctx, mustProducer(t, mustSession(t, c, client.AutoAck), "once"), "kept")
	_, err = a.CreateQueue(ctx, "once", client.QueueOptions{Members: 3, TTL: time.Second})
	wantErr(t, "create existing", err, client.ErrDestinationExists)
	q := checkQueue(t, a, "once", 1, 0)
	if len(q.Members) != 1 || q.TTLMillis != 0 {
		t.Fatalf("existing queue changed: %+v", q)
	}
	assertServes(t, n, "alive")
}

// Poison-message, forwarding and resize arguments out of bounds are
// refused with a clear error and create or change nothing.
func TestBadInput_QueueSettingsAndUpdates(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	_, err := a.CreateQueue(ctx, "p1", client.QueueOptions{RedeliveryBackoff: 101})
	wantErr(t, "backoff 101", err, client.ErrInvalidArgument)
	_, err = a.CreateQueue(ctx, "p2", client.QueueOptions{MaxDeliveries: 3, DeadLetterQueue: "no spaces"})
	wantErr(t, "dlq with a space", err, client.ErrInvalidName)
	_, err = a.CreateQueue(ctx, "p3", client.QueueOptions{DeadLetterQueue: "p3"})
	wantErr(t, "dlq is the queue itself", err, client.ErrInvalidArgument)
	_, err = a.CreateQueue(ctx, "p4", client.QueueOptions{RedeliveryDelay: 8 * 24 * time.Hour})
	wantErr(t, "delay over 7 days", err, client.ErrInvalidArgument)
	_, err = rawClient(t, n).CreateDestination(ctx, &clientpb.CreateDestinationRequest{Name: "p5", RedeliveryDelayMs: -1})
	wantErr(t, "negative delay", transport.FromStatus(err), client.ErrInvalidArgument)
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("refused creates made queues: %v", names)
	}

	_, err = a.UpdateQueue(ctx, "nope", 2)
	wantErr(t, "update of an unknown queue", err, client.ErrUnknownDestination)
	if _, err := a.CreateQueue(ctx, "u", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = a.UpdateQueue(ctx, "u", 65)
	wantErr(t, "65 members", err, client.ErrInvalidArgument)
	_, err = a.UpdateQueue(ctx, "u", 0)
	wantErr(t, "0 members", err, client.ErrInvalidArgument)
	_, err = a.UpdateQueueWith(ctx, "u", client.QueueUpdate{Replicas: 2})
	wantErr(t, "2 replicas on one node", err, client.ErrInvalidArgument)
	_, err = a.UpdateQueueWith(ctx, "u", client.QueueUpdate{Replicas: -1})
	wantErr(t, "-1 replicas", err, client.ErrInvalidArgument)
	_, err = a.UpdateQueueWith(ctx, "nope", client.QueueUpdate{Replicas: 1})
	wantErr(t, "replicas of an unknown queue", err, client.ErrUnknownDestination)
	if q := showQueue(t, a, "u"); len(q.Members) != 1 || q.Members[0].Draining || q.Replicas != 1 {
		t.Fatalf("refused updates changed the queue: %d replicas, %+v", q.Replicas, q.Members)
	}
	assertServes(t, n, "alive")
}

func TestBadInput_MalformedSendRequests(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	raw := rawClient(t, n)

	cases := []struct {
		what string
		req  *clientpb.SendRequest
		want error
	}{
		{"no messages", &clientpb.SendRequest{Destination: "raw"}, client.ErrMalformed},
		{"priority 12", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Body: []byte("x"), Priority: 12, PrioritySet: true}}}, client.ErrInvalidArgument},
		{"negative ttl", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Body: []byte("x"), TtlMs: -5}}}, client.ErrInvalidArgument},
		{"negative expiration", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Body: []byte("x"), ExpirationUnixMs: -5}}}, client.ErrInvalidArgument},
		{"empty property name", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Body: []byte("x"), Properties: map[string]string{"": "v"}}}}, client.ErrInvalidArgument},
		{"id over 256 bytes", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Id: strings.Repeat("i", 257), Body: []byte("x")}}}, client.ErrInvalidArgument},
		{"dedup id over 256 bytes", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{DedupId: strings.Repeat("d", 257), Body: []byte("x")}}}, client.ErrInvalidArgument},
		{"second message bad", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Body: []byte("ok")}, {Body: []byte("x"), Priority: 10}}}, client.ErrInvalidArgument},
		{"too many messages", &clientpb.SendRequest{Destination: "raw", Messages: make([]*clientpb.Message, MaxSendBatch+1)}, client.ErrMalformed},
		{"empty destination", &clientpb.SendRequest{Messages: []*clientpb.Message{{Body: []byte("x")}}}, client.ErrInvalidName},
		{"typed property without a value", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{TypedProperties: map[string]*clientpb.PropertyValue{"n": {}}}}}, client.ErrInvalidArgument},
		{"property both string and typed", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Properties: map[string]string{"n": "1"},
			TypedProperties: map[string]*clientpb.PropertyValue{"n": {Value: &clientpb.PropertyValue_Int{Int: 1}}}}}}, client.ErrInvalidArgument},
		{"correlation id over 256 bytes", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{CorrelationId: strings.Repeat("c", 257)}}}, client.ErrInvalidArgument},
		{"too many properties", &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Properties: numbered(DefaultMaxProperties + 1)}}}, client.ErrInvalidArgument},
	}
	for i := range cases[8].req.Messages {
		cases[8].req.Messages[i] = &clientpb.Message{Body: []byte("x")}
	}
	for _, tc := range cases {
		_, err := raw.Send(ctx, tc.req)
		wantErr(t, tc.what, transport.FromStatus(err), tc.want)
	}
	// The same requests as Send frames on a connection get the same
	// answers, and the connection stays.
	r := openRaw(t, ctx, n)
	if err := r.call(&clientpb.ClientFrame{RequestId: 1, Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{}}}); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		err := r.call(&clientpb.ClientFrame{RequestId: uint64(i) + 2, Op: &clientpb.ClientFrame_Send{Send: &clientpb.Send{Request: tc.req}}})
		wantErr(t, tc.what+" (frame)", err, tc.want)
	}
	err := r.call(&clientpb.ClientFrame{RequestId: 100, Op: &clientpb.ClientFrame_Send{Send: &clientpb.Send{}}})
	wantErr(t, "Send frame without a request", err, client.ErrMalformed)
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("malformed sends created queues: %v", names)
	}

	// Refused by the member itself: the same message id twice in a batch,
	// then an id the queue already holds. Neither stores anything.
	_, err = raw.Send(ctx, &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Id: "dup", Body: []byte("1")}, {Id: "dup", Body: []byte("2")}}})
	wantErr(t, "repeated id in a batch", transport.FromStatus(err), client.ErrInvalidArgument)
	checkQueue(t, a, "raw", 0, 0)
	if _, err := raw.Send(ctx, &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Id: "once", Body: []byte("1")}}}); err != nil {
		t.Fatal(err)
	}
	_, err = raw.Send(ctx, &clientpb.SendRequest{Destination: "raw", Messages: []*clientpb.Message{{Id: "new", Body: []byte("2")}, {Id: "once", Body: []byte("3")}}})
	wantErr(t, "id already stored", transport.FromStatus(err), client.ErrInvalidArgument)
	checkQueue(t, a, "raw", 1, 0)
	assertServes(t, n, "alive")
}

// rawStream is a Connect stream driven frame by frame.
type rawStream struct {
	t  *testing.T
	st clientpb.ClientService_ConnectClient
	id uint64 // the last request id next gave
}

func openRaw(t *testing.T, ctx context.Context, n *Node, opts ...grpc.DialOption) *rawStream {
	t.Helper()
	st, err := rawClient(t, n, opts...).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.CloseSend() })
	return &rawStream{t: t, st: st}
}

func (r *rawStream) send(f *clientpb.ClientFrame) {
	r.t.Helper()
	if err := r.st.Send(f); err != nil {
		r.t.Fatalf("send frame: %v", err)
	}
}

// reply waits for the reply to a request, collecting deliveries on the way.
func (r *rawStream) reply(id uint64, deliveries *[]*clientpb.Delivery) (*clientpb.Reply, error) {
	r.t.Helper()
	for {
		f, err := r.st.Recv()
		if err != nil {
			r.t.Fatalf("stream ended waiting for reply %d: %v", id, err)
		}
		switch fr := f.Frame.(type) {
		case *clientpb.ServerFrame_Reply:
			if fr.Reply.RequestId == id {
				return fr.Reply, transport.FromProto(fr.Reply.Error)
			}
		case *clientpb.ServerFrame_Deliveries:
			if deliveries != nil {
				*deliveries = append(*deliveries, fr.Deliveries.Messages...)
			}
		}
	}
}

// next makes a request frame of op (nil: none) with the next request id.
func (r *rawStream) next(op any) *clientpb.ClientFrame {
	r.id++
	f := &clientpb.ClientFrame{RequestId: r.id}
	switch op := op.(type) {
	case *clientpb.Hello:
		f.Op = &clientpb.ClientFrame_Hello{Hello: op}
	case *clientpb.OpenSession:
		f.Op = &clientpb.ClientFrame_OpenSession{OpenSession: op}
	case *clientpb.CloseSession:
		f.Op = &clientpb.ClientFrame_CloseSession{CloseSession: op}
	case *clientpb.CreateConsumer:
		f.Op = &clientpb.ClientFrame_CreateConsumer{CreateConsumer: op}
	case *clientpb.CloseConsumer:
		f.Op = &clientpb.ClientFrame_CloseConsumer{CloseConsumer: op}
	case *clientpb.Acknowledge:
		f.Op = &clientpb.ClientFrame_Acknowledge{Acknowledge: op}
	case *clientpb.RecoverSession:
		f.Op = &clientpb.ClientFrame_Recover{Recover: op}
	case *clientpb.ReturnDeliveries:
		f.Op = &clientpb.ClientFrame_ReturnDeliveries{ReturnDeliveries: op}
	case *clientpb.TxSend:
		f.Op = &clientpb.ClientFrame_TxSend{TxSend: op}
	case *clientpb.Commit:
		f.Op = &clientpb.ClientFrame_Commit{Commit: op}
	case *clientpb.Rollback:
		f.Op = &clientpb.ClientFrame_Rollback{Rollback: op}
	case *clientpb.TxOutcome:
		f.Op = &clientpb.ClientFrame_TxOutcome{TxOutcome: op}
	case nil:
	default:
		r.t.Fatalf("unknown op %T", op)
	}
	return f
}

// call sends a request and returns its reply's error.
func (r *rawStream) call(f *clientpb.ClientFrame) error {
	r.t.Helper()
	r.send(f)
	_, err := r.reply(f.RequestId, nil)
	return err
}

func TestBadInput_ConnectWithoutHelloIsMalformed(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)

	r := openRaw(t, ctx, n)
	r.send(&clientpb.ClientFrame{RequestId: 1, Op: &clientpb.ClientFrame_OpenSession{OpenSession: &clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_AUTO}}})
	_, err := r.st.Recv()
	if err == nil {
		t.Fatal("a stream without Hello got an answer frame")
	}
	wantErr(t, "first frame not Hello", transport.FromStatus(err), client.ErrMalformed)
	assertServes(t, n, "alive")
}

func TestBadInput_MalformedStreamFramesAreRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)

	r := openRaw(t, ctx, n)
	if err := r.call(r.next(&clientpb.Hello{})); err != nil {
		t.Fatalf("hello: %v", err)
	}
	for _, tc := range []struct {
		what string
		op   any
		want error
	}{
		{"consumer of a session never opened", &clientpb.CreateConsumer{Session: 99, Consumer: 1, Destination: "raw-q"}, transport.ErrUnknownSession},
		{"ack on a session never opened", &clientpb.Acknowledge{Session: 99, Deliveries: []*clientpb.DeliveryRef{{Member: "raw-q#0", DeliveryId: 1}}}, transport.ErrUnknownSession},
		{"recover of a session never opened", &clientpb.RecoverSession{Session: 99}, transport.ErrUnknownSession},
		{"close of a session never opened", &clientpb.CloseSession{Session: 99}, transport.ErrUnknownSession},
		{"return on a session never opened", &clientpb.ReturnDeliveries{Session: 99}, transport.ErrUnknownSession},
		{"close of a consumer never created", &clientpb.CloseConsumer{Consumer: 99}, transport.ErrUnknownSession},
		{"second hello", &clientpb.Hello{}, client.ErrMalformed},
		{"empty frame", nil, client.ErrMalformed},
		{"unknown ack mode", &clientpb.OpenSession{Session: 1}, client.ErrMalformed},
		{"transacted send on a session never opened", &clientpb.TxSend{Session: 99, Send: &clientpb.SendRequest{Destination: "raw-q", Messages: []*clientpb.Message{{Id: "x"}}}}, transport.ErrUnknownSession},
		{"transacted send without a send", &clientpb.TxSend{Session: 99}, client.ErrMalformed},
		{"commit on a session never opened", &clientpb.Commit{Session: 99, Tx: "t"}, transport.ErrUnknownSession},
		{"rollback on a session never opened", &clientpb.Rollback{Session: 99}, transport.ErrUnknownSession},
		{"outcome of a transaction whose primary is no member", &clientpb.TxOutcome{Tx: "t", Primary: "raw-q"}, transport.ErrCommitUnknown},
	} {
		wantErr(t, tc.what, r.call(r.next(tc.op)), tc.want)
	}
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("refused frames created queues: %v", names)
	}

	// The same stream still works: open a session, then refuse what is
	// wrong inside it.
	if err := r.call(r.next(&clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_CLIENT})); err != nil {
		t.Fatalf("open session: %v", err)
	}
	wantErr(t, "session opened twice", r.call(r.next(&clientpb.OpenSession{Session: 1, AckMode: clientpb.AckMode_ACK_MODE_CLIENT})), client.ErrMalformed)
	wantErr(t, "prefetch over the maximum", r.call(r.next(&clientpb.CreateConsumer{Session: 1, Consumer: 1, Destination: "raw-q", Prefetch: frontend.MaxPrefetch + 1})), client.ErrInvalidArgument)
	wantErr(t, "consumer of an invalid name", r.call(r.next(&clientpb.CreateConsumer{Session: 1, Consumer: 1, Destination: "raw q"})), client.ErrInvalidName)

	if _, err := rawClient(t, n).Send(ctx, &clientpb.SendRequest{Destination: "raw-q", Messages: []*clientpb.Message{{Id: "m1", Body: []byte("hello")}}}); err != nil {
		t.Fatal(err)
	}
	var got []*clientpb.Delivery
	f := r.next(&clientpb.CreateConsumer{Session: 1, Consumer: 1, Destination: "raw-q", Prefetch: 1})
	r.send(f)
	if _, err := r.reply(f.RequestId, &got); err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	for len(got) == 0 {
		fr, err := r.st.Recv()
		if err != nil {
			t.Fatalf("waiting for a delivery: %v", err)
		}
		if ds := fr.GetDeliveries(); ds != nil {
			got = append(got, ds.Messages...)
		}
	}
	d := got[0]
	if d.Id != "m1" || d.Member != "raw-q#0" {
		t.Fatalf("delivery: %+v", d)
	}
	// Acks the session cannot make: a member it holds nothing of, a
	// delivery it does not hold. Neither changes anything.
	wantErr(t, "ack of a member the session holds nothing of", r.call(r.next(&clientpb.Acknowledge{Session: 1, Deliveries: []*clientpb.DeliveryRef{{Member: "other#0", DeliveryId: d.DeliveryId}}})), client.ErrLostServer)
	wantErr(t, "ack of a delivery the session does not hold", r.call(r.next(&clientpb.Acknowledge{Session: 1, Deliveries: []*clientpb.DeliveryRef{{Member: d.Member, DeliveryId: d.DeliveryId + 100}}})), client.ErrLostServer)
	checkQueue(t, a, "raw-q", 0, 1)
	if err := r.call(r.next(&clientpb.Acknowledge{Session: 1, Deliveries: []*clientpb.DeliveryRef{{Member: d.Member, DeliveryId: d.DeliveryId}}})); err != nil {
		t.Fatalf("real ack: %v", err)
	}
	checkQueue(t, a, "raw-q", 0, 0)
	assertServes(t, n, "alive")
}

// Promise 7: an address naming a member that does not exist is refused, and
// the refusal must change nothing. memberOf auto-creates NAME before it
// checks the index.
func TestBadInput_MemberIndexOfNewQueueCreatesNothing(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	c := dial(t, n)
	s := mustSession(t, c, client.AutoAck)
	p := mustProducer(t, s, "fresh#5")
	_, err := p.Send(ctx, &client.Message{Body: []byte("x")})
	wantErr(t, "send to a member index that does not exist", err, client.ErrUnknownDestination)
	if names := queueNames(t, a); slices.Contains(names, "fresh") {
		t.Fatalf("a refused send to fresh#5 created queue fresh: %v", names)
	}
}

// A time to live over 100 years, or an expiration after 2200-01-01, is
// refused: expirations are kept in Unix nanoseconds, and the bound keeps
// every computation far from int64's limit (cluster/send.go). The send
// fails with ErrInvalidArgument saying "beyond the year 2200", through the
// unary Send, a connection's Send frame and the client library alike; its
// whole batch is refused and nothing is stored, not even the queue it
// would have made.
func TestBadInput_HugeTTLIsRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	raw := rawClient(t, n)
	const refusal = "time to live or expiration beyond the year 2200"
	msg := func(m *clientpb.Message) *clientpb.SendRequest {
		m.Body = []byte("x")
		return &clientpb.SendRequest{Destination: "ttlq", Messages: []*clientpb.Message{m}}
	}
	cases := []struct {
		what string
		req  *clientpb.SendRequest
	}{
		{"ttl of 584 years (past int64 nanoseconds)", msg(&clientpb.Message{Id: "big", TtlMs: 18_446_744_073_709})},
		{"ttl 1 ms over 100 years", msg(&clientpb.Message{TtlMs: maxTTLMillis + 1})},
		{"ttl of MaxInt64 ms", msg(&clientpb.Message{TtlMs: math.MaxInt64})},
		{"expiration 1 ms after 2200-01-01", msg(&clientpb.Message{ExpirationUnixMs: maxExpirationUnixMs + 1})},
		{"expiration of MaxInt64 ms", msg(&clientpb.Message{ExpirationUnixMs: math.MaxInt64})},
		{"a fine message, then one with a ttl over 100 years", &clientpb.SendRequest{Destination: "ttlq", Messages: []*clientpb.Message{
			{Body: []byte("fine")}, {Body: []byte("x"), TtlMs: maxTTLMillis + 1}}}},
	}
	refused := func(what string, err error) {
		t.Helper()
		wantErr(t, what, err, client.ErrInvalidArgument)
		if !strings.Contains(err.Error(), refusal) {
			t.Errorf("%s: refused with %q; want it to say %q", what, err, refusal)
		}
	}
	for _, tc := range cases {
		_, err := raw.Send(ctx, tc.req)
		refused(tc.what, transport.FromStatus(err))
	}
	r := openRaw(t, ctx, n)
	if err := r.call(r.next(&clientpb.Hello{})); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		f := r.next(nil)
		f.Op = &clientpb.ClientFrame_Send{Send: &clientpb.Send{Request: tc.req}}
		refused(tc.what+" (frame)", r.call(f))
	}
	p := mustProducer(t, mustSession(t, dial(t, n), client.AutoAck), "ttlq")
	if err := p.SetTimeToLive(101 * 365 * 24 * time.Hour); err != nil {
		t.Fatal(err)
	}
	_, err := p.Send(ctx, &client.Message{Body: []byte("x")})
	refused("a producer's ttl of 101 years", err)
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("refused sends created queues: %v", names)
	}
	assertServes(t, n, "alive")
}

// At the bounds, a time to live of 100 years and an expiration of
// 2200-01-01 are taken: the messages are stored, not expired, and come
// with the expirations they were given.
func TestBadInput_TTLAndExpirationAtTheBoundsAreKept(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	a := admin(t, n)
	raw := rawClient(t, n)
	sentAt := time.Now()
	if _, err := raw.Send(ctx, &clientpb.SendRequest{Destination: "ttlq", Messages: []*clientpb.Message{
		{Id: "ttl", Body: []byte("x"), TtlMs: maxTTLMillis},
		{Id: "expiration", Body: []byte("x"), ExpirationUnixMs: maxExpirationUnixMs},
	}}); err != nil {
		t.Fatalf("send with a ttl of 100 years and an expiration of 2200-01-01: %v", err)
	}
	checkQueue(t, a, "ttlq", 2, 0)
	k := mustConsumer(t, ctx, mustSession(t, dial(t, n), client.AutoAck), "ttlq")
	for _, m := range recvN(t, k, 2) {
		var low, high time.Time
		switch m.ID {
		case "ttl":
			low, high = sentAt.Add(maxTTLMillis*time.Millisecond), time.Now().Add(maxTTLMillis*time.Millisecond)
		case "expiration":
			low = time.UnixMilli(maxExpirationUnixMs)
			high = low
		default:
			t.Fatalf("received %s, which was not sent", m.ID)
		}
		if m.Expiration.Before(low.Truncate(time.Millisecond)) || m.Expiration.After(high) {
			t.Errorf("message %s expires at %v; want between %v and %v", m.ID, m.Expiration, low, high)
		}
	}
}

// numbered is n properties named p0, p1, ...
func numbered(n int) map[string]string {
	props := make(map[string]string, n)
	for i := range n {
		props[fmt.Sprint("p", i)] = "v"
	}
	return props
}

// A connection holds at most --max-sessions sessions and --max-consumers
// consumers: one more is refused with ErrLimitReached, changes nothing,
// and the connection goes on; closing one makes room.
func TestBadInput_ConnectionLimits(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir(), func(c *Config) { c.MaxSessions, c.MaxConsumers = 2, 2 }))
	ctx := testCtx(t)
	c := dial(t, n)
	first, second := mustSession(t, c, client.AutoAck), mustSession(t, c, client.AutoAck)
	_, err := c.Session(client.AutoAck)
	wantErr(t, "a third session", err, client.ErrLimitReached)
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	s := mustSession(t, c, client.AutoAck)
	mustConsumer(t, ctx, first, "a")
	k := mustConsumer(t, ctx, s, "b")
	_, err = first.Consumer(ctx, "c")
	wantErr(t, "a third consumer", err, client.ErrLimitReached)
	if names := queueNames(t, admin(t, n)); len(names) != 2 {
		t.Fatalf("a refused consumer made a queue: %v", names)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	send(t, ctx, mustProducer(t, first, "c"), "x")
	if m := recv(t, mustConsumer(t, ctx, first, "c")); string(m.Body) != "x" {
		t.Fatalf("got %q", m.Body)
	}
}

// A node serves at most --max-connections client connections, and at most
// --max-connections-per-host from one host: one more is refused with
// ErrLimitReached, naming the limit, and taken once another has closed.
func TestBadInput_NodeConnectionLimits(t *testing.T) {
	t.Parallel()
	for flag, limit := range map[string]func(*Config){
		"--max-connections":          func(c *Config) { c.MaxConnections = 2 },
		"--max-connections-per-host": func(c *Config) { c.MaxConnectionsPerHost = 2 },
	} {
		t.Run(flag, func(t *testing.T) {
			n := startNode(t, TestConfig(t, t.TempDir(), limit))
			first := dial(t, n)
			dial(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := client.Dial(ctx, []string{n.Addrs().Client}, client.Options{})
			wantErr(t, "a third connection", err, client.ErrLimitReached)
			if err != nil && !strings.Contains(err.Error(), flag+")") {
				t.Errorf("the refusal does not name %s: %v", flag, err)
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			wait.For(t, 10*time.Second, "a connection once another closed", func() bool {
				c, err := client.Dial(ctx, []string{n.Addrs().Client}, client.Options{})
				if err == nil {
					c.Close()
				}
				return err == nil
			})
		})
	}
}
