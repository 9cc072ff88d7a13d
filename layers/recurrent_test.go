package layers_test

import (
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

func TestRecurrentGradients(t *testing.T) {
	x := func(seed int64) []*tensor.Tensor { return []*tensor.Tensor{gradtest.Random(seed, 2, 3, 2)} }
	unknownBatch := []tensor.Shape{tensor.MakeShape(-1, 3, 2)}
	for _, c := range []gradtest.Case{
		{Name: "LSTM", Inputs: x(1), Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			return layers.LSTM{Units: 3, BiasInit: smallUniform}.Apply(s, x[0], true)
		}},
		{Name: "LSTMSequencesUnknownBatch", Inputs: x(2), Shapes: unknownBatch, Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			return layers.LSTM{Units: 2, ReturnSequences: true, NoUnitForgetBias: true, BiasInit: smallUniform}.Apply(s, x[0], true)
		}},
		{Name: "LSTMNoBiasOneStep", Inputs: []*tensor.Tensor{gradtest.Random(3, 2, 1, 3)}, Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			return layers.LSTM{Units: 2, NoBias: true}.Apply(s, x[0], true)
		}},
		{Name: "GRU", Inputs: x(4), Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			return layers.GRU{Units: 3, BiasInit: smallUniform}.Apply(s, x[0], true)
		}},
		{Name: "GRUResetAfterSequences", Inputs: x(5), Shapes: unknownBatch, Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			return layers.GRU{Units: 2, ResetAfter: true, ReturnSequences: true, BiasInit: smallUniform}.Apply(s, x[0], true)
		}},
		{Name: "StackedGRULSTM", Inputs: x(6), Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			return layers.Sequential{
				layers.GRU{Units: 2, ReturnSequences: true},
				layers.LSTM{Units: 2},
			}.Apply(s, x[0], true)
		}},
	} {
		c.Variables = true
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

// recurrentConst is an initializer holding v.
func recurrentConst(v *tensor.Tensor) ops.Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output { return ops.Const(s, v) }
}

// matRow returns row b of the product of x [.., in] (row b) and w [in, out].
func matRow(x []float64, w *tensor.Tensor) []float64 {
	in, out := w.Shape()[0], w.Shape()[1]
	y := make([]float64, out)
	for j := 0; j < out; j++ {
		for k := 0; k < in; k++ {
			y[j] += x[k] * w.Float64s()[k*out+j]
		}
	}
	return y
}

func sigmoid(v float64) float64 { return 1 / (1 + math.Exp(-v)) }

// TestLSTMReference compares the LSTM layer with the equations of Keras'
// LSTM written out in Go, on fixed weights, including the unit forget bias.
func TestLSTMReference(t *testing.T) {
	const batch, steps, in, u = 2, 4, 3, 2
	xv := gradtest.Random(10, batch, steps, in)
	kernel, rec, bias := gradtest.Random(11, in, 4*u), gradtest.Random(12, u, 4*u), gradtest.Random(13, 4*u)
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(-1, steps, in))
	lstm := layers.LSTM{Units: u, KernelInit: recurrentConst(kernel), RecurrentInit: recurrentConst(rec),
		BiasInit: recurrentConst(gradtest.Random(13, u)), ReturnSequences: true}
	// The bias initializer gives the i, c and o parts; f starts at one.
	lstm.BiasInit = func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		off := map[int]int{u: 0, 2 * u: 2 * u}[shape[0]]
		return ops.Const(s, tensor.MustFromSlice(bias.Float64s()[off:off+shape[0]], shape[0]))
	}
	y := lstm.Apply(s, x, true)
	got := run(t, s, map[graph.Output]*tensor.Tensor{x: xv}, []graph.Output{y})[0]
	if !got.StaticShape().Equal(tensor.MakeShape(batch, steps, u)) {
		t.Fatalf("output shape %v, want [%d %d %d]", got.Shape(), batch, steps, u)
	}
	b := bias.Clone()
	for j := u; j < 2*u; j++ {
		b.Float64s()[j] = 1
	}
	for n := 0; n < batch; n++ {
		h, c := make([]float64, u), make([]float64, u)
		for ts := 0; ts < steps; ts++ {
			xt := xv.Float64s()[(n*steps+ts)*in : (n*steps+ts+1)*in]
			zx, zh := matRow(xt, kernel), matRow(h, rec)
			for j := 0; j < u; j++ {
				z := func(gate int) float64 { return zx[gate*u+j] + zh[gate*u+j] + b.Float64s()[gate*u+j] }
				i, f, cand, o := sigmoid(z(0)), sigmoid(z(1)), math.Tanh(z(2)), sigmoid(z(3))
				c[j] = f*c[j] + i*cand
				h[j] = o * math.Tanh(c[j])
			}
			for j := 0; j < u; j++ {
				if g := got.Float64s()[(n*steps+ts)*u+j]; math.Abs(g-h[j]) > 1e-12 {
					t.Errorf("h[%d][t=%d][%d] = %v, want %v", n, ts, j, g, h[j])
				}
			}
		}
	}
}

// TestGRUReference compares the GRU layer, with the reset gate before and
// after the recurrent product, with Keras' equations written out in Go.
func TestGRUReference(t *testing.T) {
	const batch, steps, in, u = 2, 3, 2, 3
	xv := gradtest.Random(20, batch, steps, in)
	kernel, rec := gradtest.Random(21, in, 3*u), gradtest.Random(22, u, 3*u)
	for _, resetAfter := range []bool{false, true} {
		bias := gradtest.Random(23, 3*u)
		if resetAfter {
			bias = gradtest.Random(24, 2, 3*u)
		}
		s := graph.NewScope()
		x := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(-1, steps, in))
		y := layers.GRU{Units: u, ResetAfter: resetAfter, KernelInit: recurrentConst(kernel), RecurrentInit: recurrentConst(rec),
			BiasInit: recurrentConst(bias)}.Apply(s, x, true)
		got := run(t, s, map[graph.Output]*tensor.Tensor{x: xv}, []graph.Output{y})[0]
		if !got.StaticShape().Equal(tensor.MakeShape(batch, u)) {
			t.Fatalf("output shape %v, want [%d %d]", got.Shape(), batch, u)
		}
		bx, bh := bias.Float64s()[:3*u], make([]float64, 3*u)
		if resetAfter {
			bh = bias.Float64s()[3*u:]
		}
		for n := 0; n < batch; n++ {
			h := make([]float64, u)
			for ts := 0; ts < steps; ts++ {
				xt := xv.Float64s()[(n*steps+ts)*in : (n*steps+ts+1)*in]
				xw, hu := matRow(xt, kernel), matRow(h, rec)
				next := make([]float64, u)
				r := make([]float64, u)
				for j := 0; j < u; j++ {
					r[j] = sigmoid(xw[u+j] + bx[u+j] + hu[u+j] + bh[u+j])
				}
				// Without ResetAfter: (r⊙h)·U_h, the last u columns of rec.
				rh := make([]float64, u)
				for j := range rh {
					rh[j] = r[j] * h[j]
				}
				ruh := matRow(rh, rec)
				for j := 0; j < u; j++ {
					z := sigmoid(xw[j] + bx[j] + hu[j] + bh[j])
					cand := xw[2*u+j] + bx[2*u+j]
					if resetAfter {
						cand += r[j] * (hu[2*u+j] + bh[2*u+j])
					} else {
						cand += ruh[2*u+j]
					}
					next[j] = z*h[j] + (1-z)*math.Tanh(cand)
				}
				h = next
			}
			for j := 0; j < u; j++ {
				if g := got.Float64s()[n*u+j]; math.Abs(g-h[j]) > 1e-12 {
					t.Errorf("reset after %v: h[%d][%d] = %v, want %v", resetAfter, n, j, g, h[j])
				}
			}
		}
	}
}

func TestRecurrentNamesAndReuse(t *testing.T) {
	build := func(s *graph.Scope, x graph.Output) graph.Output {
		h := layers.LSTM{Units: 3, ReturnSequences: true}.Apply(s, x, true)
		h = layers.GRU{Units: 2, Name: "encoder"}.Apply(s, h, true)
		return layers.Dense{Units: 1}.Apply(s, h, true)
	}
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 5, 4))
	y := build(s, x)
	want := "lstm/kernel lstm/recurrent_kernel lstm/bias encoder/kernel encoder/recurrent_kernel encoder/bias dense/kernel dense/bias"
	if got := strings.Join(variableNames(s.Graph()), " "); got != want {
		t.Fatalf("variables %q, want %q", got, want)
	}
	shapes := map[string]tensor.Shape{
		"lstm/kernel": tensor.MakeShape(4, 12), "lstm/recurrent_kernel": tensor.MakeShape(3, 12), "lstm/bias": tensor.MakeShape(12),
		"encoder/kernel": tensor.MakeShape(3, 6), "encoder/recurrent_kernel": tensor.MakeShape(2, 6), "encoder/bias": tensor.MakeShape(6),
	}
	for name, sh := range shapes {
		if v := ops.LookupVariable(s.Graph(), name); v == nil || !v.Shape().Equal(sh) {
			t.Errorf("%s is %v, want shape %v", name, v, sh)
		}
	}
	// A second tower that reuses the variables adds none and computes the
	// same function.
	y2 := build(s.NameScope("tower_1").ReuseVariables(), x)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(variableNames(s.Graph()), " "); got != want {
		t.Fatalf("after reuse: variables %q, want %q", got, want)
	}
	xv := tensor.New(tensor.Float32, 3, 5, 4)
	for i := range xv.Float32s() {
		xv.Float32s()[i] = float32(i%7) / 7
	}
	out := run(t, s, map[graph.Output]*tensor.Tensor{x: xv}, []graph.Output{y, y2})
	if !tensor.Equal(out[0], out[1]) {
		t.Errorf("the reusing tower computes %v, the first %v", out[1], out[0])
	}
	// The forget gate's bias starts at one, the others at zero.
	bias := run(t, s, nil, []graph.Output{ops.LookupVariable(s.Graph(), "lstm/bias").Value()})[0]
	for j, v := range bias.Float32s() {
		if want := map[bool]float32{true: 1, false: 0}[j/3 == 1]; v != want {
			t.Errorf("lstm/bias[%d] = %v, want %v", j, v, want)
		}
	}
}

// TestOrthogonalInit checks that the default recurrent kernel has
// orthonormal rows (more columns than rows) or columns, scaled by the gain,
// the same for the same seed.
func TestOrthogonalInit(t *testing.T) {
	for _, c := range []struct {
		shape []int
		gain  float64
	}{{[]int{3, 12}, 1}, {[]int{6, 4}, 2}, {[]int{5, 5}, 1}, {[]int{2, 3, 4}, 1}} {
		s := graph.NewScope()
		a := layers.OrthogonalInit(c.gain, 9)(s, tensor.Float64, c.shape)
		b := layers.OrthogonalInit(c.gain, 9)(s, tensor.Float64, c.shape)
		out := run(t, s, nil, []graph.Output{a, b})
		if !tensor.Equal(out[0], out[1]) {
			t.Errorf("%v: two draws from one seed differ", c.shape)
		}
		rows := 1
		for _, d := range c.shape[:len(c.shape)-1] {
			rows *= d
		}
		cols := c.shape[len(c.shape)-1]
		w := out[0].Float64s()
		at := func(i, j int) float64 { return w[i*cols+j] }
		n, k := rows, cols // dot products of the k columns of length n
		if rows < cols {
			n, k = cols, rows
			at = func(i, j int) float64 { return w[j*cols+i] }
		}
		for p := 0; p < k; p++ {
			for q := 0; q < k; q++ {
				dot := 0.0
				for i := 0; i < n; i++ {
					dot += at(i, p) * at(i, q)
				}
				want := 0.0
				if p == q {
					want = c.gain * c.gain
				}
				if math.Abs(dot-want) > 1e-12 {
					t.Errorf("%v: vectors %d and %d have dot product %v, want %v", c.shape, p, q, dot, want)
				}
			}
		}
	}
}

func TestRecurrentBuildErrors(t *testing.T) {
	for _, c := range []struct {
		name, want string
		build      func(s *graph.Scope)
	}{
		{"matrix input", "want rank 3", func(s *graph.Scope) {
			layers.LSTM{Units: 2}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3)), true)
		}},
		{"rank 4 input", "want [batch, time, features]", func(s *graph.Scope) {
			layers.GRU{Units: 2}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3, 2, 2)), true)
		}},
		{"unknown time steps", "time steps known at build time", func(s *graph.Scope) {
			layers.LSTM{Units: 2}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, -1, 2)), true)
		}},
		{"no units", "Units 0", func(s *graph.Scope) {
			layers.GRU{}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3, 2)), true)
		}},
		{"integer input", "want float32 or float64", func(s *graph.Scope) {
			layers.LSTM{Units: 2}.Apply(s, ops.Placeholder(s, "x", tensor.Int32, tensor.MakeShape(-1, 3, 2)), true)
		}},
		{"wrong initial state", "1 initial state tensors for a cell with 2", func(s *graph.Scope) {
			x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3, 2))
			cell := layers.LSTM{Units: 2}.NewCell(s, tensor.Float32, 2)
			layers.Unroll(s, cell, x, []graph.Output{ops.Placeholder(s, "h", tensor.Float32, tensor.MakeShape(-1, 2))})
		}},
	} {
		s := graph.NewScope()
		c.build(s)
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestUnrollInitialState runs a GRU cell by hand from a given state: the
// final state of a sequence split in two, the second half started from the
// first half's final state, equals that of the whole sequence.
func TestUnrollInitialState(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(-1, 4, 2))
	cell := layers.GRU{Units: 3, BiasInit: smallUniform}.NewCell(s, tensor.Float64, 2)
	_, whole := layers.Unroll(s, cell, x, nil)
	halves := ops.Split(s, x, 1, 2)
	_, mid := layers.Unroll(s, cell, halves[0], nil)
	outs, end := layers.Unroll(s, cell, halves[1], mid)
	seq := layers.Stack(s, outs)
	out := run(t, s, map[graph.Output]*tensor.Tensor{x: gradtest.Random(30, 2, 4, 2)}, []graph.Output{whole[0], end[0], seq})
	for i := range out[0].Float64s() {
		if d := math.Abs(out[0].Float64s()[i] - out[1].Float64s()[i]); d > 1e-12 {
			t.Fatalf("final state %v from halves, %v whole", out[1], out[0])
		}
	}
	if !out[2].StaticShape().Equal(tensor.MakeShape(2, 2, 3)) {
		t.Errorf("stacked outputs have shape %v, want [2 2 3]", out[2].Shape())
	}
}
