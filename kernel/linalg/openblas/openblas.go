//go:build openblas

// Package openblas registers the linalg backend "openblas", which routes
// Sgemm through cgo to OpenBLAS's cblas_sgemm so that users can compare
// against, or pick, the reference BLAS. It exists only with the openblas
// build tag (go build -tags openblas, with Debian's libopenblas-dev
// installed); kernel/cpu then imports it, and it outranks "avx2" as
// linalg.Default. The default build never uses cgo. (It is a package of its
// own because a cgo package cannot hold Go assembly.)
package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
*/
import "C"

import (
	"runtime"
	"sync"

	"github.com/distflow/distflow/kernel/linalg"
)

type openblasBackend struct{}

func (openblasBackend) Name() string { return "openblas" }

var (
	// threadsMu serialises the thread-count update with the calls, so that
	// OpenBLAS uses as many threads as GOMAXPROCS allows Go code (a one-core
	// comparison is then one core on both sides).
	threadsMu sync.Mutex
	threads   int
)

func (openblasBackend) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	linalg.CheckSgemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if alpha == 0 || k == 0 {
		linalg.ScaleC(m, n, beta, c, ldc)
		return
	}
	if p := runtime.GOMAXPROCS(0); p != threadsOf() {
		threadsMu.Lock()
		threads = p
		C.openblas_set_num_threads(C.int(p))
		threadsMu.Unlock()
	}
	ta, tb := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans), C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb),
		C.float(beta), (*C.float)(&c[0]), C.blasint(ldc))
}

func threadsOf() int {
	threadsMu.Lock()
	defer threadsMu.Unlock()
	return threads
}

func init() { linalg.Register(openblasBackend{}) }
