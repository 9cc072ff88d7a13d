//go:build !amd64 || purego

package linalg

// packRowsF32 has no portable assembly; packB's loop does the work.
func packRowsF32(src []float32, ldb, kb, slivers, nr int, dst []float32) bool { return false }
