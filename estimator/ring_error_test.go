package estimator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/estimator/strategytest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestRingEndsOnAStepItCannotCompute: a step that fails in a rank's own
// computation (here a gather out of range, as a label out of range would)
// fails again in every view at the same input position: the ring ends
// training at once with the kernel's error, as the strategies on
// parameter servers do, rather than re-form for ever, a step deadline
// each time.
func TestRingEndsOnAStepItCannotCompute(t *testing.T) {
	for _, strategy := range []estimator.Strategy{estimator.AllReduce{}, estimator.Averaging{Every: 3}} {
		t.Run(strategy.String(), func(t *testing.T) {
			const stepTimeout = 20 * time.Second
			c := newElasticCluster(t, map[string]int{"worker": 2}, estimator.RunConfig{
				Strategy: strategy, StepTimeout: stepTimeout, WaitTimeout: 30 * time.Second, LostAfter: time.Second,
			})
			c.models = map[cluster.TaskID]estimator.ModelFn{}
			start := time.Now()
			for i := range 2 {
				rank := cluster.TaskID{Job: "worker", Index: i}
				c.models[rank] = outOfRangeModel
				c.start(rank, 100)
			}
			errs := c.wait()
			if d := time.Since(start); d > stepTimeout/2 {
				t.Errorf("the ring took %v to end; want well within the step deadline %v", d, stepTimeout)
			}
			for task, err := range errs {
				if err == nil || !strings.Contains(err.Error(), "out of range") {
					t.Errorf("%s: %v; want the gather's error", task, err)
				}
			}
			if t.Failed() {
				t.Logf("%s", c.logs.String())
			}
		})
	}
}

// outOfRangeModel is strategytest.LinearModel whose training step also
// gathers index 5 of a vector of 1: a step that fails in the task's own
// computation, as a label out of range does.
func outOfRangeModel(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	spec, err := strategytest.LinearModel(s, f, labels, mode)
	if err != nil || mode != estimator.Train {
		return spec, err
	}
	bad := ops.Gather(s, ops.Const(s, tensor.MustFromSlice([]float32{0}, 1)), ops.Const(s, tensor.MustFromSlice([]int32{5}, 1)), 0)
	spec.Loss = ops.Add(s, spec.Loss, ops.Sum(s, bad, nil, false))
	return spec, nil
}

// TestRingEndsOnANonFiniteLoss: ranks whose loss, and so gradients, are
// NaN end training with ErrNaNLoss, as the ps strategies' NaN guard does,
// rather than re-form the ring round gradients it refuses.
func TestRingEndsOnANonFiniteLoss(t *testing.T) {
	nanModel := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		spec, err := strategytest.LinearModel(s, f, labels, mode)
		if err != nil || mode != estimator.Train {
			return spec, err
		}
		spec.Loss = ops.Mul(s, spec.Loss, ops.Sqrt(s, ops.Const(s, float32(-1))))
		return spec, nil
	}
	const stepTimeout = 20 * time.Second
	c := newElasticCluster(t, map[string]int{"worker": 2}, estimator.RunConfig{
		Strategy: estimator.AllReduce{}, StepTimeout: stepTimeout, WaitTimeout: 30 * time.Second, LostAfter: time.Second,
	})
	c.models = map[cluster.TaskID]estimator.ModelFn{}
	start := time.Now()
	for i := range 2 {
		rank := cluster.TaskID{Job: "worker", Index: i}
		c.models[rank] = nanModel
		c.start(rank, 100)
	}
	for task, err := range c.wait() {
		if !errors.Is(err, train.ErrNaNLoss) {
			t.Errorf("%s: %v; want ErrNaNLoss", task, err)
		}
	}
	if d := time.Since(start); d > stepTimeout/2 {
		t.Errorf("the ring took %v to end; want well within the step deadline %v", d, stepTimeout)
	}
	if t.Failed() {
		t.Logf("%s", c.logs.String())
	}
}
