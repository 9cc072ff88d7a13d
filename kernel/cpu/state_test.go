package cpu_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/tensor"
)

// stateRunNode computes node n once with its kernel: Const inputs are read
// from their attribute, ref inputs are the variables of res named after
// their Variable node.
func stateRunNode(n *graph.Node, k kernel.Kernel, res *kernel.Resources) ([]*tensor.Tensor, error) {
	c := &kernel.Context{
		Ctx: context.Background(), Node: n, Resources: res,
		Inputs:  make([]*tensor.Tensor, n.NumInputs()),
		Refs:    make([]*kernel.Variable, n.NumInputs()),
		Outputs: make([]*tensor.Tensor, n.NumOutputs()),
	}
	for i, in := range n.Inputs() {
		if n.IsRefInput(i) {
			v, err := res.Variable(in.Node.Name(), in.DType(), in.Shape())
			if err != nil {
				return nil, err
			}
			c.Refs[i] = v
			continue
		}
		c.Inputs[i] = in.Node.AttrTensor("value")
	}
	err := k.Compute(c)
	return c.Outputs, err
}

// stateKernel builds the kernel of n.
func stateKernel(t testing.TB, n *graph.Node) kernel.Kernel {
	t.Helper()
	f, err := kernel.Lookup(n.Op(), kernel.CPU)
	if err != nil {
		t.Fatal(err)
	}
	k, err := f(n)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func stateConst(s *graph.Scope, t *tensor.Tensor) graph.Output {
	return s.Out("Const", "c", nil, map[string]any{"value": t})
}

func stateVar(s *graph.Scope, name string, dt tensor.DType, dims ...int) graph.Output {
	return s.Out("Variable", name, nil, map[string]any{"dtype": dt, "shape": tensor.MakeShape(dims...)})
}

// stateTensor converts float64 values to a tensor of dtype dt.
func stateTensor(dt tensor.DType, vals []float64, dims ...int) *tensor.Tensor {
	t := tensor.New(dt, dims...)
	for i, v := range vals {
		t.SetFloat64At(i, v)
	}
	return t
}

func stateValues(t *tensor.Tensor) []float64 {
	out := make([]float64, t.NumElements())
	for i := range out {
		out[i] = t.Float64At(i)
	}
	return out
}

func stateClose(a, b []float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol*(1+math.Abs(b[i])) {
			return false
		}
	}
	return true
}

// stateApplyCase is one optimizer update: the variable and its slots
// (initial values), the scalar hyper-parameters in input order, the gradient,
// and a reference implementation of one step written from TensorFlow's
// formulas, element by element, in float64.
type stateApplyCase struct {
	op      string
	attrs   map[string]any
	slots   int
	scalars []float64 // in input order, the gradient excluded
	gradIdx int       // input index of the gradient
	step    func(v [][]float64, g []float64, sc []float64, i int)
}

func TestApplyKernelsMatchTensorFlowFormulas(t *testing.T) {
	sqrt := math.Sqrt
	cases := []stateApplyCase{
		{op: "ApplyGradientDescent", scalars: []float64{0.1}, gradIdx: 2,
			step: func(v [][]float64, g, sc []float64, i int) { v[0][i] -= sc[0] * g[i] }},
		{op: "ApplyMomentum", slots: 1, scalars: []float64{0.1, 0.9}, gradIdx: 3,
			step: func(v [][]float64, g, sc []float64, i int) {
				lr, mom := sc[0], sc[1]
				v[1][i] = v[1][i]*mom + g[i]
				v[0][i] -= lr * v[1][i]
			}},
		{op: "ApplyMomentum", attrs: map[string]any{"use_nesterov": true}, slots: 1, scalars: []float64{0.1, 0.9}, gradIdx: 3,
			step: func(v [][]float64, g, sc []float64, i int) {
				lr, mom := sc[0], sc[1]
				v[1][i] = v[1][i]*mom + g[i]
				v[0][i] -= g[i]*lr + v[1][i]*mom*lr
			}},
		{op: "ApplyAdagrad", slots: 1, scalars: []float64{0.1}, gradIdx: 3,
			step: func(v [][]float64, g, sc []float64, i int) {
				v[1][i] += g[i] * g[i]
				v[0][i] -= sc[0] * g[i] / sqrt(v[1][i])
			}},
		{op: "ApplyRMSProp", slots: 2, scalars: []float64{0.01, 0.9, 0.5, 1e-6}, gradIdx: 7,
			step: func(v [][]float64, g, sc []float64, i int) {
				lr, rho, mom, eps := sc[0], sc[1], sc[2], sc[3]
				v[1][i] = rho*v[1][i] + (1-rho)*g[i]*g[i]
				v[2][i] = mom*v[2][i] + lr*g[i]/sqrt(v[1][i]+eps)
				v[0][i] -= v[2][i]
			}},
		{op: "ApplyAdam", slots: 2, scalars: []float64{0.9, 0.999, 0.01, 0.9, 0.999, 1e-8}, gradIdx: 9,
			step: func(v [][]float64, g, sc []float64, i int) {
				b1p, b2p, lr, b1, b2, eps := sc[0], sc[1], sc[2], sc[3], sc[4], sc[5]
				lrT := lr * sqrt(1-b2p) / (1 - b1p)
				v[1][i] = b1*v[1][i] + (1-b1)*g[i]
				v[2][i] = b2*v[2][i] + (1-b2)*g[i]*g[i]
				v[0][i] -= lrT * v[1][i] / (sqrt(v[2][i]) + eps)
			}},
	}
	init := [][]float64{{1, -2, 3, 0.5, 0, -1}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {0.01, 0.02, 0.03, 0.04, 0.05, 0.06}}
	grad := []float64{0.5, -1, 2, 0, 0.25, -0.75}
	for _, tc := range cases {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			for _, shared := range []bool{false, true} {
				name := tc.op + "/" + dt.String()
				if tc.attrs != nil {
					name += "/nesterov"
				}
				if shared {
					// Readers share every ref during the update: the
					// variables move (copy-on-write) and the readers' values
					// stay as they were.
					name += "/shared"
				}
				t.Run(name, func(t *testing.T) {
					s := graph.NewScope()
					var inputs []graph.Output
					for j := 0; j <= tc.slots; j++ {
						inputs = append(inputs, stateVar(s, "v", dt, 2, 3))
					}
					sc := tc.scalars
					// Scalars fill the positions between the refs and the end,
					// except the gradient's.
					total := tc.slots + 1 + len(sc) + 1
					k := 0
					for i := tc.slots + 1; i < total; i++ {
						if i == tc.gradIdx {
							inputs = append(inputs, stateConst(s, stateTensor(dt, grad, 2, 3)))
							continue
						}
						inputs = append(inputs, stateConst(s, stateTensor(dt, []float64{sc[k]})))
						k++
					}
					n := s.AddNode(tc.op, "", inputs, tc.attrs)
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					if n.NumOutputs() != 0 {
						t.Fatalf("%s has %d outputs, want 0", tc.op, n.NumOutputs())
					}
					res := kernel.NewResources()
					want := make([][]float64, tc.slots+1)
					for j := range want {
						want[j] = append([]float64(nil), init[j]...)
						v, _ := res.Variable(inputs[j].Node.Name(), dt, tensor.MakeShape(2, 3))
						if err := v.Assign(stateTensor(dt, init[j], 2, 3)); err != nil {
							t.Fatal(err)
						}
					}
					k2 := stateKernel(t, n)
					for step := 0; step < 2; step++ {
						var held []*tensor.Tensor
						var before [][]float64
						var leases []kernel.Lease
						for j := 0; shared && j <= tc.slots; j++ {
							v, _ := res.Lookup(inputs[j].Node.Name())
							h, l, err := v.Share()
							if err != nil {
								t.Fatal(err)
							}
							held, before, leases = append(held, h), append(before, stateValues(h)), append(leases, l)
						}
						if _, err := stateRunNode(n, k2, res); err != nil {
							t.Fatal(err)
						}
						for j, h := range held {
							if !slices.Equal(stateValues(h), before[j]) {
								t.Fatalf("step %d: ref %d changed under a reader: %v, was %v", step, j, stateValues(h), before[j])
							}
							leases[j].Release()
						}
						for i := range grad {
							tc.step(want, grad, sc, i)
						}
					}
					tol := 1e-12
					if dt == tensor.Float32 {
						tol = 2e-6
					}
					for j := range want {
						v, _ := res.Lookup(inputs[j].Node.Name())
						got, err := v.Read()
						if err != nil {
							t.Fatal(err)
						}
						if !stateClose(stateValues(got), want[j], tol) {
							t.Errorf("ref %d after 2 steps = %v, want %v", j, stateValues(got), want[j])
						}
					}
				})
			}
		}
	}
}

func TestApplyGradientDescentHandComputed(t *testing.T) {
	s := graph.NewScope()
	v := stateVar(s, "w", tensor.Float32, 2)
	n := s.AddNode("ApplyGradientDescent", "", []graph.Output{v,
		stateConst(s, tensor.Scalar(float32(0.5))), stateConst(s, tensor.MustFromSlice([]float32{2, -4}, 2))}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	w, _ := res.Variable("w", tensor.Float32, tensor.MakeShape(2))
	_ = w.Assign(tensor.MustFromSlice([]float32{1, 1}, 2))
	k := stateKernel(t, n)
	for range 2 {
		if _, err := stateRunNode(n, k, res); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := w.Read()
	if want := []float32{-1, 5}; got.Float32s()[0] != want[0] || got.Float32s()[1] != want[1] {
		t.Errorf("w = %v, want %v", got, want)
	}
}

func TestApplyErrors(t *testing.T) {
	s := graph.NewScope()
	v := stateVar(s, "w", tensor.Float32, 2)
	lr := stateConst(s, tensor.Scalar(float32(0.5)))
	gd := s.AddNode("ApplyGradientDescent", "", []graph.Output{v, lr, stateConst(s, tensor.New(tensor.Float32, 2))}, nil)
	same := s.AddNode("ApplyMomentum", "", []graph.Output{v, v, lr, stateConst(s, tensor.New(tensor.Float32, 2)), lr}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	_, err := stateRunNode(gd, stateKernel(t, gd), res)
	if !errors.Is(err, kernel.ErrUninitialized) {
		t.Errorf("update of an uninitialized variable: got %v, want ErrUninitialized", err)
	}
	w, _ := res.Variable("w", tensor.Float32, tensor.MakeShape(2))
	_ = w.Assign(tensor.New(tensor.Float32, 2))
	if _, err := stateRunNode(same, stateKernel(t, same), res); err == nil || !strings.Contains(err.Error(), "passed twice") {
		t.Errorf("same variable twice: got %v", err)
	}
}

func TestAssignKernels(t *testing.T) {
	cases := []struct {
		op    string
		dt    tensor.DType
		init  []float64
		value []float64
		want  []float64
	}{
		{"Assign", tensor.Float32, nil, []float64{1, 2, 3}, []float64{1, 2, 3}},
		{"AssignAdd", tensor.Float32, []float64{1, 1, 1}, []float64{1, 2, 3}, []float64{2, 3, 4}},
		{"AssignSub", tensor.Float64, []float64{1, 1, 1}, []float64{1, 2, 3}, []float64{0, -1, -2}},
		{"AssignAdd", tensor.Int64, []float64{5, 0, 0}, []float64{1, 2, 3}, []float64{6, 2, 3}},
		{"AssignSub", tensor.Int32, []float64{5, 0, 0}, []float64{1, 2, 3}, []float64{4, -2, -3}},
	}
	for _, tc := range cases {
		t.Run(tc.op+"/"+tc.dt.String(), func(t *testing.T) {
			s := graph.NewScope()
			v := stateVar(s, "v", tc.dt, 3)
			n := s.AddNode(tc.op, "", []graph.Output{v, stateConst(s, stateTensor(tc.dt, tc.value, 3))}, nil)
			isInit := s.AddNode("IsVariableInitialized", "", []graph.Output{v}, nil)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			res := kernel.NewResources()
			vv, _ := res.Variable("v", tc.dt, tensor.MakeShape(3))
			if tc.init != nil {
				_ = vv.Assign(stateTensor(tc.dt, tc.init, 3))
			}
			out, err := stateRunNode(isInit, stateKernel(t, isInit), res)
			if err != nil || out[0].Bools()[0] != (tc.init != nil) {
				t.Fatalf("IsVariableInitialized = %v, %v; want %v", out[0], err, tc.init != nil)
			}
			out, err = stateRunNode(n, stateKernel(t, n), res)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := vv.Read()
			if !stateClose(stateValues(got), tc.want, 0) || !stateClose(stateValues(out[0]), tc.want, 0) {
				t.Errorf("variable = %v, output = %v; want %v", got, out[0], tc.want)
			}
			// The output must not alias the variable.
			out[0].SetFloat64At(0, 100)
			if got, _ := vv.Read(); got.Float64At(0) == 100 {
				t.Error("the output aliases the variable's storage")
			}
			out, err = stateRunNode(isInit, stateKernel(t, isInit), res)
			if err != nil || !out[0].Bools()[0] {
				t.Errorf("IsVariableInitialized after %s = %v, %v; want true", tc.op, out[0], err)
			}
		})
	}
}

func TestAssignAddUninitialized(t *testing.T) {
	s := graph.NewScope()
	v := stateVar(s, "v", tensor.Float32, 1)
	n := s.AddNode("AssignAdd", "", []graph.Output{v, stateConst(s, tensor.MustFromSlice([]float32{1}, 1))}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	_, err := stateRunNode(n, stateKernel(t, n), kernel.NewResources())
	if !errors.Is(err, kernel.ErrUninitialized) || !strings.Contains(err.Error(), "AssignAdd") {
		t.Errorf("got %v, want ErrUninitialized naming the node", err)
	}
}

func TestAssignRejectsWrongShapeAtRunTime(t *testing.T) {
	// The value's static shape is unknown, so only the kernel can check it.
	s := graph.NewScope()
	v := stateVar(s, "v", tensor.Float32, 2)
	p := s.Out("Placeholder", "p", nil, map[string]any{"dtype": tensor.Float32})
	n := s.AddNode("Assign", "", []graph.Output{v, p}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	vv, _ := res.Variable("v", tensor.Float32, tensor.MakeShape(2))
	c := &kernel.Context{Ctx: context.Background(), Node: n, Resources: res,
		Inputs: []*tensor.Tensor{nil, tensor.New(tensor.Float32, 3)}, Refs: []*kernel.Variable{vv, nil},
		Outputs: make([]*tensor.Tensor, 1)}
	err := stateKernel(t, n).Compute(c)
	if err == nil || !strings.Contains(err.Error(), "[3]") || !strings.Contains(err.Error(), "[2]") {
		t.Errorf("got %v, want an error naming both shapes", err)
	}
}

// Large variables are updated in parallel chunks; concurrent steps on one
// variable are serialised by its lock, so no update is lost.
func TestApplyLargeAndConcurrent(t *testing.T) {
	const n, workers, steps = 100_000, 4, 25
	s := graph.NewScope()
	v := stateVar(s, "w", tensor.Float32, n)
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(i%7) - 3
	}
	node := s.AddNode("ApplyGradientDescent", "", []graph.Output{v,
		stateConst(s, tensor.Scalar(float32(0.5))), stateConst(s, tensor.MustFromSlice(g, n))}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	w, _ := res.Variable("w", tensor.Float32, tensor.MakeShape(n))
	_ = w.Assign(tensor.New(tensor.Float32, n))
	k := stateKernel(t, node)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for range steps {
				if _, err := stateRunNode(node, k, res); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, _ := w.Read()
	for i, x := range got.Float32s() {
		if want := -0.5 * g[i] * workers * steps; x != want {
			t.Fatalf("w[%d] = %v, want %v", i, x, want)
		}
	}
}

func BenchmarkApplyAdam(b *testing.B) {
	const n = 1 << 20
	s := graph.NewScope()
	var in []graph.Output
	for range 3 {
		in = append(in, stateVar(s, "v", tensor.Float32, n))
	}
	for _, x := range []float32{0.5, 0.25, 0.001, 0.9, 0.999, 1e-8} {
		in = append(in, stateConst(s, tensor.Scalar(x)))
	}
	in = append(in, stateConst(s, tensor.New(tensor.Float32, n)))
	node := s.AddNode("ApplyAdam", "", in, nil)
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	res := kernel.NewResources()
	for _, o := range in[:3] {
		v, _ := res.Variable(o.Node.Name(), tensor.Float32, tensor.MakeShape(n))
		_ = v.Assign(tensor.New(tensor.Float32, n))
	}
	k := stateKernel(b, node)
	b.SetBytes(4 * n * 4)
	for b.Loop() {
		if _, err := stateRunNode(node, k, res); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRandomNormal(b *testing.B) {
	n := stateRandomNode(b, "RandomNormal", tensor.Float32, 1, 1<<20)
	k := stateKernel(b, n)
	b.SetBytes(4 << 20)
	for b.Loop() {
		if _, err := stateRunNode(n, k, kernel.NewResources()); err != nil {
			b.Fatal(err)
		}
	}
}
