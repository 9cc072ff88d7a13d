//go:build !purego

package linalg

import "golang.org/x/sys/cpu"

// archPaths returns the SIMD paths of amd64, fastest first. x/sys/cpu
// reports AVX2 and AVX-512 only when the OS also saves their registers.
func archPaths() []archPath {
	avx512, avx2 := "", ""
	if !cpu.X86.HasAVX512F {
		avx512 = "avx512f"
	}
	switch {
	case !cpu.X86.HasAVX2 && !cpu.X86.HasFMA:
		avx2 = "avx2 and fma"
	case !cpu.X86.HasAVX2:
		avx2 = "avx2"
	case !cpu.X86.HasFMA:
		avx2 = "fma"
	}
	if avx2 != "" && avx512 == "" {
		// The AVX-512 path's convolutions run the AVX2 kernel.
		avx512 = avx2
	}
	return []archPath{
		{PathInfo{Name: "avx512", Missing: avx512}, avx512Backend{}},
		{PathInfo{Name: "avx2", Missing: avx2}, avx2Backend{}},
	}
}
