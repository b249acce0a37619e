package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"github.com/cairnmq/cairn/client"
)

// pingCounter is a TCP proxy in front of one address that counts the
// HTTP/2 PING frames (not their acks) each side sends.
type pingCounter struct {
	ln       net.Listener
	target   string
	toServer atomic.Int64 // PINGs the client sent
	toClient atomic.Int64 // PINGs the server sent
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newPingCounter(t *testing.T, target string) *pingCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pingCounter{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *pingCounter) addr() string { return p.ln.Addr().String() }

func (p *pingCounter) pings() int64 { return p.toServer.Load() + p.toClient.Load() }

// close ends the proxy and every connection through it.
func (p *pingCounter) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *pingCounter) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.relay(c, s, true, &p.toServer)
		go p.relay(s, c, false, &p.toClient)
	}
}

// relay copies src to dst and parses what passes; it closes both when
// either side ends.
func (p *pingCounter) relay(src, dst net.Conn, fromClient bool, pings *atomic.Int64) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	pr, pw := io.Pipe()
	parsed := make(chan struct{})
	go func() {
		defer close(parsed)
		if fromClient {
			if _, err := io.ReadFull(pr, make([]byte, len(http2.ClientPreface))); err != nil {
				pr.CloseWithError(err)
				return
			}
		}
		fr := http2.NewFramer(nil, pr)
		fr.SetMaxReadFrameSize(1 << 24)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				// Not HTTP/2 after all, or the end: keep the copy going.
				io.Copy(io.Discard, pr)
				return
			}
			if ping, ok := f.(*http2.PingFrame); ok && !ping.IsAck() {
				pings.Add(1)
			}
		}
	}()
	_, err := io.Copy(dst, io.TeeReader(src, pw))
	pw.CloseWithError(errors.Join(err, io.EOF))
	<-parsed
}

// A send and its answer are one round trip: neither side may add a PING of
// its own to it. gRPC's bandwidth-delay estimator did, on every answer and
// every request (two more writes and two more reads per send on each side),
// until the connections were given fixed flow-control windows.
func TestConnection_NoPingPerRoundTrip(t *testing.T) {
	n := startNode(t, testConfig(t, t.TempDir()))
	proxy := newPingCounter(t, n.Addrs().Client)
	ctx := testCtx(t)
	c, err := client.Dial(ctx, []string{proxy.addr()}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := mustProducer(t, mustSession(t, c, client.AutoAck), "pings")
	const sends = 100
	sendN(t, ctx, p, "m", sends)
	// Keepalives are seconds apart; a few PINGs at most are not per send.
	if got := proxy.toServer.Load(); got > 3 {
		t.Errorf("the client sent %d PINGs during %d sends", got, sends)
	}
	if got := proxy.toClient.Load(); got > 3 {
		t.Errorf("the node sent %d PINGs during %d sends", got, sends)
	}
}

// The same holds between nodes: a send forwarded from its front-end to the
// member's host is one round trip on the peer connection.
func TestCluster_NoPingPerForwardedSend(t *testing.T) {
	tc := planCluster(t, 3, withLogs(t))
	proxies := make(map[string]*pingCounter)
	for _, c := range tc.cfgs {
		proxies[c.PeerAddr] = newPingCounter(t, c.PeerAddr)
	}
	for i := range tc.cfgs {
		dial := tc.cfgs[i].Dial
		tc.cfgs[i].Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := proxies[addr]; ok {
				addr = p.addr()
			}
			return dial(ctx, network, addr)
		}
	}
	tc.startAll()
	ctx := testCtx(t)
	if _, err := tc.admin("n1").CreateQueue(ctx, "fwd", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	front := tc.others(tc.waitHost("fwd#0"))[0]
	p := mustProducer(t, mustSession(t, tc.dial(front), client.AutoAck), "fwd")
	sendN(t, ctx, p, "warm-", 1)
	var before int64
	for _, px := range proxies {
		before += px.pings()
	}
	const sends = 100
	sendN(t, ctx, p, "m", sends)
	var pings int64
	for _, px := range proxies {
		pings += px.pings()
	}
	// Peer keepalives are 5 s apart on each connection.
	if pings-before > 6 {
		t.Errorf("the nodes sent %d PINGs to each other during %d forwarded sends", pings-before, sends)
	}
}
