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
// # Backends
//
// A Backend implements Sgemm. Two are built in and registered at init:
// "generic" (portable Go, any architecture) and "avx2" (hand-written AVX2+FMA
// assembly micro-kernel, registered only when the CPU reports both features
// at run time). Default returns the fastest registered one; Sgemm, Dgemm and
// the convolutions use it. List and Get expose the registry, and the
// conformance suite in linalgtest runs against every entry.
//
// Both backends share one GotoBLAS/BLIS-style driver: op(B) is packed into
// kc x nc panels of nr-wide slivers, alpha*op(A) into mc x kc blocks of
// mr-tall slivers, and a register-tiled mr x nr micro-kernel runs over them.
// Packing turns any transpose and stride into unit-stride streams and lets
// edge tiles run on zero padding. When op(A) has few slivers' worth of
// columns to serve, the avx2 kernel reads it in place instead of packing
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
// On the avx2 backend, Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter
// run as implicit GEMMs (conv_direct.go): a micro-kernel gathers the patch
// matrix straight from a zero-padded copy of the input, so the patches are
// never written out. The input gradient takes this path for stride 1 and at
// least 16 input channels. Otherwise, and on every other backend, they lower
// to Sgemm via im2col/col2im over chunks of the batch (the patch buffer is
// bounded at 8 MiB), copying patches in parallel across images. A 1x1,
// stride-1, unpadded convolution multiplies the input directly with no copy.
package linalg
