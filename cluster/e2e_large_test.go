package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnmq/cairn/client"
	"github.com/cairnmq/cairn/transport"
	"github.com/cairnmq/cairn/transport/clientpb"
)

// largeCase is one mix of message sizes, received with one prefetch.
type largeCase struct {
	name     string
	sizes    []int
	prefetch int
}

// largeCases are the mixes every client must receive with default settings
// (the largest message a node takes by default is 1 MiB): frames of
// deliveries are cut to fit, whatever the batch.
func largeCases(seed uint64) []largeCase {
	rng := rand.New(rand.NewPCG(seed, 47))
	// Two at the limit, then a mix: a dozen in all, kept small since every
	// byte is written to several Raft logs and body files.
	mix := make([]int, 12)
	mix[0], mix[1] = DefaultMaxMessageBytes, DefaultMaxMessageBytes
	for i := 2; i < len(mix); i++ {
		switch rng.IntN(4) {
		case 0:
			mix[i] = DefaultMaxMessageBytes // at the limit
		case 1:
			mix[i] = rng.IntN(100)
		default:
			mix[i] = rng.IntN(DefaultMaxMessageBytes + 1)
		}
	}
	repeat := func(n, size int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	return []largeCase{
		{"2x1MiB", repeat(2, DefaultMaxMessageBytes), 0},
		{"100x40000B", repeat(100, 40_000), 0},
		{"mix-prefetch1", mix, 1},
		{"mix-prefetch64", mix, 64},
		{"mix-prefetch10000", mix, 10_000},
	}
}

// body is message i of a case: its size, and its number at the start so
// that a mix-up shows.
func largeBody(i, size int) []byte {
	b := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	copy(b, fmt.Sprintf("%d:", i))
	return b[:size]
}

// receiveLarge sends a case's messages through sender and receives them
// through receiver, on a queue with --max-deliveries 2: every one arrives
// whole, once, on its first delivery, and nothing is dead-lettered.
func receiveLarge(t *testing.T, ctx context.Context, a *client.Admin, queue string, sender, receiver *client.Connection, c largeCase) {
	t.Helper()
	p := mustProducer(t, mustSession(t, sender, client.AutoAck), queue)
	// An election under the load of large entries is no failure here: a
	// send of unknown outcome is resent, its dedup id making it harmless.
	p.SetIdempotent(true)
	want := map[string][]byte{}
	for i, size := range c.sizes {
		b := largeBody(i, size)
		r, err := p.Send(ctx, &client.Message{Body: b})
		if err != nil {
			t.Fatalf("%s: send %d (%d bytes): %v", c.name, i, size, err)
		}
		want[r.ID] = b
	}
	var opts []client.ConsumerOption
	if c.prefetch > 0 {
		opts = append(opts, client.WithPrefetch(c.prefetch))
	}
	s := mustSession(t, receiver, client.AutoAck)
	k := mustConsumer(t, ctx, s, queue, opts...)
	for range c.sizes {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		m, err := k.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: receive after %d of %d: %v", c.name, len(c.sizes)-len(want), len(c.sizes), err)
		}
		b, ok := want[m.ID]
		switch {
		case !ok:
			t.Fatalf("%s: message %s received twice, or never sent", c.name, m.ID)
		case !bytes.Equal(m.Body, b):
			t.Fatalf("%s: message %s came with %d bytes unlike the %d sent", c.name, m.ID, len(m.Body), len(b))
		case m.Redelivered || m.DeliveryCount != 1:
			t.Fatalf("%s: message %s came redelivered=%v count %d; want its first delivery", c.name, m.ID, m.Redelivered, m.DeliveryCount)
		}
		delete(want, m.ID)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	q := showQueue(t, a, queue)
	if q.DeadLettered != 0 || q.Pending != 0 || q.Delivered != 0 {
		t.Fatalf("%s: queue after: %d pending, %d delivered, %d dead-lettered; want it empty", c.name, q.Pending, q.Delivered, q.DeadLettered)
	}
}

// Every message a node accepted is received by a client with default
// settings, whatever the mix of sizes and the prefetch, on its first
// delivery: none is dead-lettered on the way.
func TestLarge_EveryAcceptedMessageIsReceived(t *testing.T) {
	t.Parallel()
	n := startNode(t, TestConfig(t, t.TempDir()))
	ctx := stepCtx(t, 3*time.Minute)
	a := admin(t, n)
	for _, c := range largeCases(1) {
		t.Run(c.name, func(t *testing.T) {
			queue := "large-" + c.name
			if _, err := a.CreateQueue(ctx, queue, client.QueueOptions{MaxDeliveries: 2}); err != nil {
				t.Fatal(err)
			}
			receiveLarge(t, ctx, a, queue, dial(t, n), dial(t, n), c)
		})
	}
}

// The same through three nodes: the messages are sent through one node
// that does not host the member and received through another, so every
// delivery is relayed from the host over a peer stream.
func TestLarge_EveryAcceptedMessageIsReceivedRelayed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("three nodes relaying tens of MB: not in -short")
	}
	skipLargeUnderRace(t)
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, 4*time.Minute)
	a := tc.Admin("n1")
	for _, c := range largeCases(2) {
		t.Run(c.name, func(t *testing.T) {
			queue := "large-" + c.name
			if _, err := a.CreateQueue(ctx, queue, client.QueueOptions{Members: 1, MaxDeliveries: 2}); err != nil {
				t.Fatal(err)
			}
			host := tc.WaitSpread(queue, 1)[0]
			others := tc.Others(host)
			receiveLarge(t, ctx, a, queue, tc.Dial(others[0]), tc.Dial(others[1]), c)
		})
	}
}

// raceEnabled is set when the tests run with -race (race_test.go).
var raceEnabled bool

// skipLargeUnderRace skips a test of megabyte messages through three nodes
// in one process under the race detector: there (four fifths of the CPU in
// its range checks of the copies, on a 2-core machine) every group of the
// nodes loses its leader again and again, and sends and commits wait out
// their deadlines. make test runs the large tests again without it.
func skipLargeUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("megabyte messages under -race, beside the package's other tests: run without it (make test does)")
	}
}

// A transaction's sends travel to a member hosted elsewhere in one command:
// three 1 MB messages to each of two remote members commit.
func TestLarge_TransactionToRemoteHostsCommits(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("three nodes: not in -short")
	}
	skipLargeUnderRace(t)
	tc := NewTestCluster(t, 3)
	ctx := stepCtx(t, time.Minute)
	a := tc.Admin("n1")
	createQueues(t, ctx, a, map[string]int{"bigtx": 3})
	hosts := tc.WaitSpread("bigtx", 3)
	tx := mustTx(t, tc.Dial(hosts[0]))
	for i := 1; i < 3; i++ {
		p := mustProducer(t, tx, fmt.Sprintf("bigtx#%d", i))
		for j := range 3 {
			if _, err := p.Send(ctx, &client.Message{Body: largeBody(j, 1_000_000)}); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
	}
	commit(t, tx)
	waitQueue(t, a, "bigtx", 6, 0)
}

// manyProperties is a message of n properties with three-character names
// and empty values, whose body brings the send request to frame bytes:
// its text is a few bytes a property, its encoding more than twice that.
func manyProperties(n, frame int) *clientpb.Message {
	const chars = 94 // printable ASCII from '!'
	m := &clientpb.Message{Properties: make(map[string]string, n)}
	for i := range n {
		m.Properties[string([]byte{byte('!' + i%chars), byte('!' + i/chars%chars), byte('!' + i/chars/chars)})] = ""
	}
	req := &clientpb.SendRequest{Destination: "props", Messages: []*clientpb.Message{m}}
	m.Body = make([]byte, frame-proto.Size(req))
	for proto.Size(req) > frame {
		m.Body = m.Body[1:]
	}
	return m
}

// A message whose delivery would not fit a frame of its own is refused
// when sent, though its body and properties are within the limit: a
// quarter of a million short properties cost more on the wire than as
// text. One a few KiB smaller is accepted, and received.
func TestLarge_MessageThatCouldNotBeDeliveredIsRefused(t *testing.T) {
	t.Parallel()
	skipLargeUnderRace(t)
	n := startNode(t, TestConfig(t, t.TempDir(), func(c *Config) { c.MaxProperties = 300_000 }))
	ctx := testCtx(t)
	raw := rawClient(t, n)
	frame := n.maxWire() - 64 // within what the node reads
	big := manyProperties(200_000, frame)
	if text := len(big.Body) + 3*len(big.Properties); text > DefaultMaxMessageBytes {
		t.Fatalf("the test's message has %d bytes of text, over the %d the node takes", text, DefaultMaxMessageBytes)
	}
	_, err := raw.Send(ctx, &clientpb.SendRequest{Destination: "props", Messages: []*clientpb.Message{big}})
	if err == nil || !strings.Contains(err.Error(), "encoded") || !errors.Is(transport.FromStatus(err), client.ErrMessageTooLarge) {
		t.Fatalf("send of a message of %d encoded bytes: %v; want it refused as too large encoded", proto.Size(big), err)
	}

	fits := manyProperties(200_000, frame-8<<10)
	if _, err := raw.Send(ctx, &clientpb.SendRequest{Destination: "props", Messages: []*clientpb.Message{fits}}); err != nil {
		t.Fatalf("send of a message of %d encoded bytes: %v", proto.Size(fits), err)
	}
	k := mustConsumer(t, ctx, mustSession(t, dial(t, n), client.AutoAck), "props")
	if m := recv(t, k); len(m.Properties) != len(fits.Properties) || len(m.Body) != len(fits.Body) {
		t.Fatalf("received %d properties and %d bytes; sent %d and %d", len(m.Properties), len(m.Body), len(fits.Properties), len(fits.Body))
	}
}
