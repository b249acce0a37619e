package client

import (
	"sync"
	"testing"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Close waits on idle for the automatic acknowledgements in flight, while
// listeners may send more: adds from zero and waits happen at once.
func TestInFlight_IdleOnlyOnceEveryRequestIsAnswered(t *testing.T) {
	var f inFlight
	if !closed(f.idle()) {
		t.Fatal("nothing in flight, but not idle")
	}
	f.add()
	f.add()
	idle := f.idle()
	f.done()
	if closed(idle) {
		t.Fatal("idle with a request still in flight")
	}
	f.done()
	if !closed(idle) {
		t.Fatal("not idle once every request was answered")
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 1000 {
				f.add()
				f.done()
			}
		}()
		go func() {
			defer wg.Done()
			for range 1000 {
				<-f.idle()
			}
		}()
	}
	wg.Wait()
	if !closed(f.idle()) {
		t.Fatal("not idle after every add was done")
	}
}
