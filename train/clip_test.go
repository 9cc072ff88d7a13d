package train_test

import (
	"math"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestClipGradients: gradients whose global norm is over the limit are
// scaled to it, in one direction; under it they are left as they are; a
// sparse gradient (embedding rows) is clipped as its values and stays
// sparse.
func TestClipGradients(t *testing.T) {
	for _, c := range []struct {
		max  float32
		want float64 // the norm after clipping
	}{{1, 1}, {100, math.Sqrt(194)}} { // the gradients: 3, 4, 12 and a row of 5
		s := graph.NewScope()
		w := ops.NewVariable(s, "w", tensor.Float32, []int{2}, ops.ZerosInit())
		v := ops.NewVariable(s, "v", tensor.Float64, []int{1}, ops.ZerosInit())
		emb := ops.NewVariable(s, "emb", tensor.Float32, []int{4, 1}, ops.ZerosInit())
		// loss = 3 w0 + 4 w1 + 12 v + 5 emb[2]: gradients (3, 4), 12, and a
		// sparse gradient of emb's row 2, 5: the global norm is sqrt(194).
		rows := ops.Gather(s, emb.Value(), ops.Const(s, []int32{2}), 0)
		loss := ops.AddN(s,
			ops.Sum(s, ops.Mul(s, w.Value(), ops.Const(s, []float32{3, 4})), nil, false),
			ops.Cast(s, ops.Sum(s, ops.Mul(s, v.Value(), ops.Const(s, []float64{12})), nil, false), tensor.Float32),
			ops.Mul(s, ops.Sum(s, rows, nil, false), ops.Scalar(s, tensor.Float32, 5)))
		gvs, err := train.NewGradientDescent(1).ComputeGradients(s, loss, nil)
		if err != nil {
			t.Fatal(err)
		}
		clipped, err := train.ClipGradients(s, gvs, c.max)
		if err != nil {
			t.Fatal(err)
		}
		var fetches []graph.Output
		var sparse graph.Output
		for _, gv := range clipped {
			fetches = append(fetches, gv.Grad)
			if gv.Sparse != nil {
				sparse = gv.Sparse.Values
			}
		}
		if !sparse.Valid() {
			t.Fatal("the embedding's gradient lost its sparse form")
		}
		fetches = append(fetches, sparse)
		out := runSteps(t, s, nil, 0, fetches...)
		norm2 := 0.0
		got := map[string][]float64{}
		for i, gv := range clipped {
			for j := range out[i].NumElements() {
				x := out[i].Float64At(j)
				norm2 += x * x
				got[gv.Var.Name()] = append(got[gv.Var.Name()], x)
			}
		}
		if rowGrad := out[len(clipped)].Float64At(0); math.Abs(rowGrad-got["emb"][2]) > 1e-6 || math.Abs(rowGrad/got["w"][0]-5.0/3) > 1e-6 {
			t.Errorf("max %v: the sparse row's value %v, the dense %v", c.max, rowGrad, got)
		}
		if math.Abs(math.Sqrt(norm2)-c.want) > 1e-5 {
			t.Errorf("max %v: the clipped gradients' norm is %v, want %v (%v)", c.max, math.Sqrt(norm2), c.want, got)
		}
		if r := got["w"][1] / got["w"][0]; math.Abs(r-4.0/3) > 1e-6 || math.Abs(got["v"][0]/got["w"][0]-4) > 1e-6 {
			t.Errorf("max %v: the direction changed: %v", c.max, got)
		}
	}
	if _, err := train.ClipGradients(graph.NewScope(), nil, 0); err == nil {
		t.Error("a maximum norm of 0 was accepted")
	}
}

// TestClipByGlobalNormTrains: a step far too large for the quadratic
// diverges without clipping and converges with it.
func TestClipByGlobalNormTrains(t *testing.T) {
	for _, clip := range []bool{false, true} {
		s := graph.NewScope()
		w, loss := quadratic(s, tensor.Float32)
		var opt train.Optimizer = train.NewGradientDescent(1.5) // |1 - 2*1.5| > 1: diverges
		if clip {
			opt = train.ClipByGlobalNorm{Optimizer: opt, MaxNorm: 0.5}
		}
		trainOp, err := train.Minimize(s, opt, loss, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := runSteps(t, s, trainOp, 200, w.Value(), loss)
		if l := out[1].Float64At(0); clip != (l < 1) {
			t.Errorf("clip %v: loss %v after 200 steps (w %v)", clip, l, out[0])
		}
	}
}

// TestClipByGlobalNormKeepsTheSchedule: a learning-rate schedule given to
// the clipping optimizer is the wrapped one's, and the run's length
// reaches it (the estimator's ScheduleOverRun).
func TestClipByGlobalNormKeepsTheSchedule(t *testing.T) {
	inner := train.NewAdam(0.1, 0.9, 0.999, 1e-8)
	clip := train.ClipByGlobalNorm{Optimizer: inner, MaxNorm: 1}
	if err := train.SetSchedule(clip, train.LinearDecay{Final: 0.1}); err != nil {
		t.Fatal(err)
	}
	if err := train.ScheduleOverRun(clip, 500); err != nil {
		t.Fatal(err)
	}
	if got, ok := train.ScheduleOf(inner).(train.LinearDecay); !ok || got.Steps != 500 || got.Final != 0.1 {
		t.Errorf("the wrapped optimizer's schedule: %#v, want a linear decay to 0.1 over 500 steps", train.ScheduleOf(inner))
	}
	if train.ScheduleOf(clip) != train.ScheduleOf(inner) {
		t.Error("the clipping optimizer reports another schedule than the one it wraps")
	}
}
