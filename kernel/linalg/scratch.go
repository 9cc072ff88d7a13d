package linalg

import (
	"math/bits"
	"sync"
)

// Scratch buffers of the convolutions (padded images, packed operands,
// partial sums) are kept between calls in free lists by size class, a
// power of two each. Two things a sync.Pool did wrong here: one pool shared
// by buffers of different sizes (the reference CNN's padded copies hold
// 51K, 518K and 1M values) often handed out one too small, and every
// garbage collection emptied it, so a training step reallocated megabytes
// every few steps. The lists are bounded: at most scratchKeep buffers per
// class, none above scratchMaxClass.
var scratch [scratchMaxClass + 1]struct {
	mu   sync.Mutex
	free []*[]float32
}

const (
	scratchKeep     = 8
	scratchMaxClass = 24 // 16M values, 64 MiB
)

// getScratch returns a buffer of n values, not zeroed, whose capacity is n
// rounded up to a power of two. Return it with putScratch.
func getScratch(n int) *[]float32 {
	class := bits.Len(uint(max(n, 1) - 1))
	if class <= scratchMaxClass {
		s := &scratch[class]
		s.mu.Lock()
		if k := len(s.free); k > 0 {
			bp := s.free[k-1]
			s.free = s.free[:k-1]
			s.mu.Unlock()
			*bp = (*bp)[:n]
			return bp
		}
		s.mu.Unlock()
	}
	buf := make([]float32, n, 1<<class)
	return &buf
}

// putScratch returns a buffer from getScratch to its free list.
func putScratch(bp *[]float32) {
	class := bits.Len(uint(cap(*bp))) - 1
	if class > scratchMaxClass {
		return
	}
	s := &scratch[class]
	s.mu.Lock()
	if len(s.free) < scratchKeep {
		s.free = append(s.free, bp)
	}
	s.mu.Unlock()
}
