package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// The guard of kernel.Policy.RefuseNonFiniteWrites. Under it, a kernel
// that writes a variable checks the inputs it writes from (value,
// gradient, hyperparameters) before it touches anything, and an update
// that computes its new values (AssignAdd, the Apply* rules) saves what
// it overwrites and checks what it wrote, putting the old values back if
// finite inputs overflowed: in either case the variable keeps its value.

// stateNonFinite returns the index and value of the first NaN or infinity
// of t, or -1 (always for a tensor that is not of floats).
func stateNonFinite(t *tensor.Tensor) (int, float64) {
	switch t.DType() {
	case tensor.Float32:
		d := t.Float32s()
		if stateFinite32(d) {
			return -1, 0
		}
		if i := tensor.FirstNonFinite32(d); i >= 0 {
			return i, float64(d[i])
		}
	case tensor.Float64:
		d := t.Float64s()
		if stateFinite64(d) {
			return -1, 0
		}
		if i := tensor.FirstNonFinite64(d); i >= 0 {
			return i, d[i]
		}
	default:
		if !t.DType().IsFloat() {
			return -1, 0
		}
		for i := range t.NumElements() {
			if x := t.Float64At(i); math.IsNaN(x) || math.IsInf(x, 0) {
				return i, x
			}
		}
	}
	return -1, 0
}

// stateCheckInputs refuses, under the policy, a NaN or an infinity in the
// node's float inputs from the first (ref inputs excluded), which it would
// write into variable v: named with the input and its producer.
func stateCheckInputs(c *kernel.Context, v *kernel.Variable, first int) error {
	for i := first; i < len(c.Inputs); i++ {
		t := c.Inputs[i]
		if t == nil {
			continue
		}
		at, bad := stateNonFinite(t)
		if at < 0 {
			continue
		}
		from := fmt.Sprintf("input %d", i)
		if i < c.Node.NumInputs() {
			in := c.Node.Input(i)
			from = fmt.Sprintf("input %d, %s (%s)", i, in.Name(), in.Node.Op())
			if in.Node.Op() == "Placeholder" {
				from += ", fed by the step's request"
			}
		}
		return &kernel.NodeError{Node: c.Node, Err: fmt.Errorf("%w: variable %q: %s, has %v at element %d; refused, the variable keeps its value",
			kernel.ErrNonFiniteWrite, v.Name(), from, bad, at)}
	}
	return nil
}

// stateSaved holds what a guarded update overwrites, in pooled buffers.
type stateSaved struct {
	f32 [4]*[]float32
	f64 [4]*[]float64
}

var (
	stateSaved32 sync.Pool // *[]float32
	stateSaved64 sync.Pool // *[]float64
)

// save copies vals[i] for each i below n whose old value is not kept
// elsewhere (before[i] nil).
func (s *stateSaved) save(vals, before []*tensor.Tensor) {
	for i, t := range vals {
		if before[i] != nil {
			continue
		}
		switch t.DType() {
		case tensor.Float32:
			s.f32[i] = stateBuf(&stateSaved32, t.Float32s())
		case tensor.Float64:
			s.f64[i] = stateBuf(&stateSaved64, t.Float64s())
		}
	}
}

func stateBuf[T float32 | float64](pool *sync.Pool, src []T) *[]T {
	p, _ := pool.Get().(*[]T)
	if p == nil || cap(*p) < len(src) {
		b := make([]T, len(src))
		p = &b
	}
	*p = (*p)[:len(src)]
	copy(*p, src)
	return p
}

// restore puts the old values back into vals.
func (s *stateSaved) restore(vals, before []*tensor.Tensor) {
	for i, t := range vals {
		switch {
		case before[i] != nil:
			_ = t.CopyFrom(before[i]) // same dtype and shape: the variable's old buffer
		case s.f32[i] != nil:
			copy(t.Float32s(), *s.f32[i])
		case s.f64[i] != nil:
			copy(t.Float64s(), *s.f64[i])
		}
	}
}

// release returns the buffers to their pools.
func (s *stateSaved) release() {
	for i := range s.f32 {
		if s.f32[i] != nil {
			stateSaved32.Put(s.f32[i])
		}
		if s.f64[i] != nil {
			stateSaved64.Put(s.f64[i])
		}
	}
	*s = stateSaved{}
}

// stateGuarded runs update on the locked values vals of refs (the
// variable first), checking afterwards that none holds a NaN or an
// infinity; if one does, it puts every old value back and returns an
// error naming the variable or slot and the element. before[i], when set,
// is ref i's old value in another buffer (a variable that moved).
func stateGuarded(c *kernel.Context, refs []*kernel.Variable, vals, before []*tensor.Tensor, update func()) error {
	var s stateSaved
	s.save(vals, before)
	defer s.release()
	update()
	for i, t := range vals {
		at, bad := stateNonFinite(t)
		if at < 0 {
			continue
		}
		s.restore(vals, before)
		return stateOverflow(c, refs, i, at, bad)
	}
	return nil
}

// stateOverflow is the error of an update of finite inputs that would
// make element at of refs[i] (the variable, or one of its slots) bad.
func stateOverflow(c *kernel.Context, refs []*kernel.Variable, i, at int, bad float64) error {
	what := fmt.Sprintf("variable %q", refs[i].Name())
	if i > 0 {
		what = fmt.Sprintf("variable %q: its slot %q", refs[0].Name(), refs[i].Name())
	}
	return &kernel.NodeError{Node: c.Node, Err: fmt.Errorf("%w: %s: the update would make element %d %v from finite inputs "+
		"(an overflow: has the model diverged? lower the learning rate); refused, the variable keeps its value",
		kernel.ErrNonFiniteWrite, what, at, bad)}
}

// statePreflightChunk is how many elements statePreflight computes at a
// time: few enough that the copies stay in cache.
const statePreflightChunk = 2048

// statePreflight runs update on copies of the refs' values (vals[:nRefs],
// the variable's old value from vals[3] when it moved) and of the
// gradient, a chunk at a time (chunks split across cores), and returns
// the first ref and element whose new value would not be finite, and that
// value (ref -1 when all are finite). It changes nothing: a guarded update
// calls it first, and the rule computes each element alone, so the
// chunks' results are the update's, bit for bit.
func statePreflight(vals [4]*tensor.Tensor, nRefs int, g *tensor.Tensor, sc [8]float64, update stateUpdate) (ref, at int, bad float64) {
	n := vals[0].NumElements()
	src := vals[0]
	if vals[3] != nil {
		src = vals[3]
	}
	chunks := (n + statePreflightChunk - 1) / statePreflightChunk
	var mu sync.Mutex
	ref, at = -1, n
	kernel.ParallelFor(chunks, statePreflightChunk*stateCost, func(clo, chi int) {
		sp := stateGetScratch(g.DType())
		defer stateScratches[sp.dt].Put(sp)
		for lo := clo * statePreflightChunk; lo < min(chi*statePreflightChunk, n); lo += statePreflightChunk {
			m := min(statePreflightChunk, n-lo)
			var chunk [4]*tensor.Tensor
			for i := range nRefs {
				from := vals[i]
				if i == 0 {
					from = src
				}
				chunk[i] = sp.load(i, from, lo, m)
			}
			update(chunk, sp.load(3, g, lo, m), sc)
			for i := range nRefs {
				if j, x := stateNonFinite(chunk[i]); j >= 0 {
					mu.Lock()
					if lo+j < at || lo+j == at && i < ref {
						ref, at, bad = i, lo+j, x
					}
					mu.Unlock()
					return
				}
			}
		}
	})
	if ref < 0 {
		return -1, -1, 0
	}
	return ref, at, bad
}

// stateScratch holds statePreflight's chunks: one per ref, and the
// gradient's (index 3).
type stateScratch struct {
	dt   tensor.DType
	f32  [4][]float32
	f64  [4][]float64
	full [4]*tensor.Tensor // each buffer whole, wrapped once
}

var stateScratches = map[tensor.DType]*sync.Pool{tensor.Float32: {}, tensor.Float64: {}}

func stateGetScratch(dt tensor.DType) *stateScratch {
	if sp, _ := stateScratches[dt].Get().(*stateScratch); sp != nil {
		return sp
	}
	sp := &stateScratch{dt: dt}
	for i := range sp.full {
		if dt == tensor.Float32 {
			sp.f32[i] = make([]float32, statePreflightChunk)
			sp.full[i] = tensor.MustFromSlice(sp.f32[i], statePreflightChunk)
		} else {
			sp.f64[i] = make([]float64, statePreflightChunk)
			sp.full[i] = tensor.MustFromSlice(sp.f64[i], statePreflightChunk)
		}
	}
	return sp
}

// load copies elements lo..lo+m of t into chunk i and returns it as a
// tensor of m elements.
func (sp *stateScratch) load(i int, t *tensor.Tensor, lo, m int) *tensor.Tensor {
	if sp.dt == tensor.Float32 {
		copy(sp.f32[i][:m], t.Float32s()[lo:lo+m])
		if m == statePreflightChunk {
			return sp.full[i]
		}
		return tensor.MustFromSlice(sp.f32[i][:m], m)
	}
	copy(sp.f64[i][:m], t.Float64s()[lo:lo+m])
	if m == statePreflightChunk {
		return sp.full[i]
	}
	return tensor.MustFromSlice(sp.f64[i][:m], m)
}
