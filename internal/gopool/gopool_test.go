package gopool

import (
	"sync"
	"testing"
)

// TestGo: every function runs, concurrently when several block, and the
// goroutines left waiting are at most MaxIdle.
func TestGo(t *testing.T) {
	const n = 3 * MaxIdle
	var started, release, done sync.WaitGroup
	started.Add(n)
	release.Add(1)
	done.Add(n)
	for range n {
		Go(func() {
			started.Done()
			release.Wait() // all n run at once
			done.Done()
		})
	}
	started.Wait()
	release.Done()
	done.Wait()
	for i := range 10 { // reused
		ch := make(chan int)
		Go(func() { ch <- i })
		if got := <-ch; got != i {
			t.Fatalf("got %d, want %d", got, i)
		}
	}
	if got := idle.Load(); got > MaxIdle {
		t.Errorf("%d goroutines idle, want at most %d", got, MaxIdle)
	}
}
