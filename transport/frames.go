package transport

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Every limit on a client stream comes from one setting, a node's largest
// message (--max-message-bytes). The frame limit is that plus
// FrameHeadroom: it bounds the frames a node reads from clients (announced
// in HelloResult.max_frame_bytes) and the frames it pushes to them, which
// it splits (Batches) so that none is larger. A node refuses a message
// whose delivery would not fit a frame of its own (DeliveryEnvelope), so
// every message it accepted can be received. Clients take whatever size
// their server pushes and check what they send against the announced
// limit; peer streams carry what the cluster's own nodes built from
// checked input and take anything gRPC can carry (cluster/DESIGN.md).
const (
	// FrameHeadroom is what a frame may hold beyond one message of the
	// largest size: a batch of smaller ones, the fields around them.
	FrameHeadroom = 1 << 20
	// DeliveryEnvelope bounds what a message gains on its way to a
	// consumer (its id, member and destination names within their limits,
	// delivery id, count and times) and the frame around it.
	DeliveryEnvelope = 4 << 10
	// frameFixed is the most a frame's own fields cost: the oneof's tag
	// and length, a consumer number, at their widest.
	frameFixed = 32
)

// FrameLimit is the largest frame of a node whose largest message is
// maxMessageBytes.
func FrameLimit(maxMessageBytes int) int { return maxMessageBytes + FrameHeadroom }

// MaxEncodedMessage is the largest encoded message a node with this frame
// limit accepts: one that, delivered, still fits a frame of its own.
func MaxEncodedMessage(frameLimit int) int { return frameLimit - DeliveryEnvelope }

// Batches cuts items, in order, into runs that each fit a frame of at most
// limit bytes, where an item costs its encoding as one field of a repeated
// message field numbered 1 to 15 (Deliveries.messages, peer
// Deliveries.deliveries). Runs are never empty; an item too large for any
// frame gets one of its own. Nothing is copied: the runs share items.
func Batches[T proto.Message](items []T, limit int) [][]T {
	var out [][]T
	start, size := 0, frameFixed
	for i, it := range items {
		n := 1 + protowire.SizeBytes(proto.Size(it))
		if i > start && size+n > limit {
			out = append(out, items[start:i])
			start, size = i, frameFixed
		}
		size += n
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}
