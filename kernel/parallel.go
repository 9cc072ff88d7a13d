package kernel

import (
	"runtime"

	"github.com/distflow/distflow/kernel/linalg"
)

// minParallelWork is the number of elementary operations below which a
// loop runs inline: handing a range to another core costs about a
// microsecond even when its worker is awake.
const minParallelWork = 1 << 15

// ParallelFor calls fn on disjoint ranges [lo, hi) covering [0, n), in
// parallel across the available cores (on linalg's persistent pool) when
// n*costPerItem is large enough to pay for it, else inline. It returns when
// every call has returned.
func ParallelFor(n, costPerItem int, fn func(lo, hi int)) {
	if Serial(n, costPerItem) {
		fn(0, n)
		return
	}
	linalg.Parallel(n, runtime.GOMAXPROCS(0), linalg.RangeFunc(fn))
}

// Serial reports whether ParallelFor(n, costPerItem, fn) would run fn inline.
// Hot kernels test it first and call their loop directly, so that the
// closure, which escapes to the heap because other goroutines may run it,
// is only built when the loop really is split.
func Serial(n, costPerItem int) bool {
	return n <= 1 || runtime.GOMAXPROCS(0) == 1 || n*max(costPerItem, 1) < minParallelWork
}

// ParallelRange is ParallelFor for a loop given as a linalg.Ranger. A func
// literal given to ParallelFor is a heap allocation on every split call; a
// hot kernel can instead keep its loop state in a pooled struct with a
// Range method.
func ParallelRange(n, costPerItem int, r linalg.Ranger) {
	if Serial(n, costPerItem) {
		if n > 0 {
			r.Range(0, n)
		}
		return
	}
	linalg.Parallel(n, runtime.GOMAXPROCS(0), r)
}
