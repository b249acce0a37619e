package transport

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// gRPC reads every message into a buffer from a pool, and its protobuf
// codec marshals every message into one. Its default pool has tiers of
// 256 B, 4, 16 and 32 KiB and 1 MiB, and clears the whole of a buffer it
// hands out again: an asynchronous batch, a forwarded send or a push of
// 40 KiB takes a 1 MiB buffer and writes 1 MiB of zeros into it first. At
// the end-to-end row's load (4 + 4 clients, 14,000 msgs/s) that clearing
// was 2 % of the machine's CPU, as much as Cairn's whole enqueue path in
// the state machine (docs/performance.md, "Where a 2-core machine's CPU
// goes"). bufferPool has a tier at every power of two from 256 B to
// 4 MiB, so a buffer is at most twice the message, and hands buffers out
// as they were left. Nothing reads a pooled buffer beyond what gRPC wrote
// into it (a read fills exactly the message's length, a marshal appends
// from zero length), so the zeros protected nothing in a process that
// only ever holds its own data.
const (
	minPooledShift = 8  // 256 B: gRPC pools nothing below 1 KiB anyway
	maxPooledShift = 22 // 4 MiB: the largest entry, and so the largest batch
)

// tieredPool is a mem.BufferPool of buffers whose capacities are powers of
// two, kept in one sync.Pool per power.
type tieredPool struct {
	tiers [maxPooledShift + 1]sync.Pool
}

var bufferPool mem.BufferPool = &tieredPool{}

// Get returns a buffer of length n whose capacity is the power of two at or
// above n; beyond the largest tier, a buffer of exactly n that Put drops.
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
	shift := bits.Len(uint(cap(*b))) - 1
	if shift < minPooledShift || shift > maxPooledShift {
		return
	}
	p.tiers[shift].Put(b)
}

// UseBufferPool makes bufferPool the process's default, the one gRPC's
// protobuf codec marshals into whatever a connection's options say; the
// cairn binary calls it first thing. DialWindows and ServerWindows give
// every connection Cairn opens the pool for its reads either way, so a
// program that embeds the client without calling it keeps gRPC's default
// only for what it marshals.
func UseBufferPool() { experimental.SetDefaultBufferPool(bufferPool) }
