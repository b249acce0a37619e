package transport

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/cairnmq/cairn/fsm/fsmpb"
	"github.com/cairnmq/cairn/transport/clientpb"
	"github.com/cairnmq/cairn/transport/peerpb"
)

// drawDeliveries draws a batch of deliveries of random sizes, some larger
// than any frame the test allows.
func drawDeliveries(t *rapid.T) []*clientpb.Delivery {
	n := rapid.IntRange(0, 60).Draw(t, "deliveries")
	out := make([]*clientpb.Delivery, n)
	for i := range out {
		d := &clientpb.Delivery{
			Member:        rapid.SampledFrom([]string{"q#0", strings.Repeat("n", 200) + "#12"}).Draw(t, "member"),
			DeliveryId:    rapid.Uint64().Draw(t, "delivery id"),
			Id:            rapid.StringN(0, 40, 40).Draw(t, "id"),
			Body:          make([]byte, rapid.IntRange(0, 70_000).Draw(t, "body")),
			DeliveryCount: rapid.Uint32().Draw(t, "count"),
		}
		if props := rapid.IntRange(0, 20).Draw(t, "properties"); props > 0 {
			d.Properties = map[string]string{}
			for j := range props {
				d.Properties[strings.Repeat("k", j+1)] = rapid.StringN(0, 30, 30).Draw(t, "value")
			}
		}
		out[i] = d
	}
	return out
}

// checkRuns checks that runs are items cut in order, none empty, each
// frame within limit unless it holds one item alone, and each as full as
// it can be: with the next item, it would not fit (but for the few bytes
// Batches keeps for the frame's own fields).
func checkRuns[T proto.Message](t *rapid.T, items []T, runs [][]T, limit int, frame func([]T) proto.Message) {
	var joined []T
	for i, run := range runs {
		if len(run) == 0 {
			t.Fatalf("run %d is empty", i)
		}
		if size := proto.Size(frame(run)); size > limit && len(run) > 1 {
			t.Fatalf("run %d: %d items in a frame of %d bytes, over the limit %d", i, len(run), size, limit)
		}
		if i+1 < len(runs) {
			more := append(slices.Clone(run), runs[i+1][0])
			if size := proto.Size(frame(more)); size <= limit-frameFixed {
				t.Fatalf("run %d ends though the next item fits: %d bytes with it, limit %d", i, size, limit)
			}
		}
		joined = append(joined, run...)
	}
	if len(joined) != len(items) {
		t.Fatalf("%d items in, %d out", len(items), len(joined))
	}
	for i := range items {
		if any(joined[i]) != any(items[i]) {
			t.Fatalf("item %d out of place", i)
		}
	}
}

// Frames of random batches never exceed the limit (but for one message
// alone, larger than any frame), and lose or reorder nothing: to clients
// and on peer streams.
func TestBatches_FramesStayWithinTheLimitInOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.IntRange(1, 300_000).Draw(t, "limit")
		ds := drawDeliveries(t)
		consumer := rapid.Uint64().Draw(t, "consumer")
		checkRuns(t, ds, Batches(ds, limit), limit, func(run []*clientpb.Delivery) proto.Message {
			return &clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Deliveries{Deliveries: &clientpb.Deliveries{Consumer: consumer, Messages: run}}}
		})

		peer := make([]*peerpb.Delivery, len(ds))
		for i, d := range ds {
			peer[i] = &peerpb.Delivery{DeliveryId: d.DeliveryId, DeliveryCount: d.DeliveryCount, Redelivered: d.DeliveryCount%2 == 0,
				Message: &fsmpb.Message{Id: d.Id, Body: d.Body, Properties: d.Properties, EnqueuedAt: int64(d.DeliveryId)}}
		}
		checkRuns(t, peer, Batches(peer, limit), limit, func(run []*peerpb.Delivery) proto.Message {
			return &peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Deliveries{Deliveries: &peerpb.Deliveries{Deliveries: run}}}
		})
	})
}

// A message a node accepts (MaxEncodedMessage) fits a frame of its own
// once delivered, with every field of the delivery at its largest.
func TestBatches_AcceptedMessageFitsAFrameAlone(t *testing.T) {
	const maxMessage = 1 << 20
	limit := FrameLimit(maxMessage)
	m := &clientpb.Message{Body: make([]byte, maxMessage)}
	pad := MaxEncodedMessage(limit) - proto.Size(m)
	m.Properties = map[string]string{"p": strings.Repeat("v", pad)}
	for proto.Size(m) > MaxEncodedMessage(limit) {
		m.Properties["p"] = m.Properties["p"][1:]
	}
	if proto.Size(m) < MaxEncodedMessage(limit)-8 {
		t.Fatalf("message of %d bytes, want about %d", proto.Size(m), MaxEncodedMessage(limit))
	}
	longName := strings.Repeat("n", 200)
	d := &clientpb.Delivery{
		Member: longName + "#4294967295", Destination: longName, Id: strings.Repeat("i", 256), DeliveryId: ^uint64(0),
		Body: m.Body, Properties: m.Properties, Priority: 9, ExpirationUnixMs: -1, Redelivered: true, DeliveryCount: ^uint32(0), TimestampUnixMs: -1,
	}
	f := &clientpb.ServerFrame{Frame: &clientpb.ServerFrame_Deliveries{Deliveries: &clientpb.Deliveries{Consumer: ^uint64(0), Messages: []*clientpb.Delivery{d}}}}
	if size := proto.Size(f); size > limit {
		t.Fatalf("a delivery of the largest accepted message is a %d-byte frame, over the limit %d", size, limit)
	}
	pd := &peerpb.Delivery{DeliveryId: ^uint64(0), Redelivered: true, DeliveryCount: ^uint32(0), Message: &fsmpb.Message{
		Id: d.Id, Body: m.Body, Properties: m.Properties, Priority: 9, Expiration: -1, EnqueuedAt: -1, DedupId: strings.Repeat("d", 256)}}
	ev := &peerpb.ConsumeEvent{Event: &peerpb.ConsumeEvent_Deliveries{Deliveries: &peerpb.Deliveries{Deliveries: []*peerpb.Delivery{pd}}}}
	if size := proto.Size(ev); size > limit {
		t.Fatalf("a peer delivery of the largest accepted message is a %d-byte frame, over the limit %d", size, limit)
	}
}

// BenchmarkBatches is the cost of cutting a push into frames: a batch of
// 500 deliveries of 1 KiB (the standard set's prefetch and size).
func BenchmarkBatches(b *testing.B) {
	ds := make([]*clientpb.Delivery, 500)
	for i := range ds {
		ds[i] = &clientpb.Delivery{Member: "q#0", DeliveryId: uint64(i), Id: "ID:0123456789abcdef0123456789abcdef", Body: make([]byte, 1024), Destination: "q"}
	}
	b.ReportAllocs()
	for b.Loop() {
		if runs := Batches(ds, FrameLimit(1<<20)); len(runs) != 1 {
			b.Fatalf("%d frames", len(runs))
		}
	}
}
