package linalg

import (
	"math/bits"
	"sync"
)

// freeList keeps items between uses, as a sync.Pool would, except that
// garbage collection does not empty it and it holds a bounded number.
type freeList[E any] struct {
	mu   sync.Mutex
	free []E
}

// get returns a kept item, if there is one.
func (l *freeList[E]) get() (e E, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := len(l.free)
	if k == 0 {
		return e, false
	}
	e = l.free[k-1]
	l.free = l.free[:k-1]
	return e, true
}

// put keeps e unless keep items are kept already.
func (l *freeList[E]) put(e E, keep int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < keep {
		l.free = append(l.free, e)
	}
}

// Scratch buffers of the convolutions (padded images, packed operands,
// partial sums) are kept between calls in free lists by size class, a
// power of two each. Two things a sync.Pool did wrong here: one pool shared
// by buffers of different sizes (the reference CNN's padded copies hold
// 51K, 518K and 1M values) often handed out one too small, and every
// garbage collection emptied it, so a training step reallocated megabytes
// every few steps. The lists are bounded: at most scratchKeep buffers per
// class, none above scratchMaxClass.
var scratch [scratchMaxClass + 1]freeList[*[]float32]

const (
	scratchKeep     = 8
	scratchMaxClass = 24 // 16M values, 64 MiB
)

// getScratch returns a buffer of n values, not zeroed, whose capacity is n
// rounded up to a power of two. Return it with putScratch.
func getScratch(n int) *[]float32 {
	class := bits.Len(uint(max(n, 1) - 1))
	if class <= scratchMaxClass {
		if bp, ok := scratch[class].get(); ok {
			*bp = (*bp)[:n]
			return bp
		}
	}
	buf := make([]float32, n, 1<<class)
	return &buf
}

// putScratch returns a buffer from getScratch to its free list.
func putScratch(bp *[]float32) {
	if class := bits.Len(uint(cap(*bp))) - 1; class <= scratchMaxClass {
		scratch[class].put(bp, scratchKeep)
	}
}
