package train_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

func TestLinearDecayFactor(t *testing.T) {
	d := train.LinearDecay{Steps: 4, Final: 0.2}
	for step, want := range map[int64]float64{-1: 1, 0: 1, 1: 0.8, 2: 0.6, 4: 0.2, 9: 0.2} {
		if got := d.Factor(step); math.Abs(got-want) > 1e-7 { // its parameters are float32, as TensorFlow's
			t.Errorf("Factor(%d) = %v; want %v", step, got, want)
		}
	}
}

// TestScheduleFactors: each schedule's factors, by hand.
func TestScheduleFactors(t *testing.T) {
	for _, c := range []struct {
		sch  train.Schedule
		want map[int64]float64
	}{
		{train.CosineDecay{Steps: 5, Final: 0.2, Warmup: 2}, map[int64]float64{0: 0.5, 1: 1, 2: 1, 3: 0.8, 5: 0.2, 9: 0.2}},
		{train.CosineDecay{Steps: 4}, map[int64]float64{0: 1, 2: 0.5, 4: 0}},
		{train.LinearDecay{Steps: 6, Warmup: 2}, map[int64]float64{0: 0.5, 1: 1, 2: 1, 4: 0.5, 6: 0}},
		{train.ExponentialDecay{Rate: 0.5, Every: 2}, map[int64]float64{0: 1, 1: math.Sqrt(0.5), 2: 0.5, 4: 0.25}},
		{train.ExponentialDecay{Rate: 0.5, Every: 2, Staircase: true, Warmup: 1}, map[int64]float64{0: 1, 1: 1, 2: 1, 3: 0.5, 5: 0.25}},
	} {
		for step, want := range c.want {
			if got := c.sch.Factor(step); math.Abs(got-want) > 1e-7 {
				t.Errorf("%#v: Factor(%d) = %v, want %v", c.sch, step, got, want)
			}
		}
	}
}

// TestScheduleScalesEveryStep: a variable w with loss w has gradient 1, so
// each step of gradient descent moves it by the learning rate it was given:
// the schedule's factor at the global step before the step, in float32 and
// float64 variables, restored or not.
func TestScheduleScalesEveryStep(t *testing.T) {
	for _, sch := range []train.Schedule{
		train.LinearDecay{Steps: 4, Final: 0.1},
		train.CosineDecay{Steps: 5, Final: 0.2, Warmup: 2},
		train.ExponentialDecay{Rate: 0.5, Every: 2},
		train.ExponentialDecay{Rate: 0.5, Every: 2, Staircase: true, Warmup: 1},
	} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			testScheduleScales(t, sch, dt)
		}
	}
}

func testScheduleScales(t *testing.T, sch train.Schedule, dt tensor.DType) {
	t.Run(fmt.Sprintf("%#v/%v", sch, dt), func(t *testing.T) {
		const lr = 0.5
		s := graph.NewScope()
		w := ops.NewVariable(s, "w", dt, nil, ops.ZerosInit())
		gs := train.CreateGlobalStep(s)
		opt := train.NewGradientDescent(lr)
		if err := train.SetSchedule(opt, sch); err != nil {
			t.Fatal(err)
		}
		op, err := train.Minimize(s, opt, w.Value(), gs)
		if err != nil {
			t.Fatal(err)
		}
		init := ops.GlobalVariablesInitializer(s)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		sess, err := session.New(s.Graph())
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		ctx := context.Background()
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			t.Fatal(err)
		}
		want := 0.0
		for step := range int64(6) {
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{op}); err != nil {
				t.Fatal(err)
			}
			want -= lr * sch.Factor(step)
			out, err := sess.Run(ctx, nil, []graph.Output{w.Value()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Float64At(0); math.Abs(got-want) > 1e-6 {
				t.Fatalf("after step %d: w = %v; want %v (the rates of the schedule so far)", step+1, got, want)
			}
		}
	})
}

func TestScheduleRefusals(t *testing.T) {
	for _, tc := range []struct {
		sch  train.Schedule
		want string
	}{
		{train.LinearDecay{Steps: -1}, "steps must be positive"},
		{train.LinearDecay{Steps: 10, Final: 1.5}, "must be in [0, 1]"},
		{train.LinearDecay{Steps: 10, Final: math.NaN()}, "must be in [0, 1]"},
	} {
		if err := train.SetSchedule(train.NewAdam(0.1, 0.9, 0.999, 1e-8), tc.sch); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetSchedule(%+v): %v; want an error saying %q", tc.sch, err, tc.want)
		}
	}
	sync := train.NewSyncReplicas(train.NewGradientDescent(0.1), 2, 2)
	if err := train.SetSchedule(sync, train.LinearDecay{Steps: 10}); err == nil || !strings.Contains(err.Error(), "takes no learning-rate schedule") {
		t.Errorf("SetSchedule on a wrapper: %v; want a refusal", err)
	}
	// A decay of no length left unset (the estimator sets it).
	unset := graph.NewScope()
	v := ops.NewVariable(unset, "w", tensor.Float32, nil, ops.ZerosInit())
	gd := train.NewGradientDescent(0.1)
	if err := train.SetSchedule(gd, train.LinearDecay{}); err != nil {
		t.Fatal(err)
	}
	if _, err := train.Minimize(unset, gd, v.Value(), train.CreateGlobalStep(unset)); err == nil || !strings.Contains(err.Error(), "set its Steps") {
		t.Errorf("a decay over 0 steps: %v; want an error saying to set them", err)
	}
	// Without a global step there is no step to read.
	s := graph.NewScope()
	w := ops.NewVariable(s, "w", tensor.Float32, nil, ops.ZerosInit())
	opt := train.NewGradientDescent(0.1)
	opt.Schedule = train.LinearDecay{Steps: 10}
	if _, err := train.Minimize(s, opt, w.Value(), nil); err == nil || !strings.Contains(err.Error(), "needs the graph's global step") {
		t.Errorf("a schedule without a global step: %v; want an error naming it", err)
	}
}

func TestParseSchedule(t *testing.T) {
	for spec, want := range map[string]train.Schedule{
		"":                                nil,
		"none":                            nil,
		"linear":                          train.LinearDecay{},
		"linear,end=0.05":                 train.LinearDecay{Final: 0.05},
		"linear,steps=300,end=0":          train.LinearDecay{Steps: 300},
		"linear,warmup=10":                train.LinearDecay{Warmup: 10},
		"cosine,end=0.1,warmup=5":         train.CosineDecay{Final: 0.1, Warmup: 5},
		"exponential,rate=0.5,every=100":  train.ExponentialDecay{Rate: 0.5, Every: 100},
		"step,every=30,rate=0.1,warmup=3": train.ExponentialDecay{Rate: 0.1, Every: 30, Staircase: true, Warmup: 3},
	} {
		got, err := train.ParseSchedule(spec)
		if err != nil || got != want {
			t.Errorf("ParseSchedule(%q) = %v, %v; want %v", spec, got, err, want)
		}
	}
	for spec, says := range map[string]string{
		"cosin":                        "want none, linear",
		"linear,end=2":                 "must be in [0, 1]",
		"linear,end=x":                 "end=x",
		"linear,steps=-5":              "must be positive",
		"linear,speed=10":              "unknown parameter",
		"none,end=0.1":                 "none takes no end",
		"cosine,rate=0.5":              "cosine takes no rate",
		"cosine,steps=10,warmup=10":    "within its warm-up",
		"linear,warmup=-1":             "must not be negative",
		"exponential,rate=0.5":         "needs rate=R and every=N",
		"step,rate=2,every=10":         "must be in (0, 1]",
		"exponential,rate=0.5,every=0": "must be positive",
	} {
		if _, err := train.ParseSchedule(spec); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseSchedule(%q): %v; want an error saying %q", spec, err, says)
		}
	}
}
