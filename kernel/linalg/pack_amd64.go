//go:build !purego

package linalg

import "golang.org/x/sys/cpu"

//go:noescape
func packRowsAVX(src *float32, ldb, kb, slivers, nr int, dst *float32, ahead int)

// packAhead is how many rows ahead packRowsAVX prefetches the columns it
// packs: a weight matrix too large for the caches comes from memory, a
// row per 4 KiB page, where the hardware prefetchers do not follow. 8 to
// 32 measured alike on the reference CNN's fc1 (about 8% faster than none).
const packAhead = 16

// packRowsF32 copies the kb x slivers*nr block of src (row stride ldb)
// into dst as slivers nr wide, each kb x nr row-major, one after the other
// (packB's layout), in assembly, and reports whether it could: nr must be
// a multiple of 16 and the CPU have AVX.
func packRowsF32(src []float32, ldb, kb, slivers, nr int, dst []float32) bool {
	if !cpu.X86.HasAVX || nr%16 != 0 || kb < 1 || slivers < 1 {
		return false
	}
	_ = src[(kb-1)*ldb+slivers*nr-1]
	_ = dst[slivers*kb*nr-1]
	packRowsAVX(&src[0], ldb, kb, slivers, nr, &dst[0], packAhead*ldb*4)
	return true
}
