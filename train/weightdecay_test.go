package train_test

import (
	"math"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestWeightDecay: each update first shrinks the variable by the learning
// rate times the decay of itself (decoupled, as AdamW), then applies the
// optimizer's own step: a variable without gradient only shrinks, under
// gradient descent and Adam alike; with a gradient, gradient descent gives
// PyTorch's SGD with weight_decay.
func TestWeightDecay(t *testing.T) {
	const lr, wd = 0.1, 0.5
	for _, opt := range []train.Optimizer{train.NewGradientDescent(lr), train.NewAdam(lr, 0.9, 0.999, 1e-8)} {
		s := graph.NewScope()
		w := ops.NewVariable(s, "w", tensor.Float32, []int{1}, ops.OnesInit()) // gradient 2 (loss 2w)
		u := ops.NewVariable(s, "u", tensor.Float32, []int{1}, ops.OnesInit()) // no gradient: the loss ignores it
		loss := ops.AddN(s, ops.Sum(s, ops.Mul(s, w.Value(), ops.Const(s, []float32{2})), nil, false),
			ops.Mul(s, ops.Sum(s, u.Value(), nil, false), ops.Scalar(s, tensor.Float32, 0)))
		if err := train.SetWeightDecay(train.ClipByGlobalNorm{Optimizer: opt, MaxNorm: 100}, wd); err != nil { // through a wrapper
			t.Fatal(err)
		}
		step, err := train.Minimize(s, opt, loss, train.CreateGlobalStep(s))
		if err != nil {
			t.Fatal(err)
		}
		out := runSteps(t, s, step, 3, w.Value(), u.Value())
		if got, want := out[1].Float64At(0), math.Pow(1-lr*wd, 3); math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: u = %v after 3 steps, want %v (decay alone)", opt.Name(), got, want)
		}
		if _, sgd := opt.(*train.GradientDescent); sgd {
			want := 1.0
			for range 3 {
				want -= lr * (2 + wd*want)
			}
			if got := out[0].Float64At(0); math.Abs(got-want) > 1e-6 {
				t.Errorf("w = %v, want %v (SGD with weight_decay)", got, want)
			}
		}
	}
	if err := train.SetWeightDecay(train.NewAdam(0.1, 0.9, 0.999, 1e-8), -1); err == nil {
		t.Error("a negative weight decay was accepted")
	}
}
