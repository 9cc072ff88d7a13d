package cpu

import (
	"fmt"
	"math"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Kernels of the sparse family (op/sparse.go): the pieces of a partitioned
// embedding lookup and the row-wise optimizer updates. A sparse update
// locks its variable and slots like the dense ones (stateApply), sums the
// gradient rows of repeated indices first (so an update with duplicates
// equals the dense update of the scattered gradient), and then touches
// only those rows.

func init() {
	kernel.Register("Range", kernel.CPU, kernel.Simple(sparseRange))
	kernel.Register("Unique", kernel.CPU, kernel.Borrowing(kernel.Simple(sparseUnique)))
	kernel.Register("UnsortedSegmentSum", kernel.CPU, kernel.Borrowing(kernel.Simple(sparseSegmentSum)))
	kernel.Register("DynamicPartition", kernel.CPU, kernel.Borrowing(kernel.Simple(sparseDynamicPartition)))
	kernel.Register("DynamicStitch", kernel.CPU, kernel.Borrowing(kernel.Simple(sparseDynamicStitch)))
	kernel.Register("PartitionIDs", kernel.CPU, kernel.Borrowing(kernel.Simple(sparsePartitionIDs)))

	// Scalars arrive in input order, skipping grad and indices.
	sparseRegisterApply("SparseApplyGradientDescent", 1, 2, 3, func(*graph.Node) sparseRule {
		return func(r [3]sparseRow, g sparseRow, sc [8]float64) {
			alpha := sc[0]
			for i := range g.n() {
				r[0].set(i, r[0].at(i)-alpha*g.at(i))
			}
		}
	})
	sparseRegisterApply("SparseApplyMomentum", 2, 3, 4, func(n *graph.Node) sparseRule {
		nesterov := n.AttrBool("use_nesterov")
		return func(r [3]sparseRow, g sparseRow, sc [8]float64) {
			lr, mom := sc[0], sc[1]
			for i := range g.n() {
				gi := g.at(i)
				a := r[1].at(i)*mom + gi
				r[1].set(i, a)
				if nesterov {
					r[0].set(i, r[0].at(i)-(gi*lr+a*mom*lr))
				} else {
					r[0].set(i, r[0].at(i)-lr*a)
				}
			}
		}
	})
	sparseRegisterApply("SparseApplyAdagrad", 2, 3, 4, func(*graph.Node) sparseRule {
		return func(r [3]sparseRow, g sparseRow, sc [8]float64) {
			lr := sc[0]
			for i := range g.n() {
				gi := g.at(i)
				a := r[1].at(i) + gi*gi
				r[1].set(i, a)
				r[0].set(i, r[0].at(i)-lr*gi/math.Sqrt(a))
			}
		}
	})
	sparseRegisterApply("SparseApplyAdam", 3, 9, 10, func(*graph.Node) sparseRule {
		return func(r [3]sparseRow, g sparseRow, sc [8]float64) {
			b1p, b2p, lr, b1, b2, eps := sc[0], sc[1], sc[2], sc[3], sc[4], sc[5]
			lrT := lr * math.Sqrt(1-b2p) / (1 - b1p)
			for i := range g.n() {
				gi := g.at(i)
				m := r[1].at(i) + (gi-r[1].at(i))*(1-b1)
				v := r[2].at(i) + (gi*gi-r[2].at(i))*(1-b2)
				r[1].set(i, m)
				r[2].set(i, v)
				r[0].set(i, r[0].at(i)-lrT*m/(math.Sqrt(v)+eps))
			}
		}
	})
	sparseRegisterApply("SparseApplyFtrl", 3, 3, 4, func(*graph.Node) sparseRule {
		return func(r [3]sparseRow, g sparseRow, sc [8]float64) {
			for i := range g.n() {
				w, a, l := FtrlStep(r[0].at(i), r[1].at(i), r[2].at(i), g.at(i), sc[0], sc[1], sc[2], sc[3])
				r[0].set(i, w)
				r[1].set(i, a)
				r[2].set(i, l)
			}
		}
	})
	stateRegisterApply("ApplyFtrl", 3, 3, false, func(*graph.Node) stateUpdate {
		return func(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) {
			// sc: lr, l1, l2, lr_power.
			n := g.NumElements()
			for i := range n {
				w, a, l := FtrlStep(v[0].Float64At(i), v[1].Float64At(i), v[2].Float64At(i), g.Float64At(i), sc[0], sc[1], sc[2], sc[3])
				v[0].SetFloat64At(i, w)
				v[1].SetFloat64At(i, a)
				v[2].SetFloat64At(i, l)
			}
		}
	})
}

// FtrlStep is one FTRL-Proximal update of one coordinate with TensorFlow's
// ApplyFtrl semantics: it returns the new weight, accumulator and linear
// term from the old ones and the gradient g.
func FtrlStep(w, accum, linear, g, lr, l1, l2, lrPower float64) (float64, float64, float64) {
	accumNew := accum + g*g
	var sigma, quadratic float64
	if lrPower == -0.5 {
		sigma = (math.Sqrt(accumNew) - math.Sqrt(accum)) / lr
		quadratic = math.Sqrt(accumNew)/lr + 2*l2
	} else {
		sigma = (math.Pow(accumNew, -lrPower) - math.Pow(accum, -lrPower)) / lr
		quadratic = math.Pow(accumNew, -lrPower)/lr + 2*l2
	}
	linear += g - sigma*w
	if math.Abs(linear) > l1 {
		s := 1.0
		if linear < 0 {
			s = -1
		}
		w = (s*l1 - linear) / quadratic
	} else {
		w = 0
	}
	return w, accumNew, linear
}

// sparseRow is one row of a float tensor, read and written as float64.
type sparseRow struct {
	f32 []float32
	f64 []float64
}

func (r sparseRow) n() int {
	if r.f32 != nil {
		return len(r.f32)
	}
	return len(r.f64)
}

func (r sparseRow) at(i int) float64 {
	if r.f32 != nil {
		return float64(r.f32[i])
	}
	return r.f64[i]
}

func (r sparseRow) set(i int, v float64) {
	if r.f32 != nil {
		r.f32[i] = float32(v)
	} else {
		r.f64[i] = v
	}
}

func sparseRowOf(t *tensor.Tensor, row, width int) sparseRow {
	switch t.DType() {
	case tensor.Float32:
		return sparseRow{f32: t.Float32s()[row*width : (row+1)*width]}
	default:
		return sparseRow{f64: t.Float64s()[row*width : (row+1)*width]}
	}
}

// sparseRule updates one row of the variable (r[0]) and its slots given
// that row's (summed) gradient and the op's scalars.
type sparseRule func(r [3]sparseRow, g sparseRow, scalars [8]float64)

func sparseRegisterApply(opName string, nRefs, gradIdx, idxIdx int, build func(n *graph.Node) sparseRule) {
	kernel.Register(opName, kernel.CPU, kernel.Borrowing(func(n *graph.Node) (kernel.Kernel, error) {
		rule := build(n)
		return kernel.Func(func(c *kernel.Context) error {
			return sparseApply(c, nRefs, gradIdx, idxIdx, rule)
		}), nil
	}))
}

func sparseApply(c *kernel.Context, nRefs, gradIdx, idxIdx int, rule sparseRule) error {
	v := c.Ref(0)
	dt, shape := v.DType(), v.Shape()
	if !dt.IsFloat() || shape.Rank() < 1 {
		return c.Errorf("variable %q must be a float32 or float64 tensor with rows, got %v%v", v.Name(), dt, shape)
	}
	rows := shape.Dim(0)
	width := tensor.NumElements(shape.Dims()[1:])
	var refsBuf [4]*kernel.Variable // at most three refs (Adam's); no allocation
	refs := refsBuf[:nRefs]
	if err := matchRefs(c, refs); err != nil {
		return err
	}
	g := c.Input(gradIdx)
	idx, err := arrayIndices(c, c.Input(idxIdx), rows, "indices")
	if err != nil {
		return err
	}
	if g.DType() != dt || g.Rank() < 1 || g.Shape()[0] != len(idx) || g.NumElements() != len(idx)*width {
		return c.Errorf("gradient %v%v does not match %d indices into variable %q of %v%v",
			g.DType(), g.StaticShape(), len(idx), v.Name(), dt, shape)
	}
	guard := c.RefusesNonFinite()
	if guard {
		if err := stateCheckInputs(c, v, nRefs); err != nil {
			return err
		}
	}
	var scalars [8]float64
	k := 0
	for i := nRefs; i < len(c.Inputs); i++ {
		if i == gradIdx || i == idxIdx {
			continue
		}
		t := c.Input(i)
		if t.DType() != dt || t.NumElements() != 1 {
			return c.Errorf("input %d must be a %v scalar, got %v%v", i, dt, t.DType(), t.StaticShape())
		}
		scalars[k] = t.Float64At(0)
		k++
	}
	idx, g = sparseDedup(idx, g, width)

	var vals [3]*tensor.Tensor
	for i, r := range refs {
		val, err := r.LockValue()
		if err != nil {
			for _, locked := range refs[:i] {
				locked.UnlockValue()
			}
			return stateWrap(c, err)
		}
		vals[i] = val
	}
	defer stateUnlockAll(refs)
	var saved []float64
	if guard {
		// The rows the update overwrites, to put back if it overflows.
		saved = make([]float64, 0, len(idx)*width*nRefs)
		for _, row := range idx {
			for i := range refs {
				r := sparseRowOf(vals[i], row, width)
				for e := range width {
					saved = append(saved, r.at(e))
				}
			}
		}
	}
	for j, row := range idx {
		var rs [3]sparseRow
		for i := range refs {
			rs[i] = sparseRowOf(vals[i], row, width)
		}
		rule(rs, sparseRowOf(g, j, width), scalars)
	}
	if guard {
		return sparseCheckRows(c, refs, vals[:nRefs], idx, width, saved)
	}
	return nil
}

// sparseCheckRows checks the updated rows idx of the refs' values; if one
// holds a NaN or an infinity, it puts the saved rows back (in the order
// sparseApply saved them) and returns an error naming the variable or
// slot, the row and the element.
func sparseCheckRows(c *kernel.Context, refs []*kernel.Variable, vals []*tensor.Tensor, idx []int, width int, saved []float64) error {
	for _, row := range idx {
		for i := range refs {
			r := sparseRowOf(vals[i], row, width)
			for e := range width {
				x := r.at(e)
				if !math.IsNaN(x) && !math.IsInf(x, 0) {
					continue
				}
				k := 0
				for _, row := range idx {
					for i := range refs {
						r := sparseRowOf(vals[i], row, width)
						for e := range width {
							r.set(e, saved[k])
							k++
						}
					}
				}
				what := fmt.Sprintf("variable %q", refs[i].Name())
				if i > 0 {
					what = fmt.Sprintf("variable %q: its slot %q", refs[0].Name(), refs[i].Name())
				}
				return &kernel.NodeError{Node: c.Node, Err: fmt.Errorf("%w: %s: the update would make row %d element %d %v from finite inputs "+
					"(an overflow: has the model diverged? lower the learning rate); refused, the variable keeps its value",
					kernel.ErrNonFiniteWrite, what, row, e, x)}
			}
		}
	}
	return nil
}

// sparseDedup returns the distinct indices and, if some repeat, a new
// gradient whose rows are the sums of the rows of each index (the input is
// never modified: the executor may share it).
func sparseDedup(idx []int, g *tensor.Tensor, width int) ([]int, *tensor.Tensor) {
	pos := make(map[int]int, len(idx))
	uniq := idx[:0:0]
	for _, i := range idx {
		if _, ok := pos[i]; !ok {
			pos[i] = len(uniq)
			uniq = append(uniq, i)
		}
	}
	if len(uniq) == len(idx) {
		return idx, g
	}
	out := tensor.New(g.DType(), append([]int{len(uniq)}, g.Shape()[1:]...)...)
	for j, i := range idx {
		dst, src := sparseRowOf(out, pos[i], width), sparseRowOf(g, j, width)
		for e := range width {
			dst.set(e, dst.at(e)+src.at(e))
		}
	}
	return uniq, out
}

func sparseInts(c *kernel.Context, t *tensor.Tensor, what string) ([]int64, error) {
	switch d := t.Data().(type) {
	case []int64:
		return d, nil
	case []int32:
		out := make([]int64, len(d))
		for i, v := range d {
			out[i] = int64(v)
		}
		return out, nil
	}
	return nil, c.Errorf("%s must be int32 or int64, got %v", what, t.DType())
}

func sparseUnique(c *kernel.Context) error {
	x := c.Input(0)
	if x.Rank() != 1 {
		return c.Errorf("x must be 1-D, got shape %v", x.StaticShape())
	}
	vals, err := sparseInts(c, x, "x")
	if err != nil {
		return err
	}
	pos := make(map[int64]int32, len(vals))
	var uniq []int64
	idx := c.Alloc(1, tensor.Int32, len(vals)).Int32s()
	for i, v := range vals {
		p, ok := pos[v]
		if !ok {
			p = int32(len(uniq))
			pos[v] = p
			uniq = append(uniq, v)
		}
		idx[i] = p
	}
	y := c.Alloc(0, x.DType(), len(uniq))
	for i, v := range uniq {
		switch d := y.Data().(type) {
		case []int64:
			d[i] = v
		case []int32:
			d[i] = int32(v)
		}
	}
	return nil
}

// sparseRowBytes returns t's bytes and the byte length of one row.
func sparseRowBytes(t *tensor.Tensor) ([]byte, int) {
	if t.Rank() == 0 || t.Shape()[0] == 0 {
		return arrayBytes(t), tensor.NumElements(t.Shape()[min(1, t.Rank()):]) * t.DType().Size()
	}
	return arrayBytes(t), tensor.NumElements(t.Shape()[1:]) * t.DType().Size()
}

func sparseSegmentSum(c *kernel.Context) error {
	data, ids, num := c.Input(0), c.Input(1), c.Input(2)
	if num.NumElements() != 1 || !num.DType().IsInteger() {
		return c.Errorf("num_segments must be an int scalar, got %v%v", num.DType(), num.StaticShape())
	}
	n := int(num.Float64At(0))
	if n < 0 {
		return c.Errorf("num_segments must be non-negative, got %d", n)
	}
	if data.Rank() < 1 || ids.Rank() != 1 || data.Shape()[0] != ids.NumElements() {
		return c.Errorf("data %v and segment_ids %v: want one id per row of data", data.StaticShape(), ids.StaticShape())
	}
	seg, err := arrayIndices(c, ids, n, "segment_ids")
	if err != nil {
		return err
	}
	width := tensor.NumElements(data.Shape()[1:])
	out := c.Alloc(0, data.DType(), append([]int{n}, data.Shape()[1:]...)...)
	switch d := out.Data().(type) {
	case []float32:
		sparseSegmentAdd(d, data.Float32s(), seg, width)
	case []float64:
		sparseSegmentAdd(d, data.Float64s(), seg, width)
	case []int32:
		sparseSegmentAdd(d, data.Int32s(), seg, width)
	case []int64:
		sparseSegmentAdd(d, data.Int64s(), seg, width)
	default:
		return c.Errorf("data must be a number type, got %v", data.DType())
	}
	return nil
}

func sparseSegmentAdd[T float32 | float64 | int32 | int64](out, data []T, seg []int, width int) {
	for j, s := range seg {
		dst, src := out[s*width:(s+1)*width], data[j*width:(j+1)*width]
		for e, v := range src {
			dst[e] += v
		}
	}
}

func sparseDynamicPartition(c *kernel.Context) error {
	data, parts := c.Input(0), c.Input(1)
	np := c.Node.AttrInt("num_partitions")
	if parts.DType() != tensor.Int32 || parts.Rank() != 1 || data.Rank() < 1 || data.Shape()[0] != parts.NumElements() {
		return c.Errorf("data %v and partitions %v%v: want one int32 partition per row of data",
			data.StaticShape(), parts.DType(), parts.StaticShape())
	}
	p := parts.Int32s()
	counts := make([]int, np)
	for i, v := range p {
		if v < 0 || int(v) >= np {
			return c.Errorf("partitions[%d] = %d is out of range [0, %d)", i, v, np)
		}
		counts[v]++
	}
	src, row := sparseRowBytes(data)
	dsts := make([][]byte, np)
	for i := range np {
		out := c.Alloc(i, data.DType(), append([]int{counts[i]}, data.Shape()[1:]...)...)
		dsts[i], _ = sparseRowBytes(out)
	}
	next := make([]int, np)
	for i, v := range p {
		copy(dsts[v][next[v]*row:(next[v]+1)*row], src[i*row:(i+1)*row])
		next[v]++
	}
	return nil
}

func sparseDynamicStitch(c *kernel.Context) error {
	n := c.Node.AttrInt("n")
	if len(c.Inputs) != 2*n || n < 1 {
		return c.Errorf("want %d index and %d data tensors, got %d inputs", n, n, len(c.Inputs))
	}
	first := c.Input(n)
	if first.Rank() < 1 {
		return c.Errorf("data 0 must have rows, got shape %v", first.StaticShape())
	}
	rest := first.Shape()[1:]
	size := 0
	all := make([][]int64, n)
	for p := range n {
		ids, err := sparseInts(c, c.Input(p), "indices")
		if err != nil {
			return err
		}
		d := c.Input(n + p)
		if d.DType() != first.DType() || d.Rank() != len(rest)+1 || d.Shape()[0] != len(ids) ||
			!tensor.MakeShape(d.Shape()[1:]...).Equal(tensor.MakeShape(rest...)) {
			return c.Errorf("data %d %v%v does not match indices %d (%d ids) and data 0 %v%v",
				p, d.DType(), d.StaticShape(), p, len(ids), first.DType(), first.StaticShape())
		}
		for _, v := range ids {
			if v < 0 {
				return c.Errorf("indices %d holds the negative index %d", p, v)
			}
			size = max(size, int(v)+1)
		}
		all[p] = ids
	}
	out := c.Alloc(0, first.DType(), append([]int{size}, rest...)...)
	dst, row := sparseRowBytes(out)
	for p, ids := range all {
		src, _ := sparseRowBytes(c.Input(n + p))
		for j, v := range ids {
			copy(dst[int(v)*row:(int(v)+1)*row], src[j*row:(j+1)*row])
		}
	}
	return nil
}

func sparsePartitionIDs(c *kernel.Context) error {
	x := c.Input(0)
	strategy, shards, rows := c.Node.AttrString("strategy"), c.Node.AttrInt("num_shards"), c.Node.AttrInt("num_rows")
	if err := op.CheckPartitionStrategy(strategy, shards, rows); err != nil {
		return c.Errorf("%w", err)
	}
	ids, err := sparseInts(c, x, "ids")
	if err != nil {
		return err
	}
	part := c.Alloc(0, tensor.Int32, len(ids)).Int32s()
	local := c.Alloc(1, x.DType(), len(ids))
	P := int64(shards)
	per, extras := int64(rows)/P, int64(rows)%P
	for i, id := range ids {
		if id < 0 || (rows > 0 && id >= int64(rows)) {
			return c.Errorf("ids[%d] = %d is out of range [0, %d)", i, id, rows)
		}
		var p, l int64
		switch {
		case strategy == "mod":
			p, l = id%P, id/P
		case id < extras*(per+1):
			p, l = id/(per+1), id%(per+1)
		default:
			p, l = extras+(id-extras*(per+1))/per, (id-extras*(per+1))%per
		}
		part[i] = int32(p)
		switch d := local.Data().(type) {
		case []int64:
			d[i] = l
		case []int32:
			d[i] = int32(l)
		}
	}
	return nil
}

func sparseRange(c *kernel.Context) error {
	l := c.Input(0)
	if l.NumElements() != 1 || !l.DType().IsInteger() {
		return c.Errorf("limit must be an int scalar, got %v%v", l.DType(), l.StaticShape())
	}
	n := int(l.Float64At(0))
	if n < 0 {
		return c.Errorf("limit must be non-negative, got %d", n)
	}
	out := c.Alloc(0, l.DType(), n)
	switch d := out.Data().(type) {
	case []int32:
		for i := range d {
			d[i] = int32(i)
		}
	case []int64:
		for i := range d {
			d[i] = int64(i)
		}
	default:
		return c.Errorf("limit must be int32 or int64, got %v", l.DType())
	}
	return nil
}
