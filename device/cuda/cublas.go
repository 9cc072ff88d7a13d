package cuda

import (
	"unsafe"

	"github.com/distflow/distflow/device"
)

// cublas is the subset of cuBLAS the platform uses for MatMul.
type cublas struct {
	lib loaded

	cublasCreate, cublasDestroy, cublasSetStream, cublasSetMathMode, cublasSgemm, cublasSgemmStridedBatched uintptr
	// cublasSetWorkspace is zero where cuBLAS has none (before 11.x).
	cublasSetWorkspace uintptr
}

// cuBLAS enums (cublas_api.h).
const (
	cublasOpN = 0
	cublasOpT = 1

	cublasDefaultMath      = 0 // FP32 math: results agree with the CPU's to float32 rounding
	cublasTF32TensorOpMath = 3
)

func loadCublas() (*cublas, error) {
	lib, err := loadLib(cublasLib)
	if err != nil {
		return nil, err
	}
	b := &cublas{lib: lib}
	if err := resolve(lib, "cuBLAS", []sym{
		{dst: &b.cublasCreate, names: []string{"cublasCreate_v2"}},
		{dst: &b.cublasDestroy, names: []string{"cublasDestroy_v2"}},
		{dst: &b.cublasSetStream, names: []string{"cublasSetStream_v2"}},
		{dst: &b.cublasSetMathMode, names: []string{"cublasSetMathMode"}},
		{dst: &b.cublasSgemm, names: []string{"cublasSgemm_v2"}},
		{dst: &b.cublasSgemmStridedBatched, names: []string{"cublasSgemmStridedBatched"}},
		{dst: &b.cublasSetWorkspace, names: []string{"cublasSetWorkspace_v2"}, optional: true},
	}); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *cublas) check(dev, call string, r uintptr) error {
	code := int(int32(uint32(r)))
	if code == 0 {
		return nil
	}
	return &Error{Device: dev, Call: call, Code: code, Name: statusName(cublasStatusNames, "cublasStatus", code)}
}

// workspaceBytes is the size of a device's cuBLAS workspace on a card of
// compute capability major: cuBLAS's recommendation (32 MiB on Hopper and
// later, 4 MiB before), at most a sixteenth of the device's limit.
func workspaceBytes(major int, limit int64) int64 {
	n := int64(4 << 20)
	if major >= 9 {
		n = 32 << 20
	}
	return min(n, limit/16) &^ (device.Alignment - 1)
}

// newHandle creates a handle in the current context whose work goes on
// stream, with FP32 math unless tf32, in the workspace of work bytes at
// ws if ws is not zero. Without a workspace of its own a handle allocates
// one when a GEMM needs it, which a stream capture records as allocations
// in the graph (cuBLAS 12.2 and later) or refuses; so it is set here,
// after cublasSetStream, which resets it to cuBLAS's own.
func (b *cublas) newHandle(dev string, stream uintptr, tf32 bool, ws device.Ptr, work int64) (uintptr, error) {
	var h uintptr
	if err := b.check(dev, "cublasCreate_v2", ccall(b.cublasCreate, uintptr(unsafe.Pointer(&h)))); err != nil {
		return 0, err
	}
	mode := uintptr(cublasDefaultMath)
	if tf32 {
		mode = cublasTF32TensorOpMath
	}
	err := b.check(dev, "cublasSetStream_v2", ccall(b.cublasSetStream, h, stream))
	if err == nil {
		err = b.check(dev, "cublasSetMathMode", ccall(b.cublasSetMathMode, h, mode))
	}
	if err == nil && ws != 0 && b.cublasSetWorkspace != 0 {
		err = b.check(dev, "cublasSetWorkspace_v2", ccall(b.cublasSetWorkspace, h, uintptr(ws), uintptr(work)))
	}
	if err != nil {
		ccall(b.cublasDestroy, h)
		return 0, err
	}
	return h, nil
}

// gemm is one row-major product C = op(A) op(B) of m x k by k x n
// matrices, batch times at the given element strides; with accumulate,
// C += op(A) op(B) (cuBLAS's beta = 1).
type gemm struct {
	transA, transB   bool
	m, n, k          int
	a, b, c          uint64 // device addresses
	batch            int
	strideA, strideB int64
	strideC          int64
	accumulate       bool
}

// sgemm runs g on handle h. cuBLAS is column-major: a row-major matrix is
// its transpose, so C^T = op(B)^T op(A)^T is computed with the operands
// swapped, which writes C row-major.
func (b *cublas) sgemm(dev string, h uintptr, g gemm) error {
	opA, lda := uintptr(cublasOpN), g.k
	if g.transA {
		opA, lda = cublasOpT, g.m
	}
	opB, ldb := uintptr(cublasOpN), g.n
	if g.transB {
		opB, ldb = cublasOpT, g.k
	}
	alpha, beta := new(float32), new(float32)
	*alpha = 1
	if g.accumulate {
		*beta = 1
	}
	if g.batch <= 1 {
		err := b.check(dev, "cublasSgemm_v2", ccall(b.cublasSgemm, h, opB, opA,
			uintptr(g.n), uintptr(g.m), uintptr(g.k), uintptr(unsafe.Pointer(alpha)),
			uintptr(g.b), uintptr(ldb), uintptr(g.a), uintptr(lda), uintptr(unsafe.Pointer(beta)),
			uintptr(g.c), uintptr(g.n)))
		keepAlive(alpha, beta)
		return err
	}
	err := b.check(dev, "cublasSgemmStridedBatched", ccall(b.cublasSgemmStridedBatched, h, opB, opA,
		uintptr(g.n), uintptr(g.m), uintptr(g.k), uintptr(unsafe.Pointer(alpha)),
		uintptr(g.b), uintptr(ldb), uintptr(g.strideB), uintptr(g.a), uintptr(lda), uintptr(g.strideA),
		uintptr(unsafe.Pointer(beta)), uintptr(g.c), uintptr(g.n), uintptr(g.strideC), uintptr(g.batch)))
	keepAlive(alpha, beta)
	return err
}
