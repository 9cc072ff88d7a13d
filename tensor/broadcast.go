package tensor

import "fmt"

// BroadcastPlan is a numpy broadcast of two shapes as element-wise loops
// index it: the output shape, and the collapsed axes (adjacent axes that
// broadcast alike merged, size-1 output axes dropped) with each operand's
// element stride along them (0 where it is broadcast). A broadcast to a
// single element has one axis of size 1 with strides 1.
type BroadcastPlan struct {
	Out              []int
	Dims             []int
	StrideA, StrideB []int
}

// PlanBroadcast plans the broadcast of shapes a and b, or says why they do
// not broadcast.
func PlanBroadcast(a, b []int) (BroadcastPlan, error) {
	r := max(len(a), len(b))
	p := BroadcastPlan{Out: make([]int, r)}
	type axis struct {
		size       int
		aOne, bOne bool // the operand is broadcast along this axis
	}
	var mergedBuf [8]axis
	merged := mergedBuf[:0]
	for i := range r {
		da, db := 1, 1
		if j := i - (r - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (r - len(b)); j >= 0 {
			db = b[j]
		}
		if da != db && da != 1 && db != 1 {
			return BroadcastPlan{}, fmt.Errorf("shapes %v and %v cannot be broadcast (axis %d: %d vs %d)",
				MakeShape(a...), MakeShape(b...), i, da, db)
		}
		d := da
		if da == 1 {
			d = db
		}
		p.Out[i] = d
		if d == 1 {
			continue // contributes nothing to any index
		}
		aOne, bOne := da == 1, db == 1
		if k := len(merged) - 1; k >= 0 && merged[k].aOne == aOne && merged[k].bOne == bOne {
			merged[k].size *= d
			continue
		}
		merged = append(merged, axis{size: d, aOne: aOne, bOne: bOne})
	}
	if len(merged) == 0 {
		merged = append(merged, axis{size: 1})
	}
	k := len(merged)
	p.Dims, p.StrideA, p.StrideB = make([]int, k), make([]int, k), make([]int, k)
	ra, rb := 1, 1
	for i := k - 1; i >= 0; i-- {
		m := merged[i]
		p.Dims[i] = m.size
		if !m.aOne {
			p.StrideA[i] = ra
			ra *= m.size
		}
		if !m.bOne {
			p.StrideB[i] = rb
			rb *= m.size
		}
	}
	return p, nil
}

// SumToAxes returns the axes of a tensor of shape from to sum over so that
// it gets shape to: the leading axes broadcasting added and those where to
// has 1 and from does not (SumToShape, the adjoint of a broadcast).
func SumToAxes(from, to []int) ([]int, error) {
	extra := len(from) - len(to)
	if extra < 0 {
		return nil, fmt.Errorf("cannot sum %v to %v: the target has more axes", MakeShape(from...), MakeShape(to...))
	}
	var axes []int
	for i, d := range from {
		switch j := i - extra; {
		case j < 0:
			axes = append(axes, i)
		case to[j] == d:
		case to[j] == 1:
			axes = append(axes, i)
		default:
			return nil, fmt.Errorf("cannot sum %v to %v: axis %d has %d, want %d or 1",
				MakeShape(from...), MakeShape(to...), i, d, to[j])
		}
	}
	return axes, nil
}
