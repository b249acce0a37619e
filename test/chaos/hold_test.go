package chaos

import (
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// holdToxic is the isolation's cut: it holds every chunk of a connection,
// and the connection's end, until it is removed, as a partition holds TCP
// segments, and then lets them through in order.
//
// toxiproxy's own latency toxic (an hour) held them as well, but lifting it
// flushes what it held through toxiproxy's RemoveToxic, which gives each
// chunk 5 s to be taken by the link's writer. When the far end closed its
// socket during the cut (a client that gave up on a silent node), the writer
// dies at the first chunk and every further one waits its 5 s: lifting one
// proxy's cut took 20–55 s (90 s on a Raft proxy), and the "10 s" isolation
// lasted a minute (client/DESIGN.md has the figures). holdToxic flushes in
// its own Cleanup and, when a chunk finds no writer within holdPatience,
// ends the link at once: its far end is gone, and dropping a chunk from the
// middle of a live stream, as toxiproxy does after its 5 s, would corrupt
// it.
type holdToxic struct{}

// holdPatience is how long a held chunk waits for the link's writer when the
// cut is lifted; toxiproxy gives each chunk the same.
var holdPatience = 5 * time.Second

// holdCap is how many chunks a hold takes in before it lets the source wait,
// as a partition's full windows do: what comes after queues in front of it
// (GetBufferSize), then in the sender's socket.
const holdCap = 1024

// heldChunks is a link's state under a hold: what came in, and whether its
// source ended.
type heldChunks struct {
	chunks []*stream.StreamChunk
	ended  bool
}

func init() { toxics.Register("hold", new(holdToxic)) }

func (*holdToxic) NewState() any { return new(heldChunks) }

// GetBufferSize is the latency toxic's: what may queue in front of the hold
// while it is interrupted (to add a toxic behind it).
func (*holdToxic) GetBufferSize() int { return 1024 }

// Pipe takes in up to holdCap chunks and lets nothing out. A hold
// interrupted to add another toxic runs again with the same state.
func (*holdToxic) Pipe(stub *toxics.ToxicStub) {
	held := stub.State.(*heldChunks)
	input := stub.Input
	if held.ended || len(held.chunks) >= holdCap {
		input = nil
	}
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-input:
			if c == nil { // the source ended: hold that too
				held.ended, input = true, nil
				continue
			}
			held.chunks = append(held.chunks, c)
			if len(held.chunks) >= holdCap {
				input = nil
			}
		}
	}
}

// Cleanup lets what was held through when the cut is lifted, then what
// queued in front of the hold, and the end of the connection if it came. A
// writer that takes nothing for holdPatience is gone, and so is the link:
// the stub is closed, so toxiproxy drops it instead of flushing into it
// chunk by chunk.
func (*holdToxic) Cleanup(stub *toxics.ToxicStub) {
	held := stub.State.(*heldChunks)
	defer func() { held.chunks = nil }()
	forward := func(c *stream.StreamChunk) bool {
		t := time.NewTimer(holdPatience)
		defer t.Stop()
		select {
		case stub.Output <- c:
			return true
		case <-t.C:
			return false
		}
	}
	for _, c := range held.chunks {
		if !forward(c) {
			stub.Close()
			return
		}
	}
	for !held.ended {
		select {
		case c := <-stub.Input:
			if c == nil {
				held.ended = true
			} else if !forward(c) {
				stub.Close()
				return
			}
		default:
			return // toxiproxy relinks the chain and passes what comes next
		}
	}
	stub.Close()
}
