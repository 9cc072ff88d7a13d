package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/kernel/linalg"
	"github.com/distflow/distflow/tensor"
)

// MatMul (through the linalg GEMM seam), MatrixInverse and MatrixDeterminant.

func mathMatMulFactory(n *graph.Node) (kernel.Kernel, error) {
	ta, tb := n.AttrBool("transpose_a"), n.AttrBool("transpose_b")
	return kernel.Func(func(c *kernel.Context) error {
		a, b := c.Inputs[0], c.Inputs[1]
		as, bs := a.Shape(), b.Shape()
		bad := func(what string) error {
			return c.Errorf("MatMul: %s: %v x %v (transpose_a=%v, transpose_b=%v)",
				what, a.StaticShape(), b.StaticShape(), ta, tb)
		}
		if a.DType() != b.DType() {
			return c.Errorf("MatMul: dtypes differ: %v and %v", a.DType(), b.DType())
		}
		r := len(as)
		if r < 2 || len(bs) != r {
			return bad("operands must be matrices (or batches of the same rank)")
		}
		if !slices.Equal(as[:r-2], bs[:r-2]) {
			return bad("batch dimensions differ")
		}
		m, k := as[r-2], as[r-1]
		if ta {
			m, k = k, m
		}
		kb, nn := bs[r-2], bs[r-1]
		if tb {
			kb, nn = nn, kb
		}
		if k != kb {
			return bad("inner dimensions differ")
		}
		batch := tensor.NumElements(as[:r-2])
		var dimsBuf [8]int
		dims := append(append(dimsBuf[:0], as[:r-2]...), m, nn)
		o := c.AllocUninit(0, a.DType(), dims...)
		if m == 0 || nn == 0 || k == 0 || batch == 0 {
			clearOutput(o) // empty, or a sum over nothing: zeros
			return nil
		}
		lda, ldb := as[r-1], bs[r-1]
		sa, sb, so := m*k, k*nn, m*nn
		switch a.DType() {
		case tensor.Float32:
			x, y, z := a.Float32s(), b.Float32s(), o.Float32s()
			for i := 0; i < batch; i++ {
				linalg.Sgemm(ta, tb, m, nn, k, 1, x[i*sa:(i+1)*sa], lda, y[i*sb:(i+1)*sb], ldb, 0, z[i*so:(i+1)*so], nn)
			}
		case tensor.Float64:
			x, y, z := a.Float64s(), b.Float64s(), o.Float64s()
			for i := 0; i < batch; i++ {
				linalg.Dgemm(ta, tb, m, nn, k, 1, x[i*sa:(i+1)*sa], lda, y[i*sb:(i+1)*sb], ldb, 0, z[i*so:(i+1)*so], nn)
			}
		default:
			return c.Errorf("MatMul: unsupported dtype %v", a.DType())
		}
		return nil
	}), nil
}

// mathErrSingular reports a singular matrix (or a pivot too small to trust).
var mathErrSingular = fmt.Errorf("matrix is singular")

// mathLU factors the n x n row-major matrix a in place as P A = L U with
// partial pivoting, recording the row swaps in perm. It returns the sign of
// the permutation, or mathErrSingular when a pivot is at most relTol times
// n times the matrix's largest entry (relTol 0: only an exact zero).
func mathLU(a []float64, n int, perm []int, relTol float64) (sign float64, err error) {
	scale := 0.0
	for _, v := range a {
		scale = max(scale, math.Abs(v))
	}
	tiny := scale * float64(n) * relTol
	sign = 1
	for i := range perm {
		perm[i] = i
	}
	for col := 0; col < n; col++ {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r*n+col]) > math.Abs(a[p*n+col]) {
				p = r
			}
		}
		if piv := math.Abs(a[p*n+col]); piv <= tiny || math.IsNaN(piv) {
			return 0, mathErrSingular
		}
		if p != col {
			for j := 0; j < n; j++ {
				a[p*n+j], a[col*n+j] = a[col*n+j], a[p*n+j]
			}
			perm[p], perm[col] = perm[col], perm[p]
			sign = -sign
		}
		inv := 1 / a[col*n+col]
		for r := col + 1; r < n; r++ {
			f := a[r*n+col] * inv
			a[r*n+col] = f
			if f == 0 {
				continue
			}
			row, piv := a[r*n+col+1:r*n+n], a[col*n+col+1:col*n+n]
			for j := range row {
				row[j] -= f * piv[j]
			}
		}
	}
	return sign, nil
}

// mathInvert writes the inverse of the LU-factored matrix into inv (n x n).
func mathInvert(lu []float64, n int, perm []int, inv []float64) {
	col := make([]float64, n)
	for j := 0; j < n; j++ {
		// Solve L U x = P e_j.
		for i := range col {
			col[i] = 0
			if perm[i] == j {
				col[i] = 1
			}
		}
		for i := 0; i < n; i++ {
			s := col[i]
			for k := 0; k < i; k++ {
				s -= lu[i*n+k] * col[k]
			}
			col[i] = s
		}
		for i := n - 1; i >= 0; i-- {
			s := col[i]
			for k := i + 1; k < n; k++ {
				s -= lu[i*n+k] * col[k]
			}
			col[i] = s / lu[i*n+i]
		}
		for i := 0; i < n; i++ {
			inv[i*n+j] = col[i]
		}
	}
}

// mathSquareBatch checks that x is [..., n, n] and returns the batch size and n.
func mathSquareBatch(x *tensor.Tensor) (batch, n int, err error) {
	s := x.Shape()
	if len(s) < 2 || s[len(s)-1] != s[len(s)-2] {
		return 0, 0, fmt.Errorf("input must be square matrices [..., n, n], got shape %v", x.StaticShape())
	}
	n = s[len(s)-1]
	return tensor.NumElements(s[:len(s)-2]), n, nil
}

// mathMatrixKernel computes the inverse (det false) or the determinant of
// each matrix of a float batch, accumulating in float64. An inverse of a
// numerically singular matrix is an error; its determinant is 0 only when a
// pivot is exactly zero, so that tiny determinants survive.
func mathMatrixKernel(name string, det bool) kernel.Factory {
	return kernel.Simple(func(c *kernel.Context) error {
		x := c.Inputs[0]
		if !x.DType().IsFloat() {
			return c.Errorf("%s: unsupported dtype %v", name, x.DType())
		}
		batch, n, err := mathSquareBatch(x)
		if err != nil {
			return c.Errorf("%s: %w", name, err)
		}
		var o *tensor.Tensor
		if det {
			o = c.Alloc(0, x.DType(), x.Shape()[:x.Rank()-2]...)
		} else {
			o = c.Alloc(0, x.DType(), x.Shape()...)
		}
		lu, inv, perm := make([]float64, n*n), make([]float64, n*n), make([]int, n)
		for b := 0; b < batch; b++ {
			for i := range lu {
				lu[i] = x.Float64At(b*n*n + i)
			}
			relTol := 0x1p-52 // float64 epsilon
			if det {
				relTol = 0
			}
			sign, err := mathLU(lu, n, perm, relTol)
			if det {
				d := 0.0 // a singular matrix has determinant 0
				if err == nil {
					d = sign
					for i := 0; i < n; i++ {
						d *= lu[i*n+i]
					}
				}
				o.SetFloat64At(b, d)
				continue
			}
			if err != nil {
				return c.Errorf("%s: matrix %d of %v is singular", name, b, x.StaticShape())
			}
			mathInvert(lu, n, perm, inv)
			for i, v := range inv {
				o.SetFloat64At(b*n*n+i, v)
			}
		}
		return nil
	})
}

func init() {
	kernel.Register("MatMul", kernel.CPU, mathMatMulFactory)
	kernel.Register("MatrixInverse", kernel.CPU, mathMatrixKernel("MatrixInverse", false))
	kernel.Register("MatrixDeterminant", kernel.CPU, mathMatrixKernel("MatrixDeterminant", true))
}

// clearOutput zeroes a tensor from AllocUninit.
func clearOutput(t *tensor.Tensor) {
	switch d := t.Data().(type) {
	case []float32:
		clear(d)
	case []float64:
		clear(d)
	}
}
