package cpu_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// TestGuardedWritesFindEveryNonFinite: under
// kernel.Policy.RefuseNonFiniteWrites, an Assign of a value with one NaN
// or infinity anywhere (each position of several lengths, around the
// scan's blocks) is refused naming the element, and a finite one, with
// the largest floats, denormals and -0, is taken; for float32 and float64.
func TestGuardedWritesFindEveryNonFinite(t *testing.T) {
	res := kernel.NewResources()
	if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: true}); err != nil {
		t.Fatal(err)
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
		for _, n := range []int{1, 2, 3, 7, 8, 9, 511, 513, 1023, 1025, 2050} {
			s := graph.NewScope()
			v := stateVar(s, dt.String()+"_"+itoa(n), dt, n)
			val := tensor.New(dt, n)
			node := s.AddNode("Assign", "", []graph.Output{v, stateConst(s, val)}, nil)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			k := stateKernel(t, node)
			finite := []float64{math.MaxFloat32, -math.MaxFloat32, 1e-45, math.Copysign(0, -1), 1}
			for i := range n {
				val.SetFloat64At(i, finite[i%len(finite)])
			}
			if _, err := stateRunNode(node, k, res); err != nil {
				t.Fatalf("%v[%d] of finite values: %v", dt, n, err)
			}
			for _, at := range []int{0, n / 2, n - 1} {
				for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
					old := val.Float64At(at)
					val.SetFloat64At(at, bad)
					_, err := stateRunNode(node, k, res)
					val.SetFloat64At(at, old)
					if !errors.Is(err, kernel.ErrNonFiniteWrite) || !strings.Contains(err.Error(), "element "+itoa(at)+";") {
						t.Errorf("%v[%d] with %v at %d: %v; want ErrNonFiniteWrite naming the element", dt, n, bad, at, err)
					}
				}
			}
		}
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// BenchmarkGuardedGradientDescent times ApplyGradientDescent on the
// reference MLP's largest variable (784x128) with and without the check
// of kernel.Policy.RefuseNonFiniteWrites.
func BenchmarkGuardedGradientDescent(b *testing.B) {
	const n = 784 * 128
	for _, guard := range []bool{false, true} {
		name := "guard=off"
		if guard {
			name = "guard=on"
		}
		b.Run(name, func(b *testing.B) {
			s := graph.NewScope()
			v := stateVar(s, "v", tensor.Float32, n)
			g := tensor.New(tensor.Float32, n)
			for i := range g.Float32s() {
				g.Float32s()[i] = float32(i%7) * 1e-3
			}
			node := s.AddNode("ApplyGradientDescent", "", []graph.Output{v, stateConst(s, tensor.Scalar(float32(0.01))), stateConst(s, g)}, nil)
			if err := s.Err(); err != nil {
				b.Fatal(err)
			}
			res := kernel.NewResources()
			if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: guard}); err != nil {
				b.Fatal(err)
			}
			vv, _ := res.Variable(v.Node.Name(), tensor.Float32, tensor.MakeShape(n))
			_ = vv.Assign(tensor.New(tensor.Float32, n))
			k := stateKernel(b, node)
			b.SetBytes(3 * 4 * n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := stateRunNode(node, k, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestGuardedGradientDescentOverflow: under the policy, an
// ApplyGradientDescent whose finite inputs overflow at one element
// (anywhere in variables of several lengths, around the vectorised
// check's blocks) is refused naming it, and the variable keeps its value;
// one that does not overflow updates it as without the policy.
func TestGuardedGradientDescentOverflow(t *testing.T) {
	res := kernel.NewResources()
	if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: true}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 15, 16, 17, 100, 4099, 70001} {
		s := graph.NewScope()
		v := stateVar(s, "gd_"+itoa(n), tensor.Float32, n)
		g := tensor.New(tensor.Float32, n)
		node := s.AddNode("ApplyGradientDescent", "", []graph.Output{v, stateConst(s, tensor.Scalar(float32(2))), stateConst(s, g)}, nil)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		vv, _ := res.Variable(v.Node.Name(), tensor.Float32, tensor.MakeShape(n))
		old := tensor.New(tensor.Float32, n)
		for i := range n {
			old.Float32s()[i] = float32(i%5) - 2
			g.Float32s()[i] = float32(i%3) - 1
		}
		_ = vv.Assign(old)
		k := stateKernel(t, node)
		for _, at := range []int{0, n / 2, n - 1} {
			keep := g.Float32s()[at]
			g.Float32s()[at] = -math.MaxFloat32
			_, err := stateRunNode(node, k, res)
			g.Float32s()[at] = keep
			if !errors.Is(err, kernel.ErrNonFiniteWrite) || !strings.Contains(err.Error(), "element "+itoa(at)+" +Inf") {
				t.Errorf("n %d, overflow at %d: %v; want ErrNonFiniteWrite naming the element", n, at, err)
			}
			got, _ := vv.Read()
			if !slices.Equal(got.Float32s(), old.Float32s()) {
				t.Fatalf("n %d: the variable changed after a refused update", n)
			}
		}
		if _, err := stateRunNode(node, k, res); err != nil {
			t.Fatalf("n %d: a finite update: %v", n, err)
		}
		got, _ := vv.Read()
		for i, x := range got.Float32s() {
			if want := old.Float32s()[i] - 2*g.Float32s()[i]; x != want {
				t.Fatalf("n %d: v[%d] = %v, want %v", n, i, x, want)
			}
		}
	}
}
