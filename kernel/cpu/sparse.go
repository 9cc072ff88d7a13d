package cpu

import (
	"fmt"
	"math"
	"sync"

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
	sparseRegisterApply("SparseApplyGradientDescent", 1, 2, 3, func(*graph.Node) sparseRules {
		return sparseRules{sparseSGD[float32], sparseSGD[float64]}
	})
	sparseRegisterApply("SparseApplyMomentum", 2, 3, 4, func(n *graph.Node) sparseRules {
		if n.AttrBool("use_nesterov") {
			return sparseRules{sparseMomentum[float32, sparseNesterov], sparseMomentum[float64, sparseNesterov]}
		}
		return sparseRules{sparseMomentum[float32, sparsePlain], sparseMomentum[float64, sparsePlain]}
	})
	sparseRegisterApply("SparseApplyAdagrad", 2, 3, 4, func(*graph.Node) sparseRules {
		return sparseRules{sparseAdagrad[float32], sparseAdagrad[float64]}
	})
	sparseRegisterApply("SparseApplyAdam", 3, 9, 10, func(*graph.Node) sparseRules {
		return sparseRules{sparseAdam[float32], sparseAdam[float64]}
	})
	sparseRegisterApply("SparseApplyFtrl", 3, 3, 4, func(*graph.Node) sparseRules {
		return sparseRules{sparseFtrl[float32], sparseFtrl[float64]}
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

// sparseRule updates one row of the variable (r[0]) and its slots given
// that row's (summed) gradient and the op's scalars, computing in float64
// and rounding each value it stores, whatever the dtype.
type sparseRule[T float32 | float64] func(r [3][]T, g []T, scalars [8]float64)

// sparseRules are an update's rule for each float dtype.
type sparseRules struct {
	f32 sparseRule[float32]
	f64 sparseRule[float64]
}

func sparseSGD[T float32 | float64](r [3][]T, g []T, sc [8]float64) {
	alpha := sc[0]
	for i, gi := range g {
		r[0][i] = T(float64(r[0][i]) - alpha*float64(gi))
	}
}

// sparseNesterov and sparsePlain choose the momentum rule at compile time.
type (
	sparseNesterov struct{}
	sparsePlain    struct{}
)

func sparseMomentum[T float32 | float64, N sparseNesterov | sparsePlain](r [3][]T, g []T, sc [8]float64) {
	lr, mom := sc[0], sc[1]
	_, nesterov := any(N{}).(sparseNesterov)
	for i, gv := range g {
		gi := float64(gv)
		a := float64(r[1][i])*mom + gi
		r[1][i] = T(a)
		if nesterov {
			r[0][i] = T(float64(r[0][i]) - (gi*lr + a*mom*lr))
		} else {
			r[0][i] = T(float64(r[0][i]) - lr*a)
		}
	}
}

func sparseAdagrad[T float32 | float64](r [3][]T, g []T, sc [8]float64) {
	lr := sc[0]
	for i, gv := range g {
		gi := float64(gv)
		a := float64(r[1][i]) + gi*gi
		r[1][i] = T(a)
		r[0][i] = T(float64(r[0][i]) - lr*gi/math.Sqrt(a))
	}
}

func sparseAdam[T float32 | float64](r [3][]T, g []T, sc [8]float64) {
	b1p, b2p, lr, b1, b2, eps := sc[0], sc[1], sc[2], sc[3], sc[4], sc[5]
	lrT := lr * math.Sqrt(1-b2p) / (1 - b1p)
	for i, gv := range g {
		gi := float64(gv)
		m1, v1 := float64(r[1][i]), float64(r[2][i])
		m := m1 + (gi-m1)*(1-b1)
		v := v1 + (gi*gi-v1)*(1-b2)
		r[1][i] = T(m)
		r[2][i] = T(v)
		r[0][i] = T(float64(r[0][i]) - lrT*m/(math.Sqrt(v)+eps))
	}
}

func sparseFtrl[T float32 | float64](r [3][]T, g []T, sc [8]float64) {
	for i, gv := range g {
		w, a, l := FtrlStep(float64(r[0][i]), float64(r[1][i]), float64(r[2][i]), float64(gv), sc[0], sc[1], sc[2], sc[3])
		r[0][i], r[1][i], r[2][i] = T(w), T(a), T(l)
	}
}

func sparseRegisterApply(opName string, nRefs, gradIdx, idxIdx int, build func(n *graph.Node) sparseRules) {
	kernel.Register(opName, kernel.CPU, kernel.Borrowing(func(n *graph.Node) (kernel.Kernel, error) {
		rules := build(n)
		return kernel.Func(func(c *kernel.Context) error {
			return sparseApply(c, nRefs, gradIdx, idxIdx, rules)
		}), nil
	}))
}

func sparseApply(c *kernel.Context, nRefs, gradIdx, idxIdx int, rules sparseRules) error {
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
	idx, g = sparseDedup(idx, g, width, rows)

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
	if dt == tensor.Float32 {
		var vs [3][]float32
		for i := range refs {
			vs[i] = vals[i].Float32s()
		}
		return sparseUpdate(c, refs, rules.f32, vs, g.Float32s(), idx, width, scalars, guard)
	}
	var vs [3][]float64
	for i := range refs {
		vs[i] = vals[i].Float64s()
	}
	return sparseUpdate(c, refs, rules.f64, vs, g.Float64s(), idx, width, scalars, guard)
}

// sparseUpdate applies rule to the rows idx of the refs' values vals (row
// j of g being row idx[j]'s gradient). Guarded, it keeps the rows it
// overwrites and, if one then holds a NaN or an infinity, puts them all
// back and returns an error naming the variable or slot, the row and the
// element.
func sparseUpdate[T float32 | float64](c *kernel.Context, refs []*kernel.Variable, rule sparseRule[T], vals [3][]T, g []T, idx []int, width int, scalars [8]float64, guard bool) error {
	nRefs := len(refs)
	var saved []T
	if guard {
		saved = make([]T, 0, len(idx)*width*nRefs)
		for _, row := range idx {
			for i := range nRefs {
				saved = append(saved, vals[i][row*width:][:width]...)
			}
		}
	}
	for j, row := range idx {
		var rs [3][]T
		for i := range nRefs {
			rs[i] = vals[i][row*width:][:width]
		}
		rule(rs, g[j*width:][:width], scalars)
	}
	if !guard {
		return nil
	}
	for _, row := range idx {
		for i := range nRefs {
			for e, x := range vals[i][row*width:][:width] {
				if x-x == 0 { // finite
					continue
				}
				k := 0
				for _, row := range idx {
					for i := range nRefs {
						k += copy(vals[i][row*width:][:width], saved[k:])
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
// gradient whose rows are the sums of the rows of each index, in the
// order the rows come (the input is never modified: the executor may
// share it). rows is the variable's.
func sparseDedup(idx []int, g *tensor.Tensor, width, rows int) ([]int, *tensor.Tensor) {
	if len(idx) < 2 {
		return idx, g
	}
	uniq := idx[:0:0]
	at := make([]int32, len(idx)) // each index's position in uniq
	if rows <= sparseSlotRows {
		// A slot per row of the table rather than a map: the map cost
		// more than the update it served.
		sp, _ := sparseSlots.Get().(*[]int32)
		if sp == nil || len(*sp) < rows {
			slots := make([]int32, rows)
			sp = &slots
		}
		slot := *sp
		for j, i := range idx {
			if slot[i] == 0 {
				uniq = append(uniq, i)
				slot[i] = int32(len(uniq))
			}
			at[j] = slot[i] - 1
		}
		for _, i := range uniq {
			slot[i] = 0
		}
		sparseSlots.Put(sp)
	} else {
		pos := make(map[int]int32, len(idx))
		for j, i := range idx {
			p, ok := pos[i]
			if !ok {
				p = int32(len(uniq))
				pos[i] = p
				uniq = append(uniq, i)
			}
			at[j] = p
		}
	}
	if len(uniq) == len(idx) {
		return idx, g
	}
	out := tensor.New(g.DType(), append([]int{len(uniq)}, g.Shape()[1:]...)...)
	if g.DType() == tensor.Float32 {
		sparseSumRows(out.Float32s(), g.Float32s(), at, width)
	} else {
		sparseSumRows(out.Float64s(), g.Float64s(), at, width)
	}
	return uniq, out
}

// sparseSumRows adds row j of src to row at[j] of dst, in order.
func sparseSumRows[T float32 | float64](dst, src []T, at []int32, width int) {
	for j, p := range at {
		d, s := dst[int(p)*width:][:width], src[j*width:][:width]
		for e := range d {
			d[e] += s[e]
		}
	}
}

// sparseSlotRows bounds the tables whose updates find repeated indices
// through a slot per row (sparseSlots); larger ones use a map.
const sparseSlotRows = 1 << 22

// sparseSlots lends sparseDedup zeroed slot arrays, a slot per row.
var sparseSlots sync.Pool

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
	t, _ := uniqueTables.Get().(*uniqueTable)
	if t == nil {
		t = &uniqueTable{}
	}
	defer uniqueTables.Put(t)
	t.reset(len(vals))
	var uniq []int64
	idx := c.Alloc(1, tensor.Int32, len(vals)).Int32s()
	for i, v := range vals {
		p, fresh := t.find(v, int32(len(uniq)))
		if fresh {
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

// uniqueTable is a set of int64 keys, each with the position of its first
// appearance, by open addressing with linear probing in a table of at
// least twice the keys: Unique runs for every embedding lookup of every
// step, and a map cost it most of its time. Tables are pooled.
type uniqueTable struct {
	keys []int64
	pos  []int32 // one more than the key's position; 0: an empty slot
	mask uint64
}

var uniqueTables sync.Pool

// reset empties t for up to n keys.
func (t *uniqueTable) reset(n int) {
	size := 16
	for size < 2*n {
		size *= 2
	}
	if cap(t.pos) < size {
		t.keys, t.pos = make([]int64, size), make([]int32, size)
	} else {
		t.keys, t.pos = t.keys[:size], t.pos[:size]
		clear(t.pos)
	}
	t.mask = uint64(size - 1)
}

// find returns the position of key, and whether it was absent and now
// has the position next.
func (t *uniqueTable) find(key int64, next int32) (int32, bool) {
	h := uint64(key) * 0x9e3779b97f4a7c15 // Fibonacci hashing: the high bits mix all of the key's
	for i := (h ^ h>>29) & t.mask; ; i = (i + 1) & t.mask {
		switch p := t.pos[i]; {
		case p == 0:
			t.keys[i], t.pos[i] = key, next+1
			return next, true
		case t.keys[i] == key:
			return p - 1, false
		}
	}
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
