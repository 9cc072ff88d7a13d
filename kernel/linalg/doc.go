// Package linalg is the one seam for dense matrix multiply and convolution:
// every MatMul and Conv2D kernel of distflow goes through it, so faster
// implementations drop in without touching ops or graphs.
//
//	// C (2x2) = A (2x3) * B (3x2), row-major, tightly packed.
//	a := []float32{1, 2, 3, 4, 5, 6}
//	b := []float32{7, 8, 9, 10, 11, 12}
//	c := make([]float32, 4)
//	linalg.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2)
//	// c == [58 64 139 154]
//
//	p, err := linalg.NewConvParams(50, 28, 28, 1, 5, 5, 32, 1, 1, true) // SAME
//	if err != nil { ... }
//	linalg.Conv2D(p, input, filter, output) // NHWC, HWIO, NHWC
//
// # Backends and SIMD paths
//
// A Backend implements Sgemm. The built-in ones are the SIMD paths, each
// registered at init when the CPU has what it needs (detected at run time
// with golang.org/x/sys/cpu):
//
//   - "avx512": AVX-512F assembly, a 10x32 tile in zmm registers;
//   - "avx2": AVX2+FMA assembly, a 6x16 tile in the 16 ymm registers;
//   - "generic": portable Go, any architecture.
//
// Path names the one in use and Default returns its backend, which Sgemm
// and the convolutions use (Dgemm is always portable): the fastest the CPU
// has, unless the environment variable DISTFLOW_SIMD, read once at init,
// names a slower one (DISTFLOW_SIMD=avx2 turns AVX-512 off,
// DISTFLOW_SIMD=generic all assembly; empty or "auto" is the default). An
// unknown value falls back to the fastest path, one the CPU lacks to the
// fastest below it, and both are logged as warnings naming the valid values
// or the missing feature. Paths lists every path with what this machine
// lacks for it; List and Get expose the registry, and the conformance suite
// in linalgtest runs against every entry, skipping by name the paths the
// CPU lacks. avx512_gen.go generates the AVX-512 assembly (go generate),
// and avx512_amd64.go records how its tile and blocking were measured.
//
// All paths share one GotoBLAS/BLIS-style driver: op(B) is packed into
// kc x nc panels of nr-wide slivers, alpha*op(A) into mc x kc blocks of
// mr-tall slivers, and a register-tiled mr x nr micro-kernel runs over them.
// Packing turns any transpose and stride into unit-stride streams and lets
// edge tiles run on zero padding (the avx512 kernels then store only the
// valid part, under AVX-512 masks; the others go through a scratch tile). When op(A) has few slivers' worth of
// columns to serve, the avx2 and avx512 kernels read it in place instead of packing
// it, and a product with few rows, many columns and a long k is computed as
// its transpose so that the large operand is the one read in place.
// Products of at least 2^20 multiply-adds (see parallelMin) are split by
// ranges of micro-tiles over the caller and a persistent pool of
// GOMAXPROCS-1 workers (Parallel, shared with the convolutions and the CPU
// kernels' parallel loops), which poll briefly for work before they sleep;
// smaller ones run on the caller's goroutine. Packing buffers and the
// split jobs are pooled, so steady-state calls do not allocate.
//
// # Contract
//
// Matrices are row-major with explicit row strides. Slices are borrowed for
// the duration of a call and never retained; inputs are never written.
// Every function is safe for concurrent use as long as concurrent calls do
// not write overlapping outputs. Malformed sizes or short slices are
// programmer errors and panic; NewConvParams returns errors for user input.
//
// # Convolution
//
// On the avx2 and avx512 paths, Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter
// run as implicit GEMMs (conv_direct.go): a micro-kernel gathers the patch
// matrix straight from a zero-padded copy of the input, so the patches are
// never written out. The input gradient takes this path for stride 1 and at
// least 16 input channels. Otherwise, and on every other backend, they lower
// to Sgemm via im2col/col2im over chunks of the batch (the patch buffer is
// bounded at 8 MiB), copying patches in parallel across images. A 1x1,
// stride-1, unpadded convolution multiplies the input directly with no copy.
package linalg
