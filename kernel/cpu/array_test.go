package cpu

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/distflow/distflow/tensor"
)

func arrayRun(t *testing.T, op string, attrs map[string]any, inputs ...*tensor.Tensor) ([]*tensor.Tensor, error) {
	t.Helper()
	return runKernel(t, op, attrs, inputs...)
}

func arrayF32(shape []int, v ...float32) *tensor.Tensor { return tensor.MustFromSlice(v, shape...) }
func arrayI32(v ...int32) *tensor.Tensor                { return tensor.MustFromSlice(v, len(v)) }

// arrayRandom returns a tensor of dtype dt with small distinct-ish values.
func arrayRandom(r *rand.Rand, dt tensor.DType, dims ...int) *tensor.Tensor {
	x := tensor.New(dt, dims...)
	for i := range x.NumElements() {
		x.SetFloat64At(i, float64(r.Intn(200)-100))
	}
	if dt == tensor.Uint8 || dt == tensor.Bool {
		for i := range x.NumElements() {
			x.SetFloat64At(i, float64(r.Intn(2)*(i%251+1)))
		}
	}
	return x
}

// arrayUnravel returns the multi-index of flat index i in dims.
func arrayUnravel(i int, dims []int) []int {
	idx := make([]int, len(dims))
	for d := len(dims) - 1; d >= 0; d-- {
		idx[d] = i % dims[d]
		i /= dims[d]
	}
	return idx
}

func arrayRavel(idx, dims []int) int {
	f := 0
	for d := range dims {
		f = f*dims[d] + idx[d]
	}
	return f
}

// arrayNaive builds a tensor of dims whose element at multi-index idx is
// x at src(idx), or 0 when src returns nil: the reference for every box copy.
func arrayNaive(x *tensor.Tensor, dims []int, src func(idx []int) []int) *tensor.Tensor {
	out := tensor.New(x.DType(), dims...)
	for i := range out.NumElements() {
		if j := src(arrayUnravel(i, dims)); j != nil {
			out.SetFloat64At(i, x.Float64At(arrayRavel(j, x.Shape())))
		}
	}
	return out
}

var arrayDTypes = []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Bool}

func TestArrayKernelsHand(t *testing.T) {
	x23 := arrayF32([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	cases := []struct {
		op    string
		attrs map[string]any
		in    []*tensor.Tensor
		want  []*tensor.Tensor
	}{
		{"Reshape", nil, []*tensor.Tensor{x23, arrayI32(3, -1)}, []*tensor.Tensor{arrayF32([]int{3, 2}, 1, 2, 3, 4, 5, 6)}},
		{"Reshape", nil, []*tensor.Tensor{x23, tensor.MustFromSlice([]int64{6}, 1)}, []*tensor.Tensor{arrayF32([]int{6}, 1, 2, 3, 4, 5, 6)}},
		{"Shape", nil, []*tensor.Tensor{x23}, []*tensor.Tensor{arrayI32(2, 3)}},
		{"Rank", nil, []*tensor.Tensor{x23}, []*tensor.Tensor{tensor.Scalar(int32(2))}},
		{"Size", nil, []*tensor.Tensor{x23}, []*tensor.Tensor{tensor.Scalar(int32(6))}},
		{"ExpandDims", map[string]any{"axis": -1}, []*tensor.Tensor{x23}, []*tensor.Tensor{arrayF32([]int{2, 3, 1}, 1, 2, 3, 4, 5, 6)}},
		{"Squeeze", nil, []*tensor.Tensor{arrayF32([]int{1, 3, 1}, 1, 2, 3)}, []*tensor.Tensor{arrayF32([]int{3}, 1, 2, 3)}},
		{"Squeeze", map[string]any{"axes": []int{0}}, []*tensor.Tensor{arrayF32([]int{1, 3, 1}, 1, 2, 3)}, []*tensor.Tensor{arrayF32([]int{3, 1}, 1, 2, 3)}},
		{"Transpose", nil, []*tensor.Tensor{x23}, []*tensor.Tensor{arrayF32([]int{3, 2}, 1, 4, 2, 5, 3, 6)}},
		{"Concat", map[string]any{"axis": 1}, []*tensor.Tensor{x23, arrayF32([]int{2, 1}, 7, 8)},
			[]*tensor.Tensor{arrayF32([]int{2, 4}, 1, 2, 3, 7, 4, 5, 6, 8)}},
		{"Concat", map[string]any{"axis": 0}, []*tensor.Tensor{x23, arrayF32([]int{0, 3})}, []*tensor.Tensor{x23}},
		{"Slice", map[string]any{"begin": []int{0, 1}, "size": []int{-1, 2}}, []*tensor.Tensor{x23},
			[]*tensor.Tensor{arrayF32([]int{2, 2}, 2, 3, 5, 6)}},
		{"Split", map[string]any{"axis": 1, "num_split": 3}, []*tensor.Tensor{x23},
			[]*tensor.Tensor{arrayF32([]int{2, 1}, 1, 4), arrayF32([]int{2, 1}, 2, 5), arrayF32([]int{2, 1}, 3, 6)}},
		{"Gather", nil, []*tensor.Tensor{x23, arrayI32(1, 1, 0)}, []*tensor.Tensor{arrayF32([]int{3, 3}, 4, 5, 6, 4, 5, 6, 1, 2, 3)}},
		{"Gather", map[string]any{"axis": 1}, []*tensor.Tensor{x23, tensor.MustFromSlice([]int64{2, 0}, 2)},
			[]*tensor.Tensor{arrayF32([]int{2, 2}, 3, 1, 6, 4)}},
		{"GatherGrad", nil, []*tensor.Tensor{arrayF32([]int{3, 2}, 1, 2, 3, 4, 5, 6), arrayI32(2, 0, 2), arrayI32(4, 2)},
			[]*tensor.Tensor{arrayF32([]int{4, 2}, 3, 4, 0, 0, 6, 8, 0, 0)}},
		{"GatherGrad", map[string]any{"axis": 1}, []*tensor.Tensor{tensor.MustFromSlice([]int64{1, 2, 3, 4}, 2, 2), arrayI32(1, 1), arrayI32(2, 3)},
			[]*tensor.Tensor{tensor.MustFromSlice([]int64{0, 3, 0, 0, 7, 0}, 2, 3)}},
		{"OneHot", map[string]any{"depth": 3}, []*tensor.Tensor{arrayI32(0, 2, -1, 5)},
			[]*tensor.Tensor{arrayF32([]int{4, 3}, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0)}},
		{"OneHot", map[string]any{"depth": 2, "on_value": float32(5), "off_value": float32(-1), "dtype": tensor.Int64},
			[]*tensor.Tensor{arrayI32(1, 0)}, []*tensor.Tensor{tensor.MustFromSlice([]int64{-1, 5, 5, -1}, 2, 2)}},
		// tf.one_hot's documented examples: indices [0, 2, -1, 1], depth 3,
		// on 5, off 0; axis -1 gives [4, 3], axis 0 gives [3, 4].
		{"OneHot", map[string]any{"depth": 3, "on_value": float32(5), "axis": -1}, []*tensor.Tensor{arrayI32(0, 2, -1, 1)},
			[]*tensor.Tensor{arrayF32([]int{4, 3}, 5, 0, 0, 0, 0, 5, 0, 0, 0, 0, 5, 0)}},
		{"OneHot", map[string]any{"depth": 3, "on_value": float32(5), "axis": 0}, []*tensor.Tensor{arrayI32(0, 2, -1, 1)},
			[]*tensor.Tensor{arrayF32([]int{3, 4}, 5, 0, 0, 0, 0, 0, 0, 5, 0, 5, 0, 0)}},
		// indices [[0, 2], [1, -1]] (batch 2, features 2), depth 3:
		// axis -1 is [b, f, d], axis 1 is [b, d, f], axis 0 is [d, b, f],
		// each 1 where indices[b, f] == d.
		{"OneHot", map[string]any{"depth": 3}, []*tensor.Tensor{tensor.MustFromSlice([]int64{0, 2, 1, -1}, 2, 2)},
			[]*tensor.Tensor{arrayF32([]int{2, 2, 3}, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0)}},
		{"OneHot", map[string]any{"depth": 3, "axis": 1}, []*tensor.Tensor{tensor.MustFromSlice([]int64{0, 2, 1, -1}, 2, 2)},
			[]*tensor.Tensor{arrayF32([]int{2, 3, 2}, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0)}},
		{"OneHot", map[string]any{"depth": 3, "axis": 0}, []*tensor.Tensor{tensor.MustFromSlice([]int64{0, 2, 1, -1}, 2, 2)},
			[]*tensor.Tensor{arrayF32([]int{3, 2, 2}, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0)}},
		{"OneHot", map[string]any{"depth": 3, "axis": 0, "dtype": tensor.Int32}, []*tensor.Tensor{tensor.Scalar(int32(2))},
			[]*tensor.Tensor{arrayI32(0, 0, 1)}},
		{"Fill", nil, []*tensor.Tensor{arrayI32(2, 2), tensor.Scalar(7.5)}, []*tensor.Tensor{tensor.MustFromSlice([]float64{7.5, 7.5, 7.5, 7.5}, 2, 2)}},
		{"Fill", nil, []*tensor.Tensor{arrayI32(0, 3), tensor.Scalar(true)}, []*tensor.Tensor{tensor.New(tensor.Bool, 0, 3)}},
		{"ZerosLike", nil, []*tensor.Tensor{arrayI32(4, 5)}, []*tensor.Tensor{arrayI32(0, 0)}},
		{"OnesLike", nil, []*tensor.Tensor{tensor.MustFromSlice([]bool{false, true}, 2)}, []*tensor.Tensor{tensor.MustFromSlice([]bool{true, true}, 2)}},
		{"OnesLike", nil, []*tensor.Tensor{x23}, []*tensor.Tensor{arrayF32([]int{2, 3}, 1, 1, 1, 1, 1, 1)}},
		{"Tile", map[string]any{"multiples": []int{2, 1}}, []*tensor.Tensor{arrayF32([]int{1, 2}, 1, 2)},
			[]*tensor.Tensor{arrayF32([]int{2, 2}, 1, 2, 1, 2)}},
		{"Tile", map[string]any{"multiples": []int{1, 2}}, []*tensor.Tensor{arrayF32([]int{2, 1}, 1, 2)},
			[]*tensor.Tensor{arrayF32([]int{2, 2}, 1, 1, 2, 2)}},
		{"Pad", map[string]any{"paddings": []int{1, 0, 0, 1}}, []*tensor.Tensor{arrayF32([]int{1, 2}, 1, 2)},
			[]*tensor.Tensor{arrayF32([]int{2, 3}, 0, 0, 0, 1, 2, 0)}},
	}
	for _, c := range cases {
		got, err := arrayRun(t, c.op, c.attrs, c.in...)
		if err != nil {
			t.Errorf("%s%v: %v", c.op, c.attrs, err)
			continue
		}
		for i, w := range c.want {
			if !tensor.Equal(got[i], w) {
				t.Errorf("%s%v: output %d = %v, want %v", c.op, c.attrs, i, got[i], w)
			}
		}
	}
}

func TestArrayKernelErrors(t *testing.T) {
	x23 := arrayF32([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	cases := []struct {
		op    string
		attrs map[string]any
		in    []*tensor.Tensor
		want  string
	}{
		{"Reshape", nil, []*tensor.Tensor{x23, arrayI32(4, -1)}, "cannot reshape [2,3] to [4 -1]"},
		{"Gather", nil, []*tensor.Tensor{x23, arrayI32(0, 2)}, "indices[1] = 2 is out of range [0, 2)"},
		{"Gather", nil, []*tensor.Tensor{x23, tensor.MustFromSlice([]int64{-1}, 1)}, "indices[0] = -1 is out of range [0, 2)"},
		{"GatherGrad", nil, []*tensor.Tensor{x23, arrayI32(0, 5), arrayI32(3, 3)}, "indices[1] = 5 is out of range [0, 3)"},
		{"GatherGrad", nil, []*tensor.Tensor{x23, arrayI32(0), arrayI32(3, 3)}, "dy has shape [2,3]"},
		{"Concat", map[string]any{"axis": 0}, []*tensor.Tensor{x23, arrayF32([]int{1, 2}, 1, 2)}, "input 1 has shape [1,2], input 0 has shape [2,3]"},
		{"Slice", map[string]any{"begin": []int{1, 0}, "size": []int{2, -1}}, []*tensor.Tensor{x23}, "out of bounds of shape [2,3]"},
		{"Split", map[string]any{"axis": 1, "num_split": 2}, []*tensor.Tensor{x23}, "not divisible by num_split 2"},
		{"Squeeze", map[string]any{"axes": []int{1}}, []*tensor.Tensor{x23}, "cannot squeeze dimension 1 of shape [2,3]"},
		{"Transpose", map[string]any{"perm": []int{0, 1, 2}}, []*tensor.Tensor{x23}, "perm [0 1 2] has 3 entries for rank 2"},
		{"Fill", nil, []*tensor.Tensor{arrayI32(-1), tensor.Scalar(1.0)}, "negative dimension"},
		{"Tile", map[string]any{"multiples": []int{1}}, []*tensor.Tensor{x23}, "multiples [1] has 1 entries for shape [2,3]"},
		{"Pad", map[string]any{"paddings": []int{1, 1}}, []*tensor.Tensor{x23}, "paddings [1 1] must hold 2 values"},
	}
	for _, c := range cases {
		_, err := arrayRun(t, c.op, c.attrs, c.in...)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.op) {
			t.Errorf("%s%v: error %v, want one naming the node and containing %q", c.op, c.attrs, err, c.want)
		}
	}
}

// TestArrayTranspose compares with the naive definition over every dtype,
// shapes that exercise coalescing, the tiled 2-D and batched paths, the
// general path, and the parallel split.
func TestArrayTranspose(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	cases := []struct {
		dims, perm []int
	}{
		{[]int{70, 45}, []int{1, 0}},
		{[]int{300, 257}, []int{1, 0}},
		{[]int{2, 3, 4, 5}, []int{0, 3, 1, 2}},  // NHWC -> NCHW: batched 2-D
		{[]int{2, 3, 4, 5}, []int{2, 0, 3, 1}},  // general
		{[]int{3, 1, 4, 5}, []int{1, 0, 2, 3}},  // only a size-1 dim moves: one copy
		{[]int{4, 33, 65}, []int{0, 2, 1}},      // batched with partial tiles
		{[]int{7, 8, 9, 10}, []int{3, 2, 1, 0}}, // general, reversed
		{[]int{64, 64, 16}, []int{1, 0, 2}},     // inner rows kept
		{[]int{0, 3}, []int{1, 0}},              // empty
		{[]int{}, []int{}},                      // scalar
		{[]int{40, 50, 30}, []int{2, 1, 0}},     // large enough to run in parallel
		{[]int{2, 2, 2, 2, 2}, []int{4, 0, 3, 1, 2}},
	}
	for _, dt := range arrayDTypes {
		for _, c := range cases {
			x := arrayRandom(r, dt, c.dims...)
			outDims := make([]int, len(c.perm))
			for i, p := range c.perm {
				outDims[i] = c.dims[p]
			}
			want := arrayNaive(x, outDims, func(idx []int) []int {
				j := make([]int, len(idx))
				for i, p := range c.perm {
					j[p] = idx[i]
				}
				return j
			})
			got, err := arrayRun(t, "Transpose", map[string]any{"perm": c.perm}, x)
			if err != nil {
				t.Fatalf("%v %v %v: %v", dt, c.dims, c.perm, err)
			}
			if !tensor.Equal(got[0], want) {
				t.Errorf("%v %v perm %v: got %v, want %v", dt, c.dims, c.perm, got[0], want)
			}
		}
	}
}

// TestArrayBoxOps checks Slice, Pad, Tile, Concat and Split against the
// naive definitions over every dtype.
func TestArrayBoxOps(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, dt := range arrayDTypes {
		x := arrayRandom(r, dt, 5, 6, 7)
		big := arrayRandom(r, dt, 64, 48, 20)

		// Slice: several boxes, including whole trailing dims and the parallel path.
		for _, sl := range []struct {
			x           *tensor.Tensor
			begin, size []int
		}{
			{x, []int{1, 2, 3}, []int{3, 2, 4}},
			{x, []int{0, 0, 2}, []int{-1, -1, -1}},
			{x, []int{4, 0, 0}, []int{1, -1, -1}},
			{x, []int{0, 6, 0}, []int{-1, 0, -1}},
			{big, []int{3, 1, 0}, []int{60, 40, 20}},
		} {
			got, err := arrayRun(t, "Slice", map[string]any{"begin": sl.begin, "size": sl.size}, sl.x)
			if err != nil {
				t.Fatal(err)
			}
			dims := make([]int, len(sl.size))
			for i, n := range sl.size {
				dims[i] = n
				if n == -1 {
					dims[i] = sl.x.Shape()[i] - sl.begin[i]
				}
			}
			want := arrayNaive(sl.x, dims, func(idx []int) []int {
				j := make([]int, len(idx))
				for i := range idx {
					j[i] = idx[i] + sl.begin[i]
				}
				return j
			})
			if !tensor.Equal(got[0], want) {
				t.Errorf("%v Slice %v %v: got %v, want %v", dt, sl.begin, sl.size, got[0], want)
			}
		}

		// Pad.
		p := []int{1, 2, 0, 0, 3, 1}
		got, err := arrayRun(t, "Pad", map[string]any{"paddings": p}, x)
		if err != nil {
			t.Fatal(err)
		}
		want := arrayNaive(x, []int{8, 6, 11}, func(idx []int) []int {
			j := make([]int, len(idx))
			for i := range idx {
				j[i] = idx[i] - p[2*i]
				if j[i] < 0 || j[i] >= x.Shape()[i] {
					return nil
				}
			}
			return j
		})
		if !tensor.Equal(got[0], want) {
			t.Errorf("%v Pad: got %v, want %v", dt, got[0], want)
		}

		// Tile.
		m := []int{2, 1, 3}
		got, err = arrayRun(t, "Tile", map[string]any{"multiples": m}, x)
		if err != nil {
			t.Fatal(err)
		}
		want = arrayNaive(x, []int{10, 6, 21}, func(idx []int) []int {
			j := make([]int, len(idx))
			for i := range idx {
				j[i] = idx[i] % x.Shape()[i]
			}
			return j
		})
		if !tensor.Equal(got[0], want) {
			t.Errorf("%v Tile: got %v, want %v", dt, got[0], want)
		}

		// Split then Concat is the identity, on every axis.
		for axis := range 3 {
			parts, err := arrayRun(t, "Split", map[string]any{"axis": axis - 3, "num_split": 2}, big)
			if err != nil {
				t.Fatal(err)
			}
			back, err := arrayRun(t, "Concat", map[string]any{"axis": axis}, parts...)
			if err != nil {
				t.Fatal(err)
			}
			if !tensor.Equal(back[0], big) {
				t.Errorf("%v Concat(Split(x, %d)) != x", dt, axis)
			}
			half := append([]int{}, big.Shape()...)
			half[axis] /= 2
			want := arrayNaive(big, half, func(idx []int) []int {
				j := append([]int{}, idx...)
				j[axis] += half[axis]
				return j
			})
			if !tensor.Equal(parts[1], want) {
				t.Errorf("%v Split axis %d: second part differs", dt, axis)
			}
		}

		// Gather copies rows of any dtype.
		g, err := arrayRun(t, "Gather", map[string]any{"axis": 1}, x, arrayI32(5, 0, 5))
		if err != nil {
			t.Fatal(err)
		}
		idx := []int{5, 0, 5}
		want = arrayNaive(x, []int{5, 3, 7}, func(i []int) []int { return []int{i[0], idx[i[1]], i[2]} })
		if !tensor.Equal(g[0], want) {
			t.Errorf("%v Gather: got %v, want %v", dt, g[0], want)
		}
	}
}

func TestArrayCoalesce(t *testing.T) {
	cases := []struct{ dims, perm, wantDims, wantPerm []int }{
		{[]int{2, 3, 4, 5}, []int{0, 3, 1, 2}, []int{2, 12, 5}, []int{0, 2, 1}},
		{[]int{2, 3, 4}, []int{0, 1, 2}, []int{24}, []int{0}},
		{[]int{2, 1, 4}, []int{2, 1, 0}, []int{2, 4}, []int{1, 0}},
		{[]int{1, 1}, []int{1, 0}, []int{1}, []int{0}},
	}
	for _, c := range cases {
		d, p := arrayCoalesce(c.dims, c.perm)
		if !tensor.MakeShape(d...).Equal(tensor.MakeShape(c.wantDims...)) || !tensor.MakeShape(p...).Equal(tensor.MakeShape(c.wantPerm...)) {
			t.Errorf("arrayCoalesce(%v, %v) = %v, %v; want %v, %v", c.dims, c.perm, d, p, c.wantDims, c.wantPerm)
		}
	}
}

func BenchmarkArrayTranspose2D(b *testing.B) {
	x := tensor.New(tensor.Float32, 1024, 1024)
	out := tensor.New(tensor.Float32, 1024, 1024)
	b.SetBytes(4 << 20)
	for b.Loop() {
		arrayTranspose(arrayBytes(out), arrayBytes(x), 4, x.Shape(), []int{1, 0})
	}
}

func BenchmarkArrayTranspose2DOdd(b *testing.B) {
	x := tensor.New(tensor.Float32, 1000, 1000)
	out := tensor.New(tensor.Float32, 1000, 1000)
	b.SetBytes(4e6)
	for b.Loop() {
		arrayTranspose(arrayBytes(out), arrayBytes(x), 4, x.Shape(), []int{1, 0})
	}
}
