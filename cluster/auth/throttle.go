package auth

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Failed logins are slowed per source: after freeFailures failures in a
// row from one address, its next try is taken only after a delay that
// doubles with each further failure, up to maxDelay; a try before then is
// refused unchecked. A success from the address, or forgetAfter without a
// failure, starts it afresh. Other sources are not slowed, nor are calls
// whose credentials were checked before from elsewhere.
//
// Decision: refuse early tries, do not hold them. Reason: holding a call
// per try holds a goroutine and a connection per try of a flood; a refusal
// costs neither, and a guesser gets no more than one check per delay.
// Trade-off: a good user behind the same address (a NAT) waits out a
// guesser's delay too.
const (
	freeFailures = 5
	firstDelay   = time.Second
	maxDelay     = 30 * time.Second
	forgetAfter  = 10 * time.Minute
	// maxSources bounds the addresses remembered; past it, the oldest
	// failure is forgotten first.
	maxSources = 10_000
)

// SourceHeader names the address a console call is made for: the
// browser's. It is believed only from this node's own host.
const SourceHeader = "x-cairn-source"

type throttle struct {
	now func() time.Time

	mu      sync.Mutex
	sources map[netip.Addr]*failures

	// failed counts failed logins; refused, tries refused unchecked.
	failed, refused atomic.Uint64
}

type failures struct {
	n     int
	last  time.Time
	until time.Time
}

func newThrottle() *throttle {
	return &throttle{now: time.Now, sources: make(map[netip.Addr]*failures)}
}

// wait is how long source must wait before its next try is checked; zero
// if it may try now.
func (t *throttle) wait(source netip.Addr) time.Duration {
	if !source.IsValid() {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.sources[source]
	if f == nil {
		return 0
	}
	now := t.now()
	if now.Sub(f.last) > forgetAfter {
		delete(t.sources, source)
		return 0
	}
	if d := f.until.Sub(now); d > 0 {
		t.refused.Add(1)
		return d
	}
	return 0
}

// fail counts a failed login from source.
func (t *throttle) fail(source netip.Addr) {
	t.failed.Add(1)
	if !source.IsValid() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	f := t.sources[source]
	if f == nil || now.Sub(f.last) > forgetAfter {
		if f == nil && len(t.sources) >= maxSources {
			t.forgetOldestLocked()
		}
		f = &failures{}
		t.sources[source] = f
	}
	f.n++
	f.last = now
	if over := f.n - freeFailures; over > 0 {
		d := maxDelay
		if over <= 6 { // 1 s << 5 = 32 s passes maxDelay
			d = min(firstDelay<<(over-1), maxDelay)
		}
		f.until = now.Add(d)
	}
}

// succeed forgets source's failures.
func (t *throttle) succeed(source netip.Addr) {
	if !source.IsValid() {
		return
	}
	t.mu.Lock()
	delete(t.sources, source)
	t.mu.Unlock()
}

func (t *throttle) forgetOldestLocked() {
	var oldest netip.Addr
	var at time.Time
	for a, f := range t.sources {
		if !oldest.IsValid() || f.last.Before(at) {
			oldest, at = a, f.last
		}
	}
	delete(t.sources, oldest)
}

// sourceOf is the address a call comes from: its connection's remote
// address, or, for a call from this node's own host (the console, calling
// for a browser), the address SourceHeader names.
func sourceOf(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	remote := addrOf(p.Addr)
	if sameHost(remote, p.LocalAddr) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(SourceHeader); len(v) > 0 {
				if a, err := netip.ParseAddr(v[0]); err == nil {
					return a.Unmap()
				}
			}
		}
	}
	return remote
}

func addrOf(a net.Addr) netip.Addr {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// sameHost says whether remote is this host: a loopback address, or the
// address the call arrived at.
func sameHost(remote netip.Addr, local net.Addr) bool {
	return remote.IsLoopback() || (local != nil && remote.IsValid() && remote == addrOf(local))
}
