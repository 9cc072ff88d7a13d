package train_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

var target = []float64{1, -2, 3, 0.5}

// quadratic builds loss = sum((w - target)^2) for a variable w starting at
// zero, with an unrelated trainable variable that the loss ignores.
func quadratic(s *graph.Scope, dt tensor.DType) (w *ops.Variable, loss graph.Output) {
	w = ops.NewVariable(s, "w", dt, []int{len(target)}, ops.ZerosInit())
	ops.NewVariable(s, "unused", dt, []int{2}, ops.OnesInit())
	t := tensor.New(dt, len(target))
	for i, v := range target {
		t.SetFloat64At(i, v)
	}
	return w, ops.Sum(s, ops.Square(s, ops.Sub(s, w.Value(), ops.Const(s, t))), nil, false)
}

// runSteps initialises the variables of s's graph in a new session, runs
// step (if not nil) n times, and returns fetches.
func runSteps(t *testing.T, s *graph.Scope, step *graph.Node, n int, fetches ...graph.Output) []*tensor.Tensor {
	t.Helper()
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
	for range n {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{step}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sess.Run(ctx, nil, fetches, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOptimizersMinimizeAQuadratic(t *testing.T) {
	cases := []struct {
		opt   train.Optimizer
		dt    tensor.DType
		steps int
		slots []string
	}{
		{train.NewGradientDescent(0.1), tensor.Float32, 100, nil},
		{train.NewGradientDescent(0.1), tensor.Float64, 100, nil},
		{train.NewMomentum(0.02, 0.9, false), tensor.Float32, 300, []string{"w/Momentum"}},
		{train.NewMomentum(0.02, 0.9, true), tensor.Float64, 300, []string{"w/Momentum"}},
		{train.NewAdagrad(0.5, 0.1), tensor.Float32, 300, []string{"w/Adagrad"}},
		{train.NewRMSProp(0.02, 0.9, 0, 1e-10), tensor.Float32, 400, []string{"w/RMSProp_ms", "w/RMSProp_mom"}},
		{train.NewRMSProp(0.01, 0.9, 0.5, 1e-10), tensor.Float64, 400, []string{"w/RMSProp_ms", "w/RMSProp_mom"}},
		{train.NewAdam(0.1, 0.9, 0.999, 1e-8), tensor.Float32, 300,
			[]string{"w/Adam_m", "w/Adam_v", "w/Adam_beta1_power", "w/Adam_beta2_power"}},
		{train.NewAdam(0.1, 0.9, 0.999, 1e-8), tensor.Float64, 300,
			[]string{"w/Adam_m", "w/Adam_v", "w/Adam_beta1_power", "w/Adam_beta2_power"}},
	}
	for _, tc := range cases {
		t.Run(tc.opt.Name()+"/"+tc.dt.String(), func(t *testing.T) {
			s := graph.NewScope()
			w, loss := quadratic(s, tc.dt)
			step := train.CreateGlobalStep(s)
			trainOp, err := train.Minimize(s, tc.opt, loss, step)
			if err != nil {
				t.Fatal(err)
			}
			init := ops.GlobalVariablesInitializer(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			var slots []string
			for _, v := range ops.GlobalVariables(s.Graph()) {
				if strings.HasPrefix(v.Name(), "w/") {
					slots = append(slots, v.Name())
				}
			}
			if strings.Join(slots, ",") != strings.Join(tc.slots, ",") {
				t.Errorf("slots %v, want %v", slots, tc.slots)
			}
			for _, v := range ops.TrainableVariables(s.Graph()) {
				if v.Name() != "w" && v.Name() != "unused" {
					t.Errorf("%s is trainable", v.Name())
				}
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
			for range tc.steps {
				if _, err := sess.Run(ctx, nil, nil, []*graph.Node{trainOp}); err != nil {
					t.Fatal(err)
				}
			}
			out, err := sess.Run(ctx, nil, []graph.Output{w.Value(), step.Value(), loss}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range target {
				if got := out[0].Float64At(i); math.Abs(got-want) > 0.02 {
					t.Errorf("w = %v after %d steps (loss %v), want %v", out[0], tc.steps, out[2], target)
					break
				}
			}
			if got := out[1].Int64s()[0]; got != int64(tc.steps) {
				t.Errorf("global step = %d, want %d", got, tc.steps)
			}
		})
	}
}

func TestApplyGradientsPlacesUpdatesWithTheirVariables(t *testing.T) {
	s := graph.NewScope()
	ps := s.WithDevice("/job:ps/task:1")
	w := ops.NewVariable(ps, "w", tensor.Float32, []int{3}, ops.ZerosInit())
	step := train.CreateGlobalStep(s.WithDevice("/job:ps/task:0"))
	worker := s.WithDevice("/job:worker/task:0")
	loss := ops.Sum(worker, ops.Square(worker, w.Value()), nil, false)
	trainOp, err := train.Minimize(worker, train.NewAdam(0.1, 0.9, 0.999, 1e-8), loss, step)
	if err != nil {
		t.Fatal(err)
	}
	if trainOp.Name() != "Adam/update" {
		t.Errorf("train op %s, want Adam/update", trainOp.Name())
	}
	for _, n := range s.Graph().Nodes() {
		switch {
		case n.Op() == "ApplyAdam", strings.HasPrefix(n.Name(), "w/"):
			if n.Device() != "/job:ps/task:1" {
				t.Errorf("%s is on %q, want w's device", n, n.Device())
			}
		case n.Op() == "AssignAdd":
			if n.Device() != "/job:ps/task:0" {
				t.Errorf("%s is on %q, want the global step's device", n, n.Device())
			}
			if len(n.ControlInputs()) != 3 {
				t.Errorf("the global step increment waits for %d nodes, want 3 (ApplyAdam and the power updates)", len(n.ControlInputs()))
			}
		}
	}
	if gs := train.GlobalStep(s.Graph()); gs == nil || gs.Name() != "global_step" || gs.Initializer() == nil {
		t.Errorf("GlobalStep = %v", gs)
	}
	if train.CreateGlobalStep(s); s.Err() == nil || !strings.Contains(s.Err().Error(), "already") {
		t.Errorf("a second global step: %v", s.Err())
	}
}

func TestOptimizerErrors(t *testing.T) {
	cases := []struct {
		name  string
		build func(s *graph.Scope) error
		want  string
	}{
		{"no variables", func(s *graph.Scope) error {
			_, err := train.Minimize(s, train.NewGradientDescent(0.1), ops.Const(s, float32(1)), nil)
			return err
		}, "no variables"},
		{"no gradient", func(s *graph.Scope) error {
			ops.NewVariable(s, "v", tensor.Float32, []int{1}, ops.ZerosInit())
			_, err := train.Minimize(s, train.NewGradientDescent(0.1), ops.Const(s, float32(1)), nil)
			return err
		}, "no variable has a gradient"},
		{"bad beta", func(s *graph.Scope) error {
			_, loss := quadratic(s, tensor.Float32)
			_, err := train.Minimize(s, train.NewAdam(0.1, 1, 0.999, 1e-8), loss, nil)
			return err
		}, "beta1"},
		{"bad accumulator", func(s *graph.Scope) error {
			_, loss := quadratic(s, tensor.Float32)
			_, err := train.Minimize(s, train.NewAdagrad(0.1, 0), loss, nil)
			return err
		}, "initial accumulator"},
		{"nothing to apply", func(s *graph.Scope) error {
			_, err := train.NewMomentum(0.1, 0.9, false).ApplyGradients(s, nil, nil)
			return err
		}, "no gradients"},
	}
	for _, tc := range cases {
		err := tc.build(graph.NewScope())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestNewOptimizer(t *testing.T) {
	for name, want := range map[string]string{"sgd": "GradientDescent", "Momentum": "Momentum",
		"adagrad": "Adagrad", " rmsprop ": "RMSProp", "ADAM": "Adam", "ftrl": "Ftrl"} {
		opt, err := train.NewOptimizer(name, 0.01)
		if err != nil || opt.Name() != want {
			t.Errorf("NewOptimizer(%q) = %v, %v; want %s", name, opt, err, want)
		}
	}
	_, err := train.NewOptimizer("lbfgs", 0.01)
	if err == nil || !strings.Contains(err.Error(), "lbfgs") || !strings.Contains(err.Error(), "adagrad, adam, ftrl, momentum, rmsprop, sgd") {
		t.Errorf("unknown optimizer: %v", err)
	}
}
