package cpu_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// sparseApplyNode builds op's update of a float32 [rows, width] variable
// (and its slots) by n rows of gradient at indices drawn with repeats, as
// a batch's embedding lookups are: most ids are few and frequent. It
// returns the node and resources holding the variables, initialised.
func sparseApplyNode(t testing.TB, op string, slots, rows, width, n int, scalars []float32, after int, seed uint64) (*graph.Node, *kernel.Resources) {
	s := graph.NewScope()
	var in []graph.Output
	for i := range 1 + slots {
		in = append(in, stateVar(s, "v"+string(rune('0'+i)), tensor.Float32, rows, width))
	}
	for _, x := range scalars[:len(scalars)-after] {
		in = append(in, stateConst(s, tensor.Scalar(x)))
	}
	r := rand.New(rand.NewPCG(seed, 1))
	g, idx := tensor.New(tensor.Float32, n, width), tensor.New(tensor.Int64, n)
	for i := range n {
		idx.Int64s()[i] = int64(min(rows-1, int(r.ExpFloat64()*float64(rows)/8)))
	}
	for i := range g.Float32s() {
		g.Float32s()[i] = float32(r.NormFloat64())
	}
	in = append(in, stateConst(s, g), stateConst(s, idx))
	for _, x := range scalars[len(scalars)-after:] {
		in = append(in, stateConst(s, tensor.Scalar(x)))
	}
	node := s.AddNode(op, "", in, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	for i, o := range in[:1+slots] {
		v, _ := res.Variable(o.Node.Name(), tensor.Float32, tensor.MakeShape(rows, width))
		init := tensor.New(tensor.Float32, rows, width)
		for j := range init.Float32s() {
			init.Float32s()[j] = float32(i+1) * 0.1 * float32(r.Float64())
		}
		_ = v.Assign(init)
	}
	return node, res
}

var sparseBenchOps = []struct {
	op      string
	slots   int
	scalars []float32
	after   int // of the scalars, how many come after the gradient and indices
}{
	{"SparseApplyGradientDescent", 0, []float32{0.1}, 0},
	{"SparseApplyMomentum", 1, []float32{0.1, 0.9}, 1},
	{"SparseApplyAdagrad", 1, []float32{0.1}, 0},
	{"SparseApplyAdam", 2, []float32{0.9, 0.999, 0.01, 0.9, 0.999, 1e-8}, 0},
	{"SparseApplyFtrl", 2, []float32{0.1, 0.01, 0.01, -0.5}, 4},
}

// BenchmarkSparseApply: an update of widedeep's shape (a 2600-row table of
// 8, a batch of 1024 lookups) and of a larger table (100k rows of 64).
func BenchmarkSparseApply(b *testing.B) {
	for _, shape := range []struct {
		name               string
		rows, width, batch int
	}{{"2600x8", 2600, 8, 1024}, {"100kx64", 100_000, 64, 4096}} {
		for _, o := range sparseBenchOps {
			b.Run(o.op+"/"+shape.name, func(b *testing.B) {
				node, res := sparseApplyNode(b, o.op, o.slots, shape.rows, shape.width, shape.batch, o.scalars, o.after, 1)
				// As on a cluster's tasks: an update that would write a
				// NaN or an infinity is undone.
				if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: true}); err != nil {
					b.Fatal(err)
				}
				k := stateKernel(b, node)
				for b.Loop() {
					if _, err := stateRunNode(node, k, res); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestSparseApplyRefusesANonFiniteWrite: under the cluster's policy, a
// sparse update that would overflow a row of the variable, or of a slot,
// writes nothing and names what it would have made non-finite.
func TestSparseApplyRefusesANonFiniteWrite(t *testing.T) {
	for _, tc := range []struct {
		op      string
		slots   int
		scalars []float32
		want    string
	}{
		{"SparseApplyGradientDescent", 0, []float32{3e38}, `variable "v0": the update would make row`},
		{"SparseApplyAdagrad", 1, []float32{0.1}, `variable "v0": its slot "v1": the update would make row`},
	} {
		t.Run(tc.op, func(t *testing.T) {
			node, res := sparseApplyNode(t, tc.op, tc.slots, 50, 4, 64, tc.scalars, 0, 2)
			if err := res.SetPolicy(kernel.Policy{RefuseNonFiniteWrites: true}); err != nil {
				t.Fatal(err)
			}
			// Gradients of 1e20: their squares, and 3e38 times them,
			// overflow float32.
			value, _ := node.Input(len(node.Inputs()) - 2).Node.Attr("value")
			g := value.(*tensor.Tensor)
			for i := range g.Float32s() {
				g.Float32s()[i] = 1e20
			}
			before := sparseValues(t, node, res, 1+tc.slots)
			_, err := stateRunNode(node, stateKernel(t, node), res)
			if !errors.Is(err, kernel.ErrNonFiniteWrite) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want ErrNonFiniteWrite naming %q", err, tc.want)
			}
			if after := sparseValues(t, node, res, 1+tc.slots); !slices.Equal(after, before) {
				t.Errorf("the refused update changed the variable or its slots")
			}
		})
	}
}

// sparseValues returns the values of the first n ref inputs of node, one
// after the other.
func sparseValues(t *testing.T, node *graph.Node, res *kernel.Resources, n int) []float32 {
	var out []float32
	for _, in := range node.Inputs()[:n] {
		v, err := res.Variable(in.Node.Name(), in.DType(), in.Shape())
		if err != nil {
			t.Fatal(err)
		}
		val, err := v.Read()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, val.Float32s()...)
	}
	return out
}

// uniqueNode is a Unique of the ids x.
func uniqueNode(t testing.TB, x *tensor.Tensor) *graph.Node {
	s := graph.NewScope()
	n := s.AddNode("Unique", "", []graph.Output{stateConst(s, x)}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUnique: the distinct ids in order of first appearance, and each
// id's position among them, for ids of every magnitude and sign, as a
// map finds them.
func TestUnique(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 17, 1000, 40000} {
		ids := make([]int64, n)
		for i := range ids {
			switch i % 4 {
			case 0:
				ids[i] = int64(r.IntN(50)) // repeated often
			case 1:
				ids[i] = -int64(r.IntN(1000))
			case 2:
				ids[i] = int64(r.Uint64()) // anywhere in int64
			default:
				ids[i] = int64(r.IntN(1<<20)) << 32 // equal low bits
			}
		}
		for _, x := range []*tensor.Tensor{tensor.MustFromSlice(ids, n), tensor.MustFromSlice(int32s(ids), n)} {
			node := uniqueNode(t, x)
			out, err := stateRunNode(node, stateKernel(t, node), kernel.NewResources())
			if err != nil {
				t.Fatal(err)
			}
			want, pos := []int64{}, map[int64]int32{}
			vals := ids
			if x.DType() == tensor.Int32 {
				vals = widen(int32s(ids))
			}
			var wantIdx []int32
			for _, v := range vals {
				p, ok := pos[v]
				if !ok {
					p = int32(len(want))
					pos[v] = p
					want = append(want, v)
				}
				wantIdx = append(wantIdx, p)
			}
			got := out[0].Int64s()
			if x.DType() == tensor.Int32 {
				got = widen(out[0].Int32s())
			}
			if !slices.Equal(got, want) || !slices.Equal(out[1].Int32s(), wantIdx) {
				t.Fatalf("Unique of %d %v ids: %d distinct, want %d", n, x.DType(), len(got), len(want))
			}
		}
	}
}

func int32s(v []int64) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func widen(v []int32) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// BenchmarkUnique: the ids of a widedeep step, 512 examples of 26
// features, drawn with repeats.
func BenchmarkUnique(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]int64, 512*26)
	for i := range ids {
		ids[i] = int64(i%26)*100 + int64(min(99, int(r.ExpFloat64()*10)))
	}
	node := uniqueNode(b, tensor.MustFromSlice(ids, len(ids)))
	k, res := stateKernel(b, node), kernel.NewResources()
	for b.Loop() {
		if _, err := stateRunNode(node, k, res); err != nil {
			b.Fatal(err)
		}
	}
}
