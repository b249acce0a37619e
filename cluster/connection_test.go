package cluster

import (
	"errors"
	"io"
	"testing"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// After its Goodbye a connection keeps reading until the client half-closes
// it: a send that crossed the Goodbye on the wire is refused, so the client
// knows it was not stored, rather than left unanswered.
func TestConnection_SendAfterTheGoodbyeIsRefusedUntilTheClientHalfCloses(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := testCtx(t)
	r := openRaw(t, ctx, n)
	r.send(&clientpb.ClientFrame{RequestId: 1, Op: &clientpb.ClientFrame_Hello{Hello: &clientpb.Hello{}}})
	hello, err := r.reply(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := admin(t, n)
	if err := a.DestroyConnection(ctx, hello.GetHello().ConnectionId); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := r.st.Recv()
		if err != nil {
			t.Fatalf("stream ended before its Goodbye: %v", err)
		}
		if f.GetGoodbye() != nil {
			break
		}
	}
	send := &clientpb.SendRequest{Destination: "late", Messages: []*clientpb.Message{{Body: []byte("x")}}}
	r.send(&clientpb.ClientFrame{RequestId: 2, Op: &clientpb.ClientFrame_Send{Send: &clientpb.Send{Request: send}}})
	_, err = r.reply(2, nil)
	wantErr(t, "a send after the Goodbye", err, client.ErrUnavailable)
	if err := r.st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	// io.EOF: the node ended the stream for the half-close, not at the
	// goodbyeGrace cut-off (which ends it with a status).
	if f, err := r.st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("frame %v, err %v after the half-close; want the stream's orderly end", f, err)
	}
	if names := queueNames(t, a); len(names) != 0 {
		t.Fatalf("the refused send created %v", names)
	}
}
