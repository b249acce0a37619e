package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"golang.org/x/net/http2"

	"github.com/cairnmq/cairn/client"
)

// pingCounter is a TCP proxy in front of one address that parses the HTTP/2
// frames each side sends and counts their PINGs (not the acks) and DATA
// frames. It is not a toxiproxy toxic (clientProxy's library): a toxic sees
// chunks of one link and would need the same pipe and parser per link, and
// a registry to hand the counts back.
type pingCounter struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	// toServer and toClient count by direction: [0] PINGs, [1] DATA frames.
	toServer, toClient [2]atomic.Int64

	mu       sync.Mutex
	closed   bool
	conns    []net.Conn
	parseErr error // the first frame that did not parse
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

// frames is what the proxies have counted, both ways.
type frames struct{ pings, data int64 }

// count adds up what proxies counted; it fails the test if a frame did not
// parse, since the counts would then be short.
func count(t *testing.T, proxies ...*pingCounter) frames {
	t.Helper()
	var f frames
	for _, p := range proxies {
		p.mu.Lock()
		err := p.parseErr
		p.mu.Unlock()
		if err != nil {
			t.Fatalf("a frame through the proxy did not parse: %v", err)
		}
		f.pings += p.toServer[0].Load() + p.toClient[0].Load()
		f.data += p.toServer[1].Load() + p.toClient[1].Load()
	}
	return f
}

// countSends is count once the proxies have parsed the DATA frames of sends
// round trips since before (a frame is counted a little after it is
// relayed), or what they counted after five seconds.
func countSends(t *testing.T, before frames, sends int, proxies ...*pingCounter) frames {
	t.Helper()
	var after frames
	deadline := time.Now().Add(5 * time.Second)
	for {
		after = count(t, proxies...)
		if after.data-before.data >= int64(2*sends) || time.Now().After(deadline) {
			return after
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// close ends the proxy and every connection through it, those accepted
// while it closes included.
func (p *pingCounter) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
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
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns = append(p.conns, c, s)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.relay(c, s, true, &p.toServer)
		go p.relay(s, c, false, &p.toClient)
	}
}

// relay copies src to dst and parses what passes; it closes both when
// either side ends.
func (p *pingCounter) relay(src, dst net.Conn, fromClient bool, counts *[2]atomic.Int64) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	pr, pw := io.Pipe()
	parsed := make(chan struct{})
	go func() {
		defer close(parsed)
		defer io.Copy(io.Discard, pr) // whatever happens, the copy goes on
		if fromClient {
			if _, err := io.ReadFull(pr, make([]byte, len(http2.ClientPreface))); err != nil {
				return
			}
		}
		fr := http2.NewFramer(nil, pr)
		fr.SetMaxReadFrameSize(1 << 24)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
					p.mu.Lock()
					if p.parseErr == nil {
						p.parseErr = err
					}
					p.mu.Unlock()
				}
				return
			}
			switch f := f.(type) {
			case *http2.PingFrame:
				if !f.IsAck() {
					counts[0].Add(1)
				}
			case *http2.DataFrame:
				counts[1].Add(1)
			}
		}
	}()
	_, err := io.Copy(dst, io.TeeReader(src, pw))
	pw.CloseWithError(err)
	<-parsed
}

// checkPings fails the test unless the frames counted during the sends
// carried them (a DATA frame each way at least) with fewer than one PING
// per ten sends.
func checkPings(t *testing.T, what string, sends int, before, after frames) {
	t.Helper()
	if data := after.data - before.data; data < int64(2*sends) {
		t.Fatalf("the proxies saw %d DATA frames for %d sends: the traffic did not go through them", data, sends)
	}
	if pings := after.pings - before.pings; pings > int64(sends/10) {
		t.Errorf("%s sent %d PINGs during %d sends", what, pings, sends)
	}
}

// A send and its answer are one round trip: neither side may add a PING of
// its own to it. gRPC's bandwidth-delay estimator did, on every answer and
// every request (two more writes and two more reads per send on each side),
// until the connections were given fixed flow-control windows.
func TestConnection_NoPingPerRoundTrip(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	proxy := newPingCounter(t, n.Addrs().Client)
	ctx := testCtx(t)
	c, err := client.Dial(ctx, []string{proxy.addr()}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := mustProducer(t, mustSession(t, c, client.AutoAck), "pings")
	before := count(t, proxy)
	const sends = 100
	sendN(t, ctx, p, "m", sends)
	checkPings(t, "the client and the node", sends, before, countSends(t, before, sends, proxy))
}

// The same holds between nodes: a send forwarded from its front-end to the
// member's host is one round trip on the peer connection.
func TestCluster_NoPingPerForwardedSend(t *testing.T) {
	t.Parallel()
	sendThroughAnotherNode(t, true, func(before, after frames, _ *Node) {
		checkPings(t, "the nodes", sends, before, after)
	})
}

// sends is how many messages sendThroughAnotherNode measures.
const sends = 100

// sendThroughAnotherNode starts three nodes with proxies that count the
// frames on their peer connections, creates a one-member queue, and sends
// it messages from a client of a node that is not the member's host
// (through that node only, or also straight to the host); check gets the
// peer frames counted before and after, and the host.
func sendThroughAnotherNode(t *testing.T, noDirectSends bool, check func(before, after frames, host *Node)) {
	tc := PlanTestCluster(t, 3, withLogs(t))
	proxies := make(map[string]*pingCounter)
	var all []*pingCounter
	for _, c := range tc.cfgs {
		proxies[c.PeerAddr] = newPingCounter(t, c.PeerAddr)
		all = append(all, proxies[c.PeerAddr])
	}
	// Cleanups run last first: the nodes stop before the proxies close.
	t.Cleanup(tc.stopAll)
	for i := range tc.cfgs {
		dial := tc.cfgs[i].Dial
		tc.cfgs[i].Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := proxies[addr]; ok {
				addr = p.addr()
			}
			return dial(ctx, network, addr)
		}
	}
	tc.StartAll()
	ctx := testCtx(t)
	if _, err := tc.Admin("n1").CreateQueue(ctx, "fwd", client.QueueOptions{Members: 1}); err != nil {
		t.Fatal(err)
	}
	// Once the member is on its preferred host no leadership moves by itself,
	// but two loaded cores may still cost the leader its lease, and a
	// front-end that becomes the host forwards nothing: such a round says
	// nothing, so it is measured again, a few times at most.
	for round := 1; ; round++ {
		host := tc.WaitSpread("fwd", 1)[0]
		conn := tc.Dial(tc.Others(host)[0], func(o *client.Options) { o.NoDirectSends = noDirectSends })
		p := mustProducer(t, mustSession(t, conn, client.AutoAck), "fwd")
		// A dedup id lets a send cut by an election be resent, not lost.
		p.SetIdempotent(true)
		sendN(t, ctx, p, fmt.Sprintf("warm-%d-", round), 1)
		if !noDirectSends {
			// The send link to the host opens in the background; the
			// host serves no other client connection (the last round's
			// is closed).
			wait.For(t, 10*time.Second, "the client's send link to the host", func() bool {
				sendN(t, ctx, p, fmt.Sprintf("wait-%d-", round), 1)
				return len(tc.Node(host).conns.List()) > 0
			})
		}
		before := count(t, all...)
		sendN(t, ctx, p, fmt.Sprintf("m-%d-", round), sends)
		after := countSends(t, before, sends, all...)
		if tc.HostOf("fwd#0") == host {
			check(before, after, tc.Node(host))
			return
		}
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
		if round == 3 {
			t.Fatalf("the member's host changed during each of %d rounds of sends", round)
		}
		t.Logf("round %d: the member's host changed during the sends; measuring again", round)
	}
}
