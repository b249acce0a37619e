package raftgroup

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnmq/cairn/test/wait"

	"golang.org/x/time/rate"
)

func TestSnapshotSends_AtMostTransfersAtOnce(t *testing.T) {
	const transfers, sends = 2, 6
	s := NewSnapshotSends(transfers, 0)
	var active, most, entered atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range sends {
		wg.Go(func() {
			err := s.send(make(chan struct{}), bytes.NewReader(nil), func(io.Reader) error {
				n := active.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				entered.Add(1)
				<-release
				active.Add(-1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	for released := int32(0); released < sends; released++ {
		want := min(released+transfers, sends)
		wait.For(t, 10*time.Second, "sends to enter", func() bool { return entered.Load() >= want })
		release <- struct{}{}
	}
	wg.Wait()
	if got := most.Load(); got != transfers {
		t.Fatalf("%d snapshot sends ran at once; want at most (and, with %d waiting, exactly) %d", got, sends, transfers)
	}
}

func TestSnapshotSends_ClosingTheGroupEndsTheWaitForASlot(t *testing.T) {
	s := NewSnapshotSends(1, 0)
	holding, release := make(chan struct{}), make(chan struct{})
	go s.send(make(chan struct{}), bytes.NewReader(nil), func(io.Reader) error {
		close(holding)
		<-release
		return nil
	})
	<-holding
	defer close(release)
	done := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- s.send(done, bytes.NewReader(nil), func(io.Reader) error {
			t.Error("a send ran while the only slot was held")
			return nil
		})
	}()
	close(done)
	if err := <-result; !errors.Is(err, errGroupClosed) {
		t.Fatalf("send = %v, want errGroupClosed", err)
	}
}

func TestSnapshotSends_ReadsNoFasterThanTheRate(t *testing.T) {
	// One byte an hour: the burst (one chunk) passes at once, the byte
	// after it waits until the group closes.
	s := NewSnapshotSends(1, 1)
	s.limiter = rate.NewLimiter(rate.Every(time.Hour), snapshotChunk)
	data := bytes.Repeat([]byte{7}, snapshotChunk+1)
	done := make(chan struct{})
	var read atomic.Int64
	result := make(chan error, 1)
	go func() {
		result <- s.send(done, bytes.NewReader(data), func(r io.Reader) error {
			buf := make([]byte, 64<<10)
			for {
				n, err := r.Read(buf)
				read.Add(int64(n))
				if err != nil {
					return err
				}
			}
		})
	}()
	wait.For(t, 10*time.Second, "the burst to be read", func() bool { return read.Load() >= snapshotChunk })
	select {
	case err := <-result:
		t.Fatalf("the send ended (%v) with %d of %d bytes read, before the rate allowed the last", err, read.Load(), len(data))
	default:
	}
	close(done)
	if err := <-result; !errors.Is(err, errGroupClosed) {
		t.Fatalf("send = %v, want errGroupClosed once the group closes", err)
	}
	if got := read.Load(); got != int64(len(data)) {
		t.Fatalf("read %d bytes, want %d (the last one read, then held)", got, len(data))
	}
}

func TestSnapshotSends_NilPacesNothing(t *testing.T) {
	var s *SnapshotSends
	data := bytes.Repeat([]byte{1}, 3*snapshotChunk)
	var got []byte
	err := s.send(nil, bytes.NewReader(data), func(r io.Reader) (err error) {
		got, err = io.ReadAll(r)
		return err
	})
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, err %v; want %d", len(got), err, len(data))
	}
}
