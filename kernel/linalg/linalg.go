package linalg

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// Backend is one implementation of the dense float32 primitives.
//
// All matrices are row-major: element (i, j) of a matrix with row stride ld
// lives at index i*ld + j. Slices are borrowed for the duration of the call
// only; a Backend never retains them. A and B are read-only, C is the only
// slice written, and only its m x n logical elements are touched (padding
// between rows, when ld > columns, is left as is). Implementations must be
// safe for concurrent use by multiple goroutines on distinct outputs.
//
// Invalid arguments (negative sizes, strides smaller than a row, slices too
// short for the described matrix) are programmer errors and panic.
type Backend interface {
	// Name identifies the backend in the registry, e.g. "generic" or "avx2".
	Name() string
	// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices;
	// op(A) is m x k, op(B) is k x n, C is m x n; lda/ldb/ldc are row strides (elements).
	// op(X) is X^T when the matching trans flag is set; A is then stored k x m.
	// When beta == 0, C is overwritten (NaNs in C must not leak through).
	// When alpha == 0 or k == 0, A and B are not read.
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

var (
	regMu    sync.RWMutex
	registry = map[string]Backend{}
	// rank orders the built-in backends by speed; unknown names rank 0.
	rank = map[string]int{"generic": 1, "avx2": 2, "avx512": 3, "openblas": 4}
	// def caches Default() so the hot path is one atomic load.
	def atomic.Pointer[Backend]
)

// Register adds b to the registry; it is meant to be called from init.
// It panics if a backend with the same name is already registered.
// A registered backend outranking the current default (by the built-in
// order openblas > avx512 > avx2 > generic > others) becomes the new
// default. The built-in backends are registered before any other package's
// init runs: one per usable path of Paths, the default the one Path names.
func Register(b Backend) {
	regMu.Lock()
	defer regMu.Unlock()
	name := b.Name()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("linalg: Register called twice for backend %q", name))
	}
	registry[name] = b
	if cur := def.Load(); cur == nil || rank[name] > rank[(*cur).Name()] {
		def.Store(&b)
	}
}

// List returns the names of the registered backends, sorted. The caller owns the slice.
func List() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the backend registered under name.
func Get(name string) (Backend, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	b, ok := registry[name]
	return b, ok
}

// Default returns the backend that Sgemm and the convolutions use:
// "openblas" in builds with the openblas tag, else the one of the built-in
// SIMD path that Path names (the fastest the CPU has, detected at run
// time, unless DISTFLOW_SIMD chose another).
func Default() Backend { return *def.Load() }

// Sgemm is Default().Sgemm, or SgemmBF16 while the Precision is BF16 (see
// SetPrecision); see Backend for the contract.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if precision.Load() == int32(BF16) {
		sgemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	Default().Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm is the float64 counterpart of Sgemm, with the same contract. It runs
// the portable blocked kernel (no SIMD); it is safe for concurrent use.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	gemm(&genericF64, &poolF64, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// CheckSgemm panics, with a message naming the offending operand, when the
// arguments of an Sgemm call cannot describe its matrices. Every Backend
// calls it first, so that all of them fail alike on a programmer error.
func CheckSgemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
}

// ScaleC sets C = beta*C for an m x n matrix with row stride ldc, writing
// zeros (not beta*NaN) when beta == 0: what Sgemm does when alpha or k is 0.
func ScaleC(m, n int, beta float32, c []float32, ldc int) { scale(m, n, beta, c, ldc) }

// checkGemm panics with a descriptive message when the arguments cannot
// describe the matrices; the message names the offending operand.
func checkGemm[T float](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("linalg: gemm: negative size m=%d n=%d k=%d", m, n, k))
	}
	checkMat("A", transA, m, k, a, lda)
	checkMat("B", transB, k, n, b, ldb)
	checkMat("C", false, m, n, c, ldc)
}

// checkMat checks a matrix whose op() is rows x cols.
func checkMat[T float](name string, trans bool, rows, cols int, x []T, ld int) {
	if trans {
		rows, cols = cols, rows
	}
	if ld < max(1, cols) {
		panic(fmt.Sprintf("linalg: gemm: ld%s=%d smaller than row length %d", name, ld, cols))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*ld + cols; len(x) < need {
		panic(fmt.Sprintf("linalg: gemm: len(%s)=%d, need %d for %dx%d with stride %d", name, len(x), need, rows, cols, ld))
	}
}
