package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// runHold runs a hold on a stub of its own; the caller feeds input.
func runHold(t *testing.T, input chan *stream.StreamChunk, output chan *stream.StreamChunk) *toxics.ToxicStub {
	t.Helper()
	toxic := new(holdToxic)
	stub := toxics.NewToxicStub(input, output)
	stub.State = toxic.NewState()
	go stub.Run(&toxics.ToxicWrapper{Toxic: toxic, Type: "hold", Toxicity: 1})
	return stub
}

// drained waits until the hold took everything fed to it.
func drained(t *testing.T, input chan *stream.StreamChunk) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(input) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the hold took nothing in 10 s (%d chunks wait)", len(input))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHold_LetsThroughInOrderWhenLifted(t *testing.T) {
	input := make(chan *stream.StreamChunk, 8)
	output := make(chan *stream.StreamChunk, 8)
	stub := runHold(t, input, output)
	for _, s := range []string{"a", "b", "c"} {
		input <- &stream.StreamChunk{Data: []byte(s)}
	}
	input <- nil // the source ended
	drained(t, input)
	if n := len(output); n != 0 {
		t.Fatalf("%d chunks passed the cut", n)
	}
	if !stub.InterruptToxic() {
		t.Fatal("the hold's stub closed before the cut was lifted")
	}
	new(holdToxic).Cleanup(stub)
	var got []string
	for c := range output { // closed after the held end
		got = append(got, string(c.Data))
	}
	if strings.Join(got, "") != "abc" {
		t.Fatalf("after the cut: %q, want a, b, c", got)
	}
}

func TestHold_KeepsALiveLinkOpen(t *testing.T) {
	input := make(chan *stream.StreamChunk, 8)
	output := make(chan *stream.StreamChunk, 8)
	stub := runHold(t, input, output)
	input <- &stream.StreamChunk{Data: []byte("x")}
	drained(t, input)
	stub.InterruptToxic()
	new(holdToxic).Cleanup(stub)
	if stub.Closed() {
		t.Fatal("a live link was closed when its cut was lifted")
	}
	if c := <-output; string(c.Data) != "x" {
		t.Fatalf("after the cut: %q, want x", c.Data)
	}
}

// A hold takes in holdCap chunks and lets the rest wait in front of it, as
// a partition's full windows make a sender wait; lifted, it passes all of
// them in order.
func TestHold_TakesInItsCapThenLetsTheSourceWait(t *testing.T) {
	const more = 10
	input := make(chan *stream.StreamChunk, holdCap+more)
	output := make(chan *stream.StreamChunk, holdCap+more)
	stub := runHold(t, input, output)
	for i := range holdCap + more {
		input <- &stream.StreamChunk{Data: []byte{byte(i)}}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(input) > more {
		if time.Now().After(deadline) {
			t.Fatalf("the hold took %d chunks in 10 s, want %d", holdCap+more-len(input), holdCap)
		}
		time.Sleep(time.Millisecond)
	}
	stub.InterruptToxic()
	if n := len(input); n != more {
		t.Fatalf("the hold took %d chunks, want its cap of %d", holdCap+more-n, holdCap)
	}
	new(holdToxic).Cleanup(stub)
	if stub.Closed() || len(output) != holdCap+more {
		t.Fatalf("lifted: %d chunks passed, closed %v; want all %d and the link open", len(output), stub.Closed(), holdCap+more)
	}
	for i := range holdCap + more {
		if c := <-output; c.Data[0] != byte(i) {
			t.Fatalf("chunk %d came as %d", i, c.Data[0])
		}
	}
}

// A link whose writer is gone is given up at its first chunk, not one
// patience per chunk as toxiproxy's flush does (20–90 s per proxy).
func TestHold_DropsALinkWhoseWriterIsGone(t *testing.T) {
	defer func(p time.Duration) { holdPatience = p }(holdPatience)
	holdPatience = 20 * time.Millisecond
	const chunks = 500 // 10 s at one patience each
	input := make(chan *stream.StreamChunk, chunks)
	stub := runHold(t, input, make(chan *stream.StreamChunk)) // nobody reads it
	for range chunks {
		input <- &stream.StreamChunk{Data: []byte("x")}
	}
	drained(t, input)
	stub.InterruptToxic()
	done := make(chan struct{})
	go func() { new(holdToxic).Cleanup(stub); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("lifting the cut waited on a writer that is gone, chunk after chunk")
	}
	if !stub.Closed() {
		t.Fatal("a link whose writer is gone stayed open")
	}
}

// Through a proxy, as the isolation uses it: a connection cut both ways
// carries nothing, and after the cut what was held arrives and the
// connection goes on.
func TestHold_ThroughAProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	p := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()), "echo", "127.0.0.1:0", ln.Addr().String())
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	conn, err := net.Dial("tcp", p.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	echo := func(line string) {
		t.Helper()
		if _, err := fmt.Fprintln(conn, line); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := r.ReadString('\n')
		if err != nil || got != line+"\n" {
			t.Fatalf("echo of %q: %q, %v", line, got, err)
		}
	}
	echo("before")
	for _, dir := range []string{"upstream", "downstream"} {
		spec := fmt.Sprintf(`{"name":"cut-%s","type":"hold","stream":"%s"}`, dir, dir)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fmt.Fprintln(conn, "during"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := r.ReadString('\n'); err == nil {
		t.Fatalf("%q came through the cut", got)
	}
	p.Toxics.ResetToxics(context.Background())
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "during\n" {
		t.Fatalf("after the cut: %q, %v; want what was held", got, err)
	}
	echo("after")
}
