package estimator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/estimator/strategytest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// meanOfModels is a collective strategy of a user's, written with
// exported parts only: each rank takes a step of its own, then the ranks
// replace the model's variables by their mean over the ring (local SGD
// averaging after every step).
type meanOfModels struct {
	mu    sync.Mutex
	steps []*meanStep
}

func (*meanOfModels) String() string { return "mean-of-models" }

func (*meanOfModels) Validate(c *cluster.Spec) error {
	if c == nil || c.NumTasks("worker") < 2 {
		return fmt.Errorf("mean-of-models: needs a cluster of 2 workers or more")
	}
	return nil
}

func (*meanOfModels) Update(n int) estimator.Update { return estimator.Update{Batches: n, Averaged: 1} }

func (*meanOfModels) Recovery() estimator.Recovery {
	return estimator.Recovery{RestartWorkers: true, ToleratesWorkerLoss: true}
}

func (m *meanOfModels) Replica(estimator.ReplicaInfo) (estimator.Replica, error) {
	return &estimator.RingReplica{Build: func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, gs *ops.Variable) (estimator.RingStep, error) {
		op, err := train.Minimize(s, opt, loss, gs)
		if err != nil {
			return nil, err
		}
		st := &meanStep{op: op, loss: loss, vars: vars}
		for _, v := range vars {
			ph := ops.Placeholder(s, "mean_of_"+v.Name(), tensor.Float32, v.Value().Shape())
			st.values = append(st.values, v.Value())
			st.feeds = append(st.feeds, ph)
			st.assigns = append(st.assigns, ops.Assign(s, v.Value(), ph).Node)
		}
		m.mu.Lock()
		m.steps = append(m.steps, st)
		m.mu.Unlock()
		return st, nil
	}}, nil
}

// meanStep is a rank's step of meanOfModels; it counts its calls.
type meanStep struct {
	op      *graph.Node
	loss    graph.Output
	vars    []*ops.Variable
	values  []graph.Output
	feeds   []graph.Output
	assigns []*graph.Node

	broadcasts, steps, restarts, finishes int
}

func (m *meanStep) Broadcast(ctx context.Context, sess *session.Session, ring train.AllReducer) error {
	m.broadcasts++
	return m.exchange(ctx, sess, func(name string, data []float32) error {
		return ring.Broadcast(ctx, name, -1, 0, data)
	})
}

func (m *meanStep) Restart() { m.restarts++ }

func (m *meanStep) Step(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, ring train.AllReducer, step int64, extra []graph.Output) (float64, []*tensor.Tensor, error) {
	out, err := sess.Run(ctx, feeds, append([]graph.Output{m.loss}, extra...), []*graph.Node{m.op})
	if err != nil {
		return 0, nil, err
	}
	m.steps++
	err = m.exchange(ctx, sess, func(name string, data []float32) error {
		return ring.AllReduceMean(ctx, name, step, data)
	})
	return out[0].Float64At(0), out[1:], err
}

func (m *meanStep) Finish(context.Context, *session.Session, train.AllReducer) error {
	m.finishes++
	return nil
}

func (m *meanStep) Describe() string { return "  mean of models" }

// exchange reads the variables, passes each through op and assigns the
// result.
func (m *meanStep) exchange(ctx context.Context, sess *session.Session, op func(name string, data []float32) error) error {
	vals, err := sess.Run(ctx, nil, m.values, nil)
	if err != nil {
		return err
	}
	feeds := map[graph.Output]*tensor.Tensor{}
	for i, v := range vals {
		data := append([]float32(nil), v.Float32s()...)
		if err := op(m.vars[i].Name(), data); err != nil {
			return err
		}
		t, err := tensor.FromSlice(data, v.Shape()...)
		if err != nil {
			return err
		}
		feeds[m.feeds[i]] = t
	}
	_, err = sess.Run(ctx, feeds, nil, m.assigns)
	return err
}

// TestUserRingStrategyTrainsThroughTheLoop: a collective strategy of a
// user's trains a ring of 2 workers through the shared loop: every rank
// broadcasts, steps and finishes through its RingStep, and the model
// trains.
func TestUserRingStrategyTrainsThroughTheLoop(t *testing.T) {
	s := &meanOfModels{}
	est, results := strategytest.Cluster{Model: linearModel, Jobs: map[string]int{"worker": 2}, Strategy: s, Steps: 300}.Run(t)
	for _, res := range results {
		if res.Strategy != "mean-of-models" || res.GlobalStep != 300 {
			t.Errorf("%s: strategy %q at global step %d; want mean-of-models at 300", res.Task, res.Strategy, res.GlobalStep)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.steps) != 2 {
		t.Fatalf("%d steps built; want one per rank", len(s.steps))
	}
	for i, st := range s.steps {
		if st.broadcasts == 0 || st.steps == 0 || st.finishes != 1 {
			t.Errorf("rank step %d: %d broadcasts, %d steps, %d finishes; want some, some, 1", i, st.broadcasts, st.steps, st.finishes)
		}
	}
	m, err := est.Evaluate(context.Background(), linearInput(200, false))
	if err != nil {
		t.Fatal(err)
	}
	if m["mae"] > 0.1 {
		t.Errorf("mean absolute error %.4f after training; want < 0.1", m["mae"])
	}
}

// A user's collective strategy passes the strategies' conformance suite.
func TestUserRingStrategyConforms(t *testing.T) {
	strategytest.Run(t, &meanOfModels{}, map[string]int{"worker": 2})
}
