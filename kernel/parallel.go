package kernel

import (
	"runtime"
	"sync"
)

// minParallelWork is the number of elementary operations below which a
// loop runs inline: spawning goroutines costs about a microsecond each.
const minParallelWork = 1 << 15

// ParallelFor calls fn on disjoint ranges [lo, hi) covering [0, n), in
// parallel across the available cores when n*costPerItem is large enough to
// pay for it, else inline. It returns when every call has returned.
func ParallelFor(n, costPerItem int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if n <= 1 || workers == 1 || n*max(costPerItem, 1) < minParallelWork {
		fn(0, n)
		return
	}
	workers = min(workers, n)
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+chunk, n))
	}
	fn(0, min(chunk, n))
	wg.Wait()
}
