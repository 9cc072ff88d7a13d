package ops_test

import (
	"math"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

func TestGlorotFans(t *testing.T) {
	cases := []struct {
		shape       []int
		fanIn, fanO int
	}{
		{nil, 1, 1},
		{[]int{7}, 7, 7},
		{[]int{784, 100}, 784, 100},
		{[]int{5, 5, 32, 64}, 800, 1600},
		{[]int{3, 32, 16}, 96, 48},
		{[]int{0, 10}, 1, 10},
	}
	for _, tc := range cases {
		if in, out := ops.GlorotFans(tc.shape); in != tc.fanIn || out != tc.fanO {
			t.Errorf("GlorotFans(%v) = %d, %d; want %d, %d", tc.shape, in, out, tc.fanIn, tc.fanO)
		}
	}
}

// stateMoments returns the mean, standard deviation, minimum and maximum.
func stateMoments(x *tensor.Tensor) (mean, stddev, lo, hi float64) {
	n := x.NumElements()
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range n {
		v := x.Float64At(i)
		mean += v
		lo, hi = min(lo, v), max(hi, v)
	}
	mean /= float64(n)
	for i := range n {
		d := x.Float64At(i) - mean
		stddev += d * d
	}
	return mean, math.Sqrt(stddev / float64(n)), lo, hi
}

func TestInitializerStatistics(t *testing.T) {
	glorot := math.Sqrt(2.0 / (800 + 1600)) // the Glorot standard deviation of a 5x5x32x64 kernel
	limit := math.Sqrt(6.0 / (800 + 1600))
	cases := []struct {
		name         string
		init         ops.Initializer
		dt           tensor.DType
		shape        []int
		mean, stddev float64
		lo, hi       float64 // bounds of every value
	}{
		{"normal", ops.RandomNormalInit(1, 2, 5), tensor.Float32, []int{100, 1000}, 1, 2, math.Inf(-1), math.Inf(1)},
		{"truncated", ops.TruncatedNormalInit(-1, 0.5, 5), tensor.Float64, []int{100000}, -1, 0.5 * 0.8796, -2, 0},
		{"uniform", ops.RandomUniformInit(-3, 5, 5), tensor.Float32, []int{1000, 100}, 1, 8 / math.Sqrt(12), -3, 5},
		{"glorot uniform", ops.GlorotUniformInit(5), tensor.Float32, []int{5, 5, 32, 64}, 0, limit / math.Sqrt(3), -limit, limit},
		{"glorot normal", ops.GlorotNormalInit(5), tensor.Float32, []int{5, 5, 32, 64}, 0, glorot, -2 * glorot / 0.8796, 2 * glorot / 0.8796},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope()
			v := ops.NewVariable(s, "v", tc.dt, tc.shape, tc.init)
			init := ops.GlobalVariablesInitializer(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			sess := stateRun2(t, s.Graph())
			sess.run(init)
			x := sess.fetch(v.Value())[0]
			if x.DType() != tc.dt || !x.StaticShape().Equal(tensor.MakeShape(tc.shape...)) {
				t.Fatalf("value is %v%v", x.DType(), x.StaticShape())
			}
			mean, stddev, lo, hi := stateMoments(x)
			if math.Abs(mean-tc.mean) > 0.02*tc.stddev+1e-9 || math.Abs(stddev-tc.stddev) > 0.02*tc.stddev {
				t.Errorf("mean %.5f stddev %.5f, want %.5f and %.5f", mean, stddev, tc.mean, tc.stddev)
			}
			if lo < tc.lo-1e-6 || hi > tc.hi+1e-6 {
				t.Errorf("values in [%g, %g], want within [%g, %g]", lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

// A seeded initializer gives the same values in two sessions, and the
// same again when the initializer runs a second time in a new session.
func TestInitializerDeterminism(t *testing.T) {
	for _, seed := range []int{3, 0} {
		s := graph.NewScope()
		v := ops.NewVariable(s, "v", tensor.Float32, []int{50, 50}, ops.GlorotNormalInit(seed))
		init := ops.GlobalVariablesInitializer(s)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		var vals []*tensor.Tensor
		for range 2 {
			sess := stateRun2(t, s.Graph())
			sess.run(init)
			vals = append(vals, sess.fetch(v.Value())[0])
		}
		if same := tensor.Equal(vals[0], vals[1]); same != (seed != 0) {
			t.Errorf("seed %d: two sessions gave equal values: %v", seed, same)
		}
	}
}
