package transport

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// gRPC's protobuf codec marshals every message into a buffer from the
// process's default pool and unmarshals every message received in more
// than one HTTP/2 frame from a copy into one; a connection's pool holds the
// frames (up to 16 KiB). gRPC's default pool has tiers of 256 B, 4, 16 and
// 32 KiB and 1 MiB, and clears the whole of a buffer it hands out again: an
// asynchronous batch, a forwarded send or a push of 40 KiB took a 1 MiB
// buffer and wrote 1 MiB of zeros into it first, 8–11 µs each time. At the
// end-to-end row's load (4 + 4 clients, 14,000 msgs/s) that clearing was
// 2 % of the machine's CPU in a system-wide profile
//
// bufferPool has a tier at every power of two from 2 KiB to 4 MiB, so a
// buffer is less than twice what it holds, and hands buffers out as they
// were left. gRPC has such a pool (internal/mem's
// NewDirtyBinaryTieredBufferPool) but does not export it. Not clearing is
// safe because gRPC writes a buffer's whole length before reading it: a
// frame is read with io.ReadFull, a message is copied in whole, a marshal
// appends exactly the size it computed. The one exception would be a
// message changed while it is sent, a data race that then sends an earlier
// message's bytes where zeros were.
const (
	minPooledShift = 11 // 2 KiB: gRPC pools nothing of 1 KiB or less
	// 4 MiB: twice the largest message a node takes by default
	// (MaxMessageBytes + 1 MiB); a node set for larger messages allocates
	// buffers for those each time.
	maxPooledShift = 22
)

// tieredPool is a mem.BufferPool of buffers whose capacities are powers of
// two, kept in one sync.Pool per power.
type tieredPool struct {
	tiers [maxPooledShift + 1]sync.Pool
}

var bufferPool mem.BufferPool = &tieredPool{}

// Get returns a buffer of length n whose capacity is the power of two at or
// above n; beyond the largest tier, a buffer of exactly n, which Put drops.
func (p *tieredPool) Get(n int) *[]byte {
	shift := max(bits.Len(uint(n-1)), minPooledShift)
	if n <= 0 || shift > maxPooledShift {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[shift].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<shift)
	return &b
}

// Put keeps a buffer in the tier of the largest power of two its capacity
// holds, so any buffer a tier hands out is at least that tier's size.
func (p *tieredPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPooledShift || c > 1<<maxPooledShift {
		return
	}
	p.tiers[bits.Len(uint(c))-1].Put(b)
}

// UseBufferPool makes bufferPool the process's default, the one gRPC's
// protobuf codec marshals and unmarshals messages with whatever a
// connection's options say, and so the one that matters; the cairn binary
// calls it in an init function, as gRPC asks (it is not safe once
// connections are open). DialOptions and ServerOptions give every
// connection Cairn opens the pool for its frames either way; a program
// that embeds the client without calling UseBufferPool keeps gRPC's
// default for whole messages.
func UseBufferPool() { experimental.SetDefaultBufferPool(bufferPool) }
