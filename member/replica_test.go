package member

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnmq/cairn/raftgroup"

	"github.com/cairnmq/cairn/test/wait"

	"github.com/hashicorp/raft"

	"github.com/cairnmq/cairn/fsm"
	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport/raftmux"
)

// testReplica opens a single-replica member on a fresh loopback mux.
func testReplica(t testing.TB, dir string, opts ...func(*Config)) *Replica {
	t.Helper()
	layer, addr := loopbackLayer(t, "q#0")
	cfg := Config{
		Name: "q#0", GroupID: "q#0", NodeID: "n1", Dir: dir, Stream: layer,
		Peers:          []raft.Server{{ID: "n1", Address: addr}},
		Timing:         raftgroup.TestTiming,
		ExpiryInterval: 20 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	wait.For(t, 10*time.Second, "replica to lead", r.Leading)
	return r
}

// loopbackLayer opens group's Raft layer on a fresh loopback mux.
func loopbackLayer(t testing.TB, group string) (raft.StreamLayer, raft.ServerAddress) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := raftmux.New(ln, nil, nil, nil)
	t.Cleanup(func() { mux.Close() })
	layer, err := mux.Layer(group)
	if err != nil {
		t.Fatal(err)
	}
	return layer, raft.ServerAddress(ln.Addr().String())
}

func msgs(n int, prefix string) []*fsmpb.Message {
	out := make([]*fsmpb.Message, n)
	for i := range out {
		out[i] = &fsmpb.Message{Id: fmt.Sprintf("%s%03d", prefix, i), Body: []byte("body"), Priority: 4}
	}
	return out
}

// collector is a consumer that records what is pushed to it.
type collector struct {
	mu   sync.Mutex
	got  []fsm.Delivery
	gone bool
}

func (c *collector) push(d []fsm.Delivery) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return false
	}
	c.got = append(c.got, d...)
	return true
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *collector) deliveries() []fsm.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]fsm.Delivery(nil), c.got...)
}

func TestReplica_DeliversWithinCreditAndAcks(t *testing.T) {
	ctx := context.Background()
	r := testReplica(t, t.TempDir())
	if _, err := r.Enqueue(ctx, msgs(10, "m")); err != nil {
		t.Fatal(err)
	}
	if err := r.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	var c collector
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push}, 4); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "4 deliveries", func() bool { return c.count() == 4 })
	// Credit bounds the deliveries: no fifth arrives without more credit.
	if st := r.Stats(); st.Delivered != 4 || st.Pending != 6 {
		t.Fatalf("stats %+v, want 4 delivered and 6 pending", st)
	}
	r.Credit("c1", 6)
	wait.For(t, 10*time.Second, "10 deliveries", func() bool { return c.count() == 10 })
	var ids []uint64
	for i, d := range c.deliveries() {
		if want := fmt.Sprintf("m%03d", i); d.Message.Id != want {
			t.Fatalf("delivery %d is %s, want %s (arrival order)", i, d.Message.Id, want)
		}
		ids = append(ids, d.DeliveryID)
	}
	acked, rejected, err := r.Ack(ctx, "s1", ids)
	if err != nil || acked != 10 || len(rejected) != 0 {
		t.Fatalf("ack: %d acked, rejected %v, err %v", acked, rejected, err)
	}
	if st := r.Stats(); st.Delivered != 0 || st.Pending != 0 {
		t.Fatalf("stats after ack %+v", st)
	}
}

func TestReplica_PushToGoneConsumerReturnsMessagesUnseen(t *testing.T) {
	ctx := context.Background()
	r := testReplica(t, t.TempDir())
	if err := r.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	c := &collector{gone: true}
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enqueue(ctx, msgs(1, "m")); err != nil {
		t.Fatal(err)
	}
	// The push never reached the consumer: the message is pending again as
	// if never delivered, neither counted nor marked.
	wait.For(t, 10*time.Second, "message back to pending, unseen", func() bool {
		var st fsm.MessageState
		r.Read(func(m *fsm.Member) { st, _ = m.Lookup("m000") })
		return st.Pending && !st.Redelivered && st.DeliveryCount == 0
	})
}

func TestReplica_RestartKeepsMessagesAndReleasesDeadSessions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := testReplica(t, dir)
	if _, err := r.Enqueue(ctx, msgs(5, "m")); err != nil {
		t.Fatal(err)
	}
	if err := r.OpenSession(ctx, "s1", "boot-1"); err != nil {
		t.Fatal(err)
	}
	var c collector
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push}, 2); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "2 deliveries", func() bool { return c.count() == 2 })
	if _, _, err := r.Ack(ctx, "s1", []uint64{c.deliveries()[0].DeliveryID}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	// The node comes back as a new incarnation: sessions of boot-1 are dead.
	r2 := testReplica(t, dir, func(c *Config) { c.OwnerLive = func(o string) bool { return o == "boot-2" } })
	wait.For(t, 10*time.Second, "dead session released", func() bool {
		var st fsm.Stats
		r2.Read(func(m *fsm.Member) { st = m.Stats() })
		return st.Sessions == 0 && st.Pending == 4
	})
	var second fsm.MessageState
	r2.Read(func(m *fsm.Member) { second, _ = m.Lookup("m001") })
	if !second.Redelivered || second.DeliveryCount != 1 || !second.Pending {
		t.Fatalf("unacked message after restart: %+v, want pending and redelivered", second)
	}
	var first bool
	r2.Read(func(m *fsm.Member) { _, first = m.Lookup("m000") })
	if first {
		t.Fatal("acknowledged message came back after restart")
	}
}

func TestReplica_ExpiresOnLeaderClock(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := testReplica(t, t.TempDir(), func(c *Config) { c.Clock = clock })
	m := msgs(2, "m")
	m[0].Expiration = time.Unix(1005, 0).UnixNano()
	if _, err := r.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n := r.ExpireNow(); n != 0 {
		t.Fatalf("expired %d before the time", n)
	}
	mu.Lock()
	now = time.Unix(1006, 0)
	mu.Unlock()
	wait.For(t, 10*time.Second, "expiry", func() bool { return r.Stats().Pending == 1 })
}

func TestReplica_SnapshotAndRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := testReplica(t, dir, func(c *Config) { c.SnapshotThreshold = 8 })
	for i := range 20 {
		if _, err := r.Enqueue(ctx, msgs(3, fmt.Sprintf("b%02d-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enqueue(ctx, msgs(1, "after")); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r2 := testReplica(t, dir)
	wait.For(t, 10*time.Second, "state restored", func() bool { return r2.Stats().Pending == 61 })
}

// A consumer whose session was released under it is detached and told,
// instead of being offered messages that would be refused forever.
func TestReplica_ConsumerOfReleasedSessionIsDetached(t *testing.T) {
	ctx := context.Background()
	r := testReplica(t, t.TempDir())
	if err := r.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	gone := make(chan error, 1)
	var c collector
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push, Gone: func(err error) { gone <- err }}, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enqueue(ctx, msgs(1, "m")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-gone:
		if !errors.Is(err, fsm.ErrUnknownSession) {
			t.Fatalf("Gone(%v), want ErrUnknownSession", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer of a released session was not detached")
	}
	wait.For(t, 10*time.Second, "consumer detached", func() bool { return r.Consumers() == 0 })
	if st := r.Stats(); st.Pending != 1 || c.count() != 0 {
		t.Fatalf("stats %+v, pushed %d; want the message pending and nothing pushed", st, c.count())
	}
}

// Concurrent sends marshal their commands into recycled buffers and the
// batcher packs many into one entry: each message must still come out with
// its own body, whether pushed to a consumer in the send's entry or
// delivered later from the queue. A buffer recycled while still read is
// also a data race, which make test's -race reports here.
func TestReplica_ConcurrentSendsKeepTheirOwnBodies(t *testing.T) {
	ctx := context.Background()
	r := testReplica(t, t.TempDir())
	if err := r.OpenSession(ctx, "s1", "owner"); err != nil {
		t.Fatal(err)
	}
	var c collector
	if err := r.AddConsumer(&Consumer{ID: "c1", Session: "s1", Push: c.push}, 100); err != nil {
		t.Fatal(err)
	}
	// Every fifth send is a batch of 40 messages of 2,000 bytes, as an
	// asynchronous producer sends them: its payload, about 80 KB, goes to
	// the buffers kept only while they are a quarter full.
	const senders, sends, batch = 8, 40, 40
	// Single messages from 7 bytes to 3 KiB, so buffers of every size are
	// recycled.
	bodyOf := func(id string) []byte {
		var s, i int
		fmt.Sscanf(id, "s%d-%d", &s, &i)
		if strings.Contains(id, "-b") {
			return bytes.Repeat([]byte(id), 200)
		}
		return bytes.Repeat([]byte(id), 1+(s*sends+i)*37%450)
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range sends {
				id := fmt.Sprintf("s%d-%03d", s, i)
				msgs := []*fsmpb.Message{{Id: id, Body: bodyOf(id), Priority: 4}}
				if i%5 == 0 {
					msgs = msgs[:0]
					for j := range batch {
						id := fmt.Sprintf("s%d-%03d-b%02d", s, i, j)
						msgs = append(msgs, &fsmpb.Message{Id: id, Body: bodyOf(id), Priority: 4})
					}
				}
				if _, err := r.Enqueue(ctx, msgs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := senders * (sends + sends/5*(batch-1))
	r.Credit("c1", total)
	wait.For(t, 10*time.Second, "every message delivered", func() bool { return c.count() == total })
	for _, d := range c.deliveries() {
		if !bytes.Equal(d.Message.Body, bodyOf(d.Message.Id)) {
			t.Errorf("%s delivered with body %q, want %q", d.Message.Id, d.Message.Body, bodyOf(d.Message.Id))
		}
	}
}
