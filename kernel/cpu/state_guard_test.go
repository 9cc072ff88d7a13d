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

// BenchmarkGuardedUpdate times ApplyGradientDescent and ApplyAdam on the
// reference MLP's largest variable (784x128) with and without the check of
// kernel.Policy.RefuseNonFiniteWrites.
func BenchmarkGuardedUpdate(b *testing.B) {
	const n = 784 * 128
	for _, op := range []string{"ApplyGradientDescent", "ApplyAdam"} {
		for _, guard := range []bool{false, true} {
			name := op + "/guard=off"
			if guard {
				name = op + "/guard=on"
			}
			b.Run(name, func(b *testing.B) {
				s := graph.NewScope()
				g := tensor.New(tensor.Float32, n)
				for i := range g.Float32s() {
					g.Float32s()[i] = float32(i%7) * 1e-3
				}
				var in []graph.Output
				if op == "ApplyGradientDescent" {
					in = []graph.Output{stateVar(s, "v", tensor.Float32, n), stateConst(s, tensor.Scalar(float32(0.01))), stateConst(s, g)}
				} else {
					for _, name := range []string{"v", "m", "vv"} {
						in = append(in, stateVar(s, name, tensor.Float32, n))
					}
					for _, x := range []float32{0.5, 0.25, 0.001, 0.9, 0.999, 1e-8} {
						in = append(in, stateConst(s, tensor.Scalar(x)))
					}
					in = append(in, stateConst(s, g))
				}
				node := s.AddNode(op, "", in, nil)
				if err := s.Err(); err != nil {
					b.Fatal(err)
				}
				res := kernel.NewResources()
				if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: guard}); err != nil {
					b.Fatal(err)
				}
				for i, o := range in {
					if node.IsRefInput(i) {
						r, _ := res.Variable(o.Node.Name(), tensor.Float32, tensor.MakeShape(n))
						_ = r.Assign(tensor.New(tensor.Float32, n))
					}
				}
				k := stateKernel(b, node)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := stateRunNode(node, k, res); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
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

// TestGuardedUpdateOfASharedVariable: a refused update of a variable whose
// value a reader shares (so that the update would move it to another
// buffer) leaves the variable, its slots and the reader's tensor with
// their values; for gradient descent (a non-finite gradient) and Adam
// (zeros with no epsilon, 0/0 from finite inputs).
func TestGuardedUpdateOfASharedVariable(t *testing.T) {
	const n = 100
	for _, op := range []string{"ApplyGradientDescent", "ApplyAdam"} {
		res := kernel.NewResources()
		if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: true}); err != nil {
			t.Fatal(err)
		}
		s := graph.NewScope()
		v := stateVar(s, "v", tensor.Float32, n)
		g := tensor.New(tensor.Float32, n)
		var in []graph.Output
		switch op {
		case "ApplyGradientDescent":
			g.Float32s()[n-1] = float32(math.NaN())
			in = []graph.Output{v, stateConst(s, tensor.Scalar(float32(0.5))), stateConst(s, g)}
		default:
			in = []graph.Output{v, stateVar(s, "m", tensor.Float32, n), stateVar(s, "vv", tensor.Float32, n)}
			for _, x := range []float32{0.9, 0.999, 0.1, 0.9, 0.999, 0} {
				in = append(in, stateConst(s, tensor.Scalar(x)))
			}
			in = append(in, stateConst(s, g))
		}
		node := s.AddNode(op, "", in, nil)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		old := tensor.New(tensor.Float32, n)
		for i := range n {
			old.Float32s()[i] = float32(i)
		}
		for i, o := range in {
			if !node.IsRefInput(i) {
				continue
			}
			r, _ := res.Variable(o.Node.Name(), tensor.Float32, tensor.MakeShape(n))
			if i == 0 {
				_ = r.Assign(old)
			} else {
				_ = r.Assign(tensor.New(tensor.Float32, n))
			}
		}
		vv, _ := res.Variable(v.Node.Name(), tensor.Float32, tensor.MakeShape(n))
		shared, lease, err := vv.Share()
		if err != nil {
			t.Fatal(err)
		}
		_, err = stateRunNode(node, stateKernel(t, node), res)
		if !errors.Is(err, kernel.ErrNonFiniteWrite) {
			t.Errorf("%s: %v; want ErrNonFiniteWrite", op, err)
		}
		got, _ := vv.Read()
		if !slices.Equal(got.Float32s(), old.Float32s()) || !slices.Equal(shared.Float32s(), old.Float32s()) {
			t.Errorf("%s: the variable %v and the reader's value %v after a refused update; want %v", op, got.Float32s()[:4], shared.Float32s()[:4], old.Float32s()[:4])
		}
		lease.Release()
		for i := 1; i < len(in) && node.IsRefInput(i); i++ {
			r, _ := res.Variable(in[i].Node.Name(), tensor.Float32, tensor.MakeShape(n))
			if got, _ := r.Read(); slices.ContainsFunc(got.Float32s(), func(x float32) bool { return x != 0 }) {
				t.Errorf("%s: slot %s changed after a refused update", op, in[i].Node.Name())
			}
		}
	}
}

// TestGuardedAdamOverflow: under the policy, an ApplyAdam whose finite
// gradient overflows its second moment at one element (anywhere in
// variables of several lengths) is refused naming the slot and the
// element, leaving the variable and its slots as they were; a finite
// update updates them as without the policy.
func TestGuardedAdamOverflow(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 100, 70001} {
		run := func(guard bool, g *tensor.Tensor) ([]*kernel.Variable, error) {
			res := kernel.NewResources()
			if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: guard}); err != nil {
				t.Fatal(err)
			}
			s := graph.NewScope()
			in := []graph.Output{stateVar(s, "v", tensor.Float32, n), stateVar(s, "m", tensor.Float32, n), stateVar(s, "vv", tensor.Float32, n)}
			for _, x := range []float32{0.9, 0.999, 0.01, 0.9, 0.999, 1e-8} {
				in = append(in, stateConst(s, tensor.Scalar(x)))
			}
			in = append(in, stateConst(s, g))
			node := s.AddNode("ApplyAdam", "", in, nil)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			var refs []*kernel.Variable
			for i, o := range in[:3] {
				r, _ := res.Variable(o.Node.Name(), tensor.Float32, tensor.MakeShape(n))
				init := tensor.New(tensor.Float32, n)
				for j := range n {
					init.Float32s()[j] = float32(i+1) * float32(j%5+1) * 0.1
				}
				_ = r.Assign(init)
				refs = append(refs, r)
			}
			_, err := stateRunNode(node, stateKernel(t, node), res)
			return refs, err
		}
		g := tensor.New(tensor.Float32, n)
		for j := range n {
			g.Float32s()[j] = float32(j%3) - 1
		}
		want, err := run(false, g)
		if err != nil {
			t.Fatal(err)
		}
		got, err := run(true, g)
		if err != nil {
			t.Fatalf("n %d: a finite update: %v", n, err)
		}
		for i := range got {
			a, _ := got[i].Read()
			b, _ := want[i].Read()
			if !slices.Equal(a.Float32s(), b.Float32s()) {
				t.Fatalf("n %d: ref %d differs with the policy", n, i)
			}
		}
		for _, at := range []int{0, n / 2, n - 1} {
			keep := g.Float32s()[at]
			g.Float32s()[at] = 1e20
			refs, err := run(true, g)
			g.Float32s()[at] = keep
			if !errors.Is(err, kernel.ErrNonFiniteWrite) || !strings.Contains(err.Error(), `slot "vv"`) || !strings.Contains(err.Error(), "element "+itoa(at)+" +Inf") {
				t.Errorf("n %d, overflow at %d: %v; want ErrNonFiniteWrite naming the slot and element", n, at, err)
			}
			for i, r := range refs {
				v, _ := r.Read()
				if v.Float32s()[at] != float32(i+1)*float32(at%5+1)*0.1 {
					t.Errorf("n %d: ref %d changed after a refused update", n, i)
				}
			}
		}
	}
}
