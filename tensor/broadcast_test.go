package tensor

import (
	"slices"
	"testing"
)

func TestPlanBroadcast(t *testing.T) {
	for _, c := range []struct {
		a, b              []int
		out, dims, sa, sb []int
	}{
		{[]int{3, 5}, []int{3, 5}, []int{3, 5}, []int{15}, []int{1}, []int{1}},
		{[]int{3, 5}, []int{5}, []int{3, 5}, []int{3, 5}, []int{5, 1}, []int{0, 1}},
		{[]int{2, 1, 3}, []int{4, 1}, []int{2, 4, 3}, []int{2, 4, 3}, []int{3, 0, 1}, []int{0, 1, 0}},
		{[]int{}, []int{7}, []int{7}, []int{7}, []int{0}, []int{1}},
		{[]int{1, 1}, []int{}, []int{1, 1}, []int{1}, []int{1}, []int{1}},
	} {
		p, err := PlanBroadcast(c.a, c.b)
		if err != nil || !slices.Equal(p.Out, c.out) || !slices.Equal(p.Dims, c.dims) || !slices.Equal(p.StrideA, c.sa) || !slices.Equal(p.StrideB, c.sb) {
			t.Errorf("PlanBroadcast(%v, %v) = %+v, %v; want out %v dims %v strides %v %v", c.a, c.b, p, err, c.out, c.dims, c.sa, c.sb)
		}
	}
	if _, err := PlanBroadcast([]int{3, 4}, []int{5}); err == nil {
		t.Error("[3 4] and [5] broadcast")
	}
}
