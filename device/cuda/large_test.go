package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// largeCase is a kernel check on sizes that take many blocks, many
// threads per reduction and partial GEMM tiles, and on the integer and
// bool types, which the conformance suite's small float cases do not reach.
type largeCase struct {
	op    string
	attrs map[string]any
	ins   []*tensor.Tensor
	tol   float64
}

func largeCases() []largeCase {
	r := rand.New(rand.NewPCG(3, 4))
	f := func(shape ...int) *tensor.Tensor {
		t := tensor.New(tensor.Float32, shape...)
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(r.NormFloat64())
		}
		return t
	}
	ints := func(dt tensor.DType, hi int, shape ...int) *tensor.Tensor {
		t := tensor.New(dt, shape...)
		for i := range t.NumElements() {
			t.SetFloat64At(i, float64(r.IntN(2*hi)-hi))
		}
		return t
	}
	labels := func(n, classes int) *tensor.Tensor {
		t := tensor.New(tensor.Int64, n)
		for i := range t.Int64s() {
			t.Int64s()[i] = int64(r.IntN(classes))
		}
		return t
	}
	shape := func(v ...int32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	conv := func(padding string, stride int) map[string]any {
		return map[string]any{"padding": padding, "strides": []int{stride, stride}}
	}
	pool := func(k, s int) map[string]any {
		return map[string]any{"ksize": []int{k, k}, "strides": []int{s, s}, "padding": "SAME"}
	}
	x := f(3, 17, 19, 8)
	return []largeCase{
		{op: "Add", ins: []*tensor.Tensor{f(300, 257), f(257)}},
		{op: "Mul", ins: []*tensor.Tensor{f(7, 1, 33), f(5, 33)}},
		{op: "Sub", ins: []*tensor.Tensor{ints(tensor.Int32, 1000, 40, 50), ints(tensor.Int32, 1000, 50)}},
		{op: "Add", ins: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 3, 1, 5), ints(tensor.Int64, 1<<40, 4, 1)}},
		{op: "GreaterEqual", ins: []*tensor.Tensor{ints(tensor.Int32, 3, 600), ints(tensor.Int32, 3, 600)}},
		// Long float sums: the CPU's float32 accumulation is off the exact
		// sum (the device's, in double) by more than 1e-5.
		{op: "Sum", attrs: map[string]any{"axis": []int{0}}, ins: []*tensor.Tensor{f(1000, 300)}, tol: 1e-4},
		{op: "Sum", ins: []*tensor.Tensor{f(70000)}, tol: 1e-4},
		{op: "Sum", attrs: map[string]any{"axis": []int{1}}, ins: []*tensor.Tensor{ints(tensor.Int64, 1000, 30, 700)}},
		{op: "Mean", attrs: map[string]any{"axis": []int{0, 2}, "keep_dims": true}, ins: []*tensor.Tensor{f(33, 513, 3)}, tol: 1e-4},
		{op: "Mean", attrs: map[string]any{"axis": []int{1}}, ins: []*tensor.Tensor{ints(tensor.Int32, 100, 9, 301)}},
		{op: "BiasAddGrad", ins: []*tensor.Tensor{f(2000, 37)}, tol: 1e-4},
		{op: "Sum", attrs: map[string]any{"axis": []int{1}}, ins: []*tensor.Tensor{f(5000, 3)}},
		{op: "Mean", attrs: map[string]any{"axis": []int{0}}, ins: []*tensor.Tensor{ints(tensor.Int64, 1000, 64, 300)}},
		{op: "BiasAdd", ins: []*tensor.Tensor{f(2000, 37), f(37)}},
		{op: "SumToShape", ins: []*tensor.Tensor{f(64, 30, 20), shape(30, 1)}},
		{op: "BroadcastTo", ins: []*tensor.Tensor{f(30, 1), shape(64, 30, 20)}},
		{op: "ArgMax", attrs: map[string]any{"axis": 1}, ins: []*tensor.Tensor{f(300, 1000)}},
		{op: "ArgMax", attrs: map[string]any{"axis": 0, "output_type": tensor.Int32}, ins: []*tensor.Tensor{ints(tensor.Int32, 50, 700, 30)}},
		{op: "Cast", attrs: map[string]any{"dtype": tensor.Bool}, ins: []*tensor.Tensor{ints(tensor.Int32, 2, 1000)}},
		{op: "Cast", attrs: map[string]any{"dtype": tensor.Int64}, ins: []*tensor.Tensor{f(1000)}},
		{op: "Relu", ins: []*tensor.Tensor{f(100000)}},
		{op: "MatMul", ins: []*tensor.Tensor{f(130, 70), f(70, 90)}},
		{op: "MatMul", attrs: map[string]any{"transpose_a": true}, ins: []*tensor.Tensor{f(70, 130), f(70, 90)}},
		{op: "MatMul", attrs: map[string]any{"transpose_a": true, "transpose_b": true}, ins: []*tensor.Tensor{f(33, 17), f(45, 33)}},
		{op: "MatMul", attrs: map[string]any{"transpose_b": true}, ins: []*tensor.Tensor{f(3, 40, 50), f(3, 20, 50)}},
		{op: "Conv2D", attrs: conv("SAME", 1), ins: []*tensor.Tensor{x, f(5, 5, 8, 6)}},
		{op: "Conv2D", attrs: conv("VALID", 2), ins: []*tensor.Tensor{x, f(3, 3, 8, 5)}},
		{op: "Conv2DBackpropInput", attrs: conv("SAME", 2), ins: []*tensor.Tensor{shape(3, 17, 19, 8), f(3, 3, 8, 6), f(3, 9, 10, 6)}, tol: 1e-4},
		{op: "Conv2DBackpropFilter", attrs: conv("SAME", 1), ins: []*tensor.Tensor{x, shape(5, 5, 8, 6), f(3, 17, 19, 6)}, tol: 1e-4},
		{op: "MaxPool", attrs: pool(3, 2), ins: []*tensor.Tensor{x}},
		{op: "MaxPoolGrad", attrs: pool(3, 2), ins: []*tensor.Tensor{x, mustMaxPool(x, pool(3, 2)), f(3, 9, 10, 8)}, tol: 1e-4},
		{op: "SparseSoftmaxCrossEntropyWithLogits", ins: []*tensor.Tensor{f(300, 1000), labels(300, 1000)}},
	}
}

// mustMaxPool pools x on the CPU, for MaxPoolGrad's orig_output.
func mustMaxPool(x *tensor.Tensor, attrs map[string]any) *tensor.Tensor {
	out, err := onCPU(largeCase{op: "MaxPool", attrs: attrs, ins: []*tensor.Tensor{x}})
	if err != nil {
		panic(err)
	}
	return out[0]
}

func buildNode(c largeCase) (*graph.Node, error) {
	s := graph.NewScope()
	host := device.HostInputs(c.op)
	var ins []graph.Output
	for i, in := range c.ins {
		if slices.Contains(host, i) {
			ins = append(ins, s.Out("Const", fmt.Sprintf("c%d", i), nil, map[string]any{"value": in}))
			continue
		}
		ins = append(ins, s.Out("Placeholder", fmt.Sprintf("x%d", i), nil,
			map[string]any{"dtype": in.DType(), "shape": tensor.MakeShape(in.Shape()...)}))
	}
	n := s.AddNode(c.op, "node", ins, c.attrs)
	return n, s.Err()
}

func onCPU(c largeCase) ([]*tensor.Tensor, error) {
	n, err := buildNode(c)
	if err != nil {
		return nil, err
	}
	f, err := kernel.Lookup(c.op, kernel.CPU)
	if err != nil {
		return nil, err
	}
	k, err := f(n)
	if err != nil {
		return nil, err
	}
	kc := &kernel.Context{Ctx: context.Background(), Node: n, Inputs: c.ins, Outputs: make([]*tensor.Tensor, n.NumOutputs())}
	if err := k.Compute(kc); err != nil {
		return nil, err
	}
	return kc.Outputs, nil
}

func onDevice(d device.Device, c largeCase) (_ []*tensor.Tensor, err error) {
	n, err := buildNode(c)
	if err != nil {
		return nil, err
	}
	def, err := device.LookupKernel(Name, c.op)
	if err != nil {
		return nil, err
	}
	k, err := def.Factory(n)
	if err != nil {
		return nil, err
	}
	a := d.Allocator()
	ins := make([]*device.Tensor, len(c.ins))
	defer device.FreeAll(a, ins)
	for i, in := range c.ins {
		if def.IsHostInput(i) {
			ins[i] = &device.Tensor{DType: in.DType(), Shape: in.Shape(), Host: in}
		} else if ins[i], err = device.Upload(d, in); err != nil {
			return nil, err
		}
	}
	kc := &device.Context{Ctx: context.Background(), Node: n, Device: d, Stream: d.Stream(), Inputs: ins}
	if err := device.Launch(kc, def, k); err != nil {
		return nil, err
	}
	defer device.FreeAll(a, kc.Outputs)
	out := make([]*tensor.Tensor, len(kc.Outputs))
	for i, o := range kc.Outputs {
		if out[i], err = device.Download(d, o); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return out, d.Stream().Synchronize(ctx)
}

// runLarge checks every large case on d against the CPU.
func runLarge(t *testing.T, d device.Device) {
	for _, c := range largeCases() {
		t.Run(c.op, func(t *testing.T) {
			want, err := onCPU(c)
			if err != nil {
				t.Fatalf("CPU: %v", err)
			}
			got, err := onDevice(d, c)
			if err != nil {
				t.Fatalf("%s: %v", d.Info().Name, err)
			}
			tol := c.tol
			if tol == 0 {
				tol = 1e-5
			}
			for i := range want {
				if got[i].DType() != want[i].DType() || !slices.Equal(got[i].Shape(), want[i].Shape()) {
					t.Fatalf("output %d is %v%v, want %v%v", i, got[i].DType(), got[i].Shape(), want[i].DType(), want[i].Shape())
				}
				for j := range want[i].NumElements() {
					g, w := got[i].Float64At(j), want[i].Float64At(j)
					if math.Abs(g-w)/max(math.Abs(w), 1) > tol || math.IsNaN(g) != math.IsNaN(w) {
						t.Fatalf("output %d element %d is %g, want %g", i, j, g, w)
					}
				}
			}
		})
	}
}

// TestGPULarge runs the large cases on the GPU.
func TestGPULarge(t *testing.T) {
	p, _ := device.Lookup(Name)
	if _, err := p.Probe(); err != nil {
		t.Skipf("no CUDA GPU here: %v", err)
	}
	devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	runLarge(t, devs[0])
}
