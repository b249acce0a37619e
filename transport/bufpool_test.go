package transport

import (
	"testing"

	"google.golang.org/grpc/mem"
)

func TestBufferPool_GivesTheLengthAskedWithinTwiceTheCapacity(t *testing.T) {
	p := &tieredPool{}
	for _, n := range []int{0, 1, 1024, 1025, 2048, 2049, 40_000, 65_536, 65_537, 1 << 22, 1<<22 + 1, 9 << 20} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d) has length %d", n, len(*b))
		}
		if c := cap(*b); n > 1<<minPooledShift && n <= 1<<maxPooledShift && c >= 2*n {
			t.Fatalf("Get(%d) has capacity %d, twice the length or more", n, c)
		}
		p.Put(b)
	}
	// A buffer over the largest tier is not kept: it would be handed out
	// for every 4 MiB asked for, at up to twice that.
	big := make([]byte, 0, 6<<20)
	p.Put(&big)
	for range 10 {
		if b := p.Get(1 << 22); cap(*b) != 1<<22 {
			t.Fatalf("Get(4 MiB) has capacity %d", cap(*b))
		}
	}
}

// A buffer comes back from its tier, and every tier hands out buffers large
// enough for what is asked of it, whatever capacities were put in.
func TestBufferPool_ReusesBuffersLargeEnough(t *testing.T) {
	p := &tieredPool{}
	for range 100 {
		odd := make([]byte, 10, 50_000) // in the 32 KiB tier: no power of two
		p.Put(&odd)
		for _, n := range []int{3000, 20_000, 32_768, 32_769, 40_000, 65_536} {
			b := p.Get(n) // reslicing a buffer too small would panic
			if len(*b) != n {
				t.Fatalf("Get(%d): length %d", n, len(*b))
			}
			p.Put(b)
		}
	}
	// sync.Pool may drop what it holds at any collection, and drops a
	// quarter of what it is given under the race detector, so one miss
	// says nothing; ten in a row would mean buffers are not kept.
	for range 10 {
		first := p.Get(40_000)
		(*first)[0] = 'x'
		p.Put(first)
		again := p.Get(40_000)
		if &(*again)[0] != &(*first)[0] {
			continue
		}
		if (*again)[0] != 'x' {
			t.Fatal("a reused buffer was cleared")
		}
		return
	}
	t.Fatal("ten buffers given back in a row were not handed out again")
}

// BenchmarkBufferPool_40KiB gets and puts back the buffer of a 40 KiB
// message, as gRPC does for each asynchronous batch, forwarded send or push
// of that size: gRPC's default pool against Cairn's.
func BenchmarkBufferPool_40KiB(b *testing.B) {
	for _, c := range []struct {
		name string
		pool mem.BufferPool
	}{{"grpc-default", mem.DefaultBufferPool()}, {"cairn", &tieredPool{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.pool.Put(c.pool.Get(40 << 10))
			}
		})
	}
}
