package linalg_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/kernel/linalg"
)

// TestParallelFollowsGOMAXPROCS checks that the pool grows with GOMAXPROCS
// after its first use: at GOMAXPROCS=4 a loop of 4 parts runs them all at
// once (each waits until all 4 have started), even though the pool was
// first used at GOMAXPROCS=1.
func TestParallelFollowsGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	linalg.Parallel(2, 2, linalg.RangeFunc(func(lo, hi int) {}))
	for _, procs := range []int{2, 4} {
		runtime.GOMAXPROCS(procs)
		var started sync.WaitGroup
		started.Add(procs)
		all := make(chan struct{})
		go func() { started.Wait(); close(all) }()
		timedOut := make(chan bool, procs)
		linalg.Parallel(procs, procs, linalg.RangeFunc(func(lo, hi int) {
			started.Done()
			select {
			case <-all:
				timedOut <- false
			case <-time.After(10 * time.Second):
				timedOut <- true
			}
		}))
		for range procs {
			if <-timedOut {
				t.Fatalf("GOMAXPROCS=%d: the %d parts of a loop did not run at once (the pool did not grow)", procs, procs)
			}
		}
	}
}
