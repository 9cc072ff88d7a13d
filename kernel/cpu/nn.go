package cpu

import (
	"math"
	"slices"
	"sync"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// CPU kernels of the neural-network family, element-wise and per-row ops:
// BiasAdd, activations and their gradients, softmax and its losses, L2Loss.
// Convolution and pooling are in nn_conv.go.
//
// These are the hot path of training: every kernel allocates only its
// outputs, runs one fused loop per row and splits rows across cores with
// kernel.ParallelFor. float32 math goes through float64 (math.Exp) for
// accuracy; the conversion is cheap next to the memory traffic.

func init() {
	kernel.Register("BiasAdd", kernel.CPU, kernel.Simple(nnBiasAdd))
	kernel.Register("BiasAddGrad", kernel.CPU, kernel.Simple(nnBiasAddGrad))
	kernel.Register("Relu", kernel.CPU, kernel.Simple(nnRelu))
	kernel.Register("ReluGrad", kernel.CPU, kernel.Simple(nnReluGrad))
	kernel.Register("Sigmoid", kernel.CPU, kernel.Simple(nnUnaryFloat(nnSigmoidF32, nnSigmoid[float64], 1, nnExpCost)))
	kernel.Register("Tanh", kernel.CPU, kernel.Simple(nnUnaryFloat(nnTanh[float32], nnTanh[float64], 20, 20)))
	kernel.Register("Softplus", kernel.CPU, kernel.Simple(nnUnaryFloat(nnSoftplus[float32], nnSoftplus[float64], 40, 40)))
	kernel.Register("SigmoidGrad", kernel.CPU, kernel.Simple(nnBinaryFloat(nnSigmoidGradF32, nnSigmoidGrad[float64])))
	kernel.Register("TanhGrad", kernel.CPU, kernel.Simple(nnBinaryFloat(nnTanhGrad[float32], nnTanhGrad[float64])))
	kernel.Register("Softmax", kernel.CPU, kernel.Simple(nnSoftmaxKernel(false)))
	kernel.Register("LogSoftmax", kernel.CPU, kernel.Simple(nnSoftmaxKernel(true)))
	kernel.Register("SoftmaxCrossEntropyWithLogits", kernel.CPU, kernel.Simple(nnSoftmaxXent))
	kernel.Register("SparseSoftmaxCrossEntropyWithLogits", kernel.CPU, kernel.Simple(nnSparseSoftmaxXent))
	kernel.Register("L2Loss", kernel.CPU, kernel.Simple(nnL2Loss))
}

type nnFloat interface{ ~float32 | ~float64 }

type nnNumber interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// nnExpCost is the rough cost of one math.Exp in elementary operations, used
// to decide when ParallelFor pays off.
const nnExpCost = 20

// nnParallel2 runs f over matching chunks of x and y in parallel.
func nnParallel2[T any](x, y []T, cost int, f func(x, y []T)) {
	if kernel.Serial(len(x), cost) {
		f(x, y) // no closure to allocate
		return
	}
	j, _ := rangeJobs2.Get().(*rangeJob2[T])
	if j == nil {
		j = new(rangeJob2[T])
	}
	j.x, j.y, j.f = x, y, f
	kernel.ParallelRange(len(x), cost, j)
	*j = rangeJob2[T]{}
	rangeJobs2.Put(j)
}

// rangeJob2 is nnParallel2's split loop, pooled so that it does not
// allocate a closure per call (a pooled job of another element type is
// dropped, not reused).
type rangeJob2[T any] struct {
	x, y []T
	f    func(x, y []T)
}

func (j *rangeJob2[T]) Range(lo, hi int) { j.f(j.x[lo:hi], j.y[lo:hi]) }

var rangeJobs2 sync.Pool

// nnParallel3 runs f over matching chunks of a, b and y in parallel.
func nnParallel3[T any](a, b, y []T, cost int, f func(a, b, y []T)) {
	if kernel.Serial(len(y), cost) {
		f(a, b, y)
		return
	}
	kernel.ParallelFor(len(y), cost, func(lo, hi int) { f(a[lo:hi], b[lo:hi], y[lo:hi]) })
}

// ---- BiasAdd ----

func nnBiasAdd(c *kernel.Context) error {
	x, b := c.Input(0), c.Input(1)
	if x.DType() != b.DType() {
		return c.Errorf("value and bias have different dtypes: %v and %v", x.DType(), b.DType())
	}
	if x.Rank() < 1 || b.Rank() != 1 || x.Shape()[x.Rank()-1] != b.Shape()[0] {
		return c.Errorf("bias %v does not match the last dimension of value %v", b.Shape(), x.Shape())
	}
	y := c.AllocUninit(0, x.DType(), x.Shape()...)
	switch x.DType() {
	case tensor.Float32:
		nnBiasAddT(x.Float32s(), b.Float32s(), y.Float32s())
	case tensor.Float64:
		nnBiasAddT(x.Float64s(), b.Float64s(), y.Float64s())
	case tensor.Int32:
		nnBiasAddT(x.Int32s(), b.Int32s(), y.Int32s())
	case tensor.Int64:
		nnBiasAddT(x.Int64s(), b.Int64s(), y.Int64s())
	default:
		return c.Errorf("unsupported dtype %v", x.DType())
	}
	return nil
}

func nnBiasAddT[T nnNumber](x, b, y []T) {
	C := len(b)
	if C == 0 {
		return
	}
	if rows := len(x) / C; kernel.Serial(rows, C) {
		nnBiasAddRows(x, b, y, 0, rows)
	} else {
		kernel.ParallelFor(rows, C, func(lo, hi int) { nnBiasAddRows(x, b, y, lo, hi) })
	}
}

func nnBiasAddRows[T nnNumber](x, b, y []T, lo, hi int) {
	C := len(b)
	if x32, ok := any(x).([]float32); ok {
		b32, y32 := any(b).([]float32), any(y).([]float32)
		for r := lo; r < hi; r++ {
			nnAddF32(x32[r*C:(r+1)*C], b32, y32[r*C:(r+1)*C])
		}
		return
	}
	for r := lo; r < hi; r++ {
		xr, yr := x[r*C:(r+1)*C], y[r*C:(r+1)*C]
		for i, v := range xr {
			yr[i] = v + b[i]
		}
	}
}

func nnBiasAddGrad(c *kernel.Context) error {
	dy := c.Input(0)
	if dy.Rank() < 1 {
		return c.Errorf("out_backprop must have rank >= 1, got shape %v", dy.Shape())
	}
	C := dy.Shape()[dy.Rank()-1]
	db := c.Alloc(0, dy.DType(), C)
	switch dy.DType() {
	case tensor.Float32:
		nnBiasGradFloat(dy.Float32s(), db.Float32s(), nnBiasGradF32)
	case tensor.Float64:
		nnBiasGradFloat(dy.Float64s(), db.Float64s(), nnBiasGradCols[float64])
	case tensor.Int32:
		nnBiasGradInt(dy.Int32s(), db.Int32s())
	case tensor.Int64:
		nnBiasGradInt(dy.Int64s(), db.Int64s())
	default:
		return c.Errorf("unsupported dtype %v", dy.DType())
	}
	return nil
}

// nnBiasBlock is the number of columns BiasAddGrad sums at once in float64
// accumulators kept on the stack.
const nnBiasBlock = 64

// nnBiasGradFloat sums dy [rows, C] over rows into db [C]. Cores split the
// columns rather than the rows so that each column is summed in one fixed
// order (results do not depend on the core count) without scratch buffers;
// each worker still streams whole rows, which is what the memory system
// wants when C is small.
//
// cols sums the columns [lo, hi): nnBiasGradCols or a vectorised version.
func nnBiasGradFloat[T nnFloat](dy, db []T, cols func(dy, db []T, rows, lo, hi int)) {
	C := len(db)
	if C == 0 {
		return
	}
	rows := len(dy) / C
	if kernel.Serial(C, rows) {
		cols(dy, db, rows, 0, C)
		return
	}
	kernel.ParallelFor(C, rows, func(lo, hi int) { cols(dy, db, rows, lo, hi) })
}

func nnBiasGradCols[T nnFloat](dy, db []T, rows, lo, hi int) {
	C := len(db)
	var acc [nnBiasBlock]float64
	for c0 := lo; c0 < hi; c0 += nnBiasBlock {
		w := min(nnBiasBlock, hi-c0)
		a := acc[:w]
		clear(a)
		for r := 0; r < rows; r++ {
			row := dy[r*C+c0 : r*C+c0+w]
			for i, v := range row {
				a[i] += float64(v)
			}
		}
		for i, v := range a {
			db[c0+i] = T(v)
		}
	}
}

func nnBiasGradInt[T ~int32 | ~int64](dy, db []T) {
	C := len(db)
	if C == 0 {
		return
	}
	for r := 0; r+C <= len(dy); r += C {
		for i, v := range dy[r : r+C] {
			db[i] += v
		}
	}
}

// ---- Activations ----

func nnRelu(c *kernel.Context) error {
	x := c.Input(0)
	y := c.AllocUninit(0, x.DType(), x.Shape()...)
	switch x.DType() {
	case tensor.Float32:
		nnParallel2(x.Float32s(), y.Float32s(), 1, nnReluF32)
	case tensor.Float64:
		nnParallel2(x.Float64s(), y.Float64s(), 1, nnReluT[float64])
	case tensor.Int32:
		nnParallel2(x.Int32s(), y.Int32s(), 1, nnReluT[int32])
	case tensor.Int64:
		nnParallel2(x.Int64s(), y.Int64s(), 1, nnReluT[int64])
	default:
		return c.Errorf("unsupported dtype %v", x.DType())
	}
	return nil
}

func nnReluT[T nnNumber](x, y []T) {
	for i, v := range x {
		y[i] = max(v, 0)
	}
}

func nnReluGrad(c *kernel.Context) error {
	dy, y := c.Input(0), c.Input(1)
	if dy.DType() != y.DType() || !slices.Equal(dy.Shape(), y.Shape()) {
		return c.Errorf("dy %v%v and y %v%v must have the same dtype and shape", dy.DType(), dy.Shape(), y.DType(), y.Shape())
	}
	dx := c.AllocUninit(0, dy.DType(), dy.Shape()...)
	switch dy.DType() {
	case tensor.Float32:
		nnParallel3(dy.Float32s(), y.Float32s(), dx.Float32s(), 1, nnReluGradF32)
	case tensor.Float64:
		nnParallel3(dy.Float64s(), y.Float64s(), dx.Float64s(), 1, nnReluGradT[float64])
	case tensor.Int32:
		nnParallel3(dy.Int32s(), y.Int32s(), dx.Int32s(), 1, nnReluGradT[int32])
	case tensor.Int64:
		nnParallel3(dy.Int64s(), y.Int64s(), dx.Int64s(), 1, nnReluGradT[int64])
	default:
		return c.Errorf("unsupported dtype %v", dy.DType())
	}
	return nil
}

// nnReluGradT is written so that the compiler emits a conditional move:
// the sign of y is unpredictable and a branch would mispredict half the time.
func nnReluGradT[T nnNumber](dy, y, dx []T) {
	dy = dy[:len(y)]
	dx = dx[:len(y)]
	for i, v := range y {
		d := dy[i]
		if v <= 0 {
			d = 0
		}
		dx[i] = d
	}
}

// nnUnaryFloat makes the kernel of a float-only element-wise op; cost32
// and cost64 are the rough costs of one element in elementary operations
// (see kernel.ParallelFor).
func nnUnaryFloat(f32 func(x, y []float32), f64 func(x, y []float64), cost32, cost64 int) func(c *kernel.Context) error {
	return func(c *kernel.Context) error {
		x := c.Input(0)
		y := c.AllocUninit(0, x.DType(), x.Shape()...)
		switch x.DType() {
		case tensor.Float32:
			nnParallel2(x.Float32s(), y.Float32s(), cost32, f32)
		case tensor.Float64:
			nnParallel2(x.Float64s(), y.Float64s(), cost64, f64)
		default:
			return c.Errorf("unsupported dtype %v: want float32 or float64", x.DType())
		}
		return nil
	}
}

// nnBinaryFloat makes the kernel of an activation gradient f(y, dy).
func nnBinaryFloat(f32 func(y, dy, dx []float32), f64 func(y, dy, dx []float64)) func(c *kernel.Context) error {
	return func(c *kernel.Context) error {
		y, dy := c.Input(0), c.Input(1)
		if dy.DType() != y.DType() || !slices.Equal(dy.Shape(), y.Shape()) {
			return c.Errorf("y %v%v and dy %v%v must have the same dtype and shape", y.DType(), y.Shape(), dy.DType(), dy.Shape())
		}
		dx := c.AllocUninit(0, y.DType(), y.Shape()...)
		switch y.DType() {
		case tensor.Float32:
			nnParallel3(y.Float32s(), dy.Float32s(), dx.Float32s(), 2, f32)
		case tensor.Float64:
			nnParallel3(y.Float64s(), dy.Float64s(), dx.Float64s(), 2, f64)
		default:
			return c.Errorf("unsupported dtype %v: want float32 or float64", y.DType())
		}
		return nil
	}
}

func nnSigmoid[T nnFloat](x, y []T) {
	for i, v := range x {
		// exp(-v) overflows to +Inf for v < -709, giving the correct 0.
		y[i] = T(1 / (1 + math.Exp(-float64(v))))
	}
}

// nnSigmoidF32Scalar is the float32 sigmoid through nnExp32, about 3x
// faster than going through float64 math.Exp; nnSigmoidF32 runs it eight
// lanes at a time where it can.
func nnSigmoidF32Scalar(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = 1 / (1 + nnExp32(-v))
	}
}

// nnExpF32Scalar sets y[i] = nnExp32(x[i]); nnExpF32 runs it eight lanes
// at a time where it can.
func nnExpF32Scalar(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = nnExp32(v)
	}
}

// nnAddF32Scalar sets y = a + b element-wise; nnAddF32 runs it eight lanes
// at a time where it can.
func nnAddF32Scalar(a, b, y []float32) {
	b, y = b[:len(a)], y[:len(a)]
	for i, v := range a {
		y[i] = v + b[i]
	}
}

// nnSubScaledF32Scalar sets v[i] -= alpha*g[i] (the gradient descent
// update); nnSubScaledF32 runs it eight lanes at a time where it can.
func nnSubScaledF32Scalar(v, g []float32, alpha float32) {
	g = g[:len(v)]
	for i := range v {
		v[i] -= alpha * g[i]
	}
}

// nnExp32 is exp for float32 within 2 ulp (Cephes expf): x = n*ln2 + r with
// |r| <= ln2/2, a degree-6 polynomial for exp(r), then a scaling by 2^n
// built in the exponent bits. It returns +Inf above 88.3 and 0 below -87.3
// (no subnormal results).
func nnExp32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.3:
		return float32(math.Inf(1))
	case x < -87.3:
		return 0
	}
	const round = 12582912 // 1.5*2^23: adding it rounds to an integer
	n := x*1.44269504088896341 + round
	n -= round
	r := x - n*0.693359375 - n*-2.12194440e-4
	z := r * r
	p := ((((1.9875691500e-4*r+1.3981999507e-3)*r+8.3334519073e-3)*r+4.1665795894e-2)*r+1.6666665459e-1)*r + 5.0000001201e-1
	e := p*z + r + 1
	return e * math.Float32frombits(uint32(int32(n)+127)<<23)
}

func nnTanh[T nnFloat](x, y []T) {
	for i, v := range x {
		y[i] = T(math.Tanh(float64(v)))
	}
}

// nnSoftplus computes log(1 + exp(x)) without overflow: for x > 0 it is
// x + log(1 + exp(-x)).
func nnSoftplus[T nnFloat](x, y []T) {
	for i, v := range x {
		f := float64(v)
		if f > 0 {
			y[i] = T(f + math.Log1p(math.Exp(-f)))
		} else {
			y[i] = T(math.Log1p(math.Exp(f)))
		}
	}
}

func nnSigmoidGrad[T nnFloat](y, dy, dx []T) {
	for i, v := range y {
		dx[i] = dy[i] * v * (1 - v)
	}
}

func nnTanhGrad[T nnFloat](y, dy, dx []T) {
	for i, v := range y {
		dx[i] = dy[i] * (1 - v*v)
	}
}

// ---- Softmax and cross-entropy ----

func nnSoftmaxKernel(log bool) func(c *kernel.Context) error {
	return func(c *kernel.Context) error {
		x := c.Input(0)
		if x.Rank() < 1 {
			return c.Errorf("logits must have rank >= 1, got shape %v", x.Shape())
		}
		cols := x.Shape()[x.Rank()-1]
		y := c.AllocUninit(0, x.DType(), x.Shape()...)
		switch x.DType() {
		case tensor.Float32:
			nnSoftmaxRows(x.Float32s(), y.Float32s(), cols, log)
		case tensor.Float64:
			nnSoftmaxRows(x.Float64s(), y.Float64s(), cols, log)
		default:
			return c.Errorf("unsupported dtype %v: want float32 or float64", x.DType())
		}
		return nil
	}
}

// nnRowMax returns the largest element of a non-empty row.
func nnRowMax[T nnFloat](row []T) T {
	m := row[0]
	for _, v := range row[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

// nnSoftmaxRows writes softmax (or log-softmax) of each row of x into y.
// Subtracting the row maximum keeps exp from overflowing.
func nnSoftmaxRows[T nnFloat](x, y []T, cols int, log bool) {
	if cols == 0 {
		return
	}
	kernel.ParallelFor(len(x)/cols, cols*nnExpCost, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
			m := nnRowMax(xr)
			var sum float64
			if log {
				for _, v := range xr {
					sum += math.Exp(float64(v - m))
				}
				lse := T(math.Log(sum))
				for i, v := range xr {
					yr[i] = v - m - lse
				}
				continue
			}
			for i, v := range xr {
				e := math.Exp(float64(v - m))
				yr[i] = T(e)
				sum += e
			}
			inv := T(1 / sum)
			for i := range yr {
				yr[i] *= inv
			}
		}
	})
}

func nnSoftmaxXent(c *kernel.Context) error {
	logits, labels := c.Input(0), c.Input(1)
	if logits.DType() != labels.DType() || logits.Rank() != 2 || !slices.Equal(logits.Shape(), labels.Shape()) {
		return c.Errorf("logits %v%v and labels %v%v must be [batch, classes] of one dtype and shape",
			logits.DType(), logits.Shape(), labels.DType(), labels.Shape())
	}
	n, cols := logits.Shape()[0], logits.Shape()[1]
	loss := c.AllocUninit(0, logits.DType(), n)
	bp := c.AllocUninit(1, logits.DType(), n, cols)
	switch logits.DType() {
	case tensor.Float32:
		nnXentRows(logits.Float32s(), labels.Float32s(), loss.Float32s(), bp.Float32s(), cols)
	case tensor.Float64:
		nnXentRows(logits.Float64s(), labels.Float64s(), loss.Float64s(), bp.Float64s(), cols)
	default:
		return c.Errorf("unsupported dtype %v: want float32 or float64", logits.DType())
	}
	return nil
}

// nnXentRows computes, per row, loss = sum(labels * (logsumexp(x) - x)) and
// backprop = softmax(x) - labels, in two passes over the row.
func nnXentRows[T nnFloat](x, labels, loss, bp []T, cols int) {
	if cols == 0 {
		return
	}
	kernel.ParallelFor(len(loss), cols*nnExpCost, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, lr, br := x[r*cols:(r+1)*cols], labels[r*cols:(r+1)*cols], bp[r*cols:(r+1)*cols]
			m := nnRowMax(xr)
			var sum float64
			for i, v := range xr {
				e := math.Exp(float64(v - m))
				br[i] = T(e)
				sum += e
			}
			logSum, inv := math.Log(sum), 1/sum
			var l float64
			for i, v := range xr {
				l += float64(lr[i]) * (logSum - float64(v-m))
				br[i] = T(float64(br[i])*inv) - lr[i]
			}
			loss[r] = T(l)
		}
	})
}

func nnSparseSoftmaxXent(c *kernel.Context) error {
	logits, labels := c.Input(0), c.Input(1)
	if logits.Rank() != 2 || labels.Rank() != 1 || labels.Shape()[0] != logits.Shape()[0] {
		return c.Errorf("logits %v must be [batch, classes] and labels %v [batch]", logits.Shape(), labels.Shape())
	}
	n, cols := logits.Shape()[0], logits.Shape()[1]
	var idx32 []int32
	var idx64 []int64
	switch labels.DType() {
	case tensor.Int32:
		idx32 = labels.Int32s()
		for i, l := range idx32 {
			if l < 0 || int(l) >= cols {
				return c.Errorf("label %d at row %d is out of range [0, %d)", l, i, cols)
			}
		}
	case tensor.Int64:
		idx64 = labels.Int64s()
		for i, l := range idx64 {
			if l < 0 || l >= int64(cols) {
				return c.Errorf("label %d at row %d is out of range [0, %d)", l, i, cols)
			}
		}
	default:
		return c.Errorf("labels must be int32 or int64, got %v", labels.DType())
	}
	loss := c.AllocUninit(0, logits.DType(), n)
	bp := c.AllocUninit(1, logits.DType(), n, cols)
	switch logits.DType() {
	case tensor.Float32:
		if cols > 0 {
			nnSparseXentF32(logits.Float32s(), idx32, idx64, loss.Float32s(), bp.Float32s(), cols)
		}
	case tensor.Float64:
		nnSparseXentRows(logits.Float64s(), idx32, idx64, loss.Float64s(), bp.Float64s(), cols)
	default:
		return c.Errorf("unsupported dtype %v: want float32 or float64", logits.DType())
	}
	return nil
}

// nnSparseXentRows is nnXentRows with one-hot labels given by index (from
// idx32 or, if that is nil, idx64); indices are already range-checked.
func nnSparseXentRows[T nnFloat](x []T, idx32 []int32, idx64 []int64, loss, bp []T, cols int) {
	if cols == 0 {
		return
	}
	if kernel.Serial(len(loss), cols*nnExpCost) {
		nnSparseXentRange(x, idx32, idx64, loss, bp, cols, 0, len(loss))
		return
	}
	kernel.ParallelFor(len(loss), cols*nnExpCost, func(lo, hi int) {
		nnSparseXentRange(x, idx32, idx64, loss, bp, cols, lo, hi)
	})
}

// nnLabel is row r's class index, from whichever of the int32 or int64
// label slices is set.
func nnLabel(idx32 []int32, idx64 []int64, r int) int {
	if idx32 != nil {
		return int(idx32[r])
	}
	return int(idx64[r])
}

func nnSparseXentRange[T nnFloat](x []T, idx32 []int32, idx64 []int64, loss, bp []T, cols, lo, hi int) {
	for r := lo; r < hi; r++ {
		xr, br := x[r*cols:(r+1)*cols], bp[r*cols:(r+1)*cols]
		label := nnLabel(idx32, idx64, r)
		m := nnRowMax(xr)
		var sum float64
		for i, v := range xr {
			e := math.Exp(float64(v - m))
			br[i] = T(e)
			sum += e
		}
		inv := 1 / sum
		for i := range br {
			br[i] = T(float64(br[i]) * inv)
		}
		br[label]--
		loss[r] = T(math.Log(sum) - float64(xr[label]-m))
	}
}

// nnSparseXentF32 is nnSparseXentRows for float32 with the exponentials
// taken in float32 (nnExp32, within 2 ulp), over the whole batch at once so
// that they vectorise however few the classes; sums, logarithms and the
// normalisation stay in float64. The batches of the reference models are
// too small to split across cores.
func nnSparseXentF32(x []float32, idx32 []int32, idx64 []int64, loss, bp []float32, cols int) {
	rows := len(loss)
	x, bp = x[:rows*cols], bp[:rows*cols]
	for r := range rows {
		xr, br := x[r*cols:(r+1)*cols], bp[r*cols:(r+1)*cols]
		m := nnRowMax(xr)
		for i, v := range xr {
			br[i] = v - m
		}
	}
	nnExpF32(bp, bp)
	for r := range rows {
		xr, br := x[r*cols:(r+1)*cols], bp[r*cols:(r+1)*cols]
		label := nnLabel(idx32, idx64, r)
		var sum float64
		for _, e := range br {
			sum += float64(e)
		}
		inv := 1 / sum
		for i, e := range br {
			br[i] = float32(float64(e) * inv)
		}
		br[label]--
		loss[r] = float32(math.Log(sum) - float64(xr[label]-nnRowMax(xr)))
	}
}

// ---- L2Loss ----

func nnL2Loss(c *kernel.Context) error {
	x := c.Input(0)
	y := c.Alloc(0, x.DType())
	switch x.DType() {
	case tensor.Float32:
		y.Float32s()[0] = float32(nnHalfSumSquares(x.Float32s()))
	case tensor.Float64:
		y.Float64s()[0] = nnHalfSumSquares(x.Float64s())
	default:
		return c.Errorf("unsupported dtype %v: want float32 or float64", x.DType())
	}
	return nil
}

// nnHalfSumSquares returns sum(x^2)/2, accumulated in float64 with four
// independent sums so the loop is not bound by the latency of one add chain.
func nnHalfSumSquares[T nnFloat](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a, b, c, d := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(x); i++ {
		v := float64(x[i])
		s0 += v * v
	}
	return (s0 + s1 + s2 + s3) / 2
}
