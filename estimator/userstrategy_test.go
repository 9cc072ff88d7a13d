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
)

// countingStrategy is a user's strategy: asynchronous training whose
// coordinator counts its calls on each replica and adds a node of its own
// to the graph.
type countingStrategy struct {
	mu    sync.Mutex
	coord map[int]*countingCoordinator
}

func (*countingStrategy) String() string                 { return "counting" }
func (*countingStrategy) Validate(c *cluster.Spec) error { return estimator.Async{}.Validate(c) }
func (*countingStrategy) Update(n int) estimator.Update  { return estimator.Async{}.Update(n) }
func (*countingStrategy) Recovery() estimator.Recovery   { return estimator.Async{}.Recovery() }
func (s *countingStrategy) coordinator(i int) *countingCoordinator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coord[i]
}

func (s *countingStrategy) Replica(info estimator.ReplicaInfo) (estimator.Replica, error) {
	c := &countingCoordinator{}
	s.mu.Lock()
	s.coord[info.Index] = c
	s.mu.Unlock()
	return &estimator.PSReplica{Coordinator: c, Build: func(sc *graph.Scope) {
		c.seven = ops.Scalar(sc, tensor.Float32, 7)
	}}, nil
}

type countingCoordinator struct {
	seven                            graph.Output
	read                             float64
	begin, before, after, done, ends int
}

func (c *countingCoordinator) Begin(ctx context.Context, sess *session.Session) (func(context.Context), error) {
	c.begin++
	out, err := sess.Run(ctx, nil, []graph.Output{c.seven}, nil)
	if err != nil {
		return nil, err
	}
	c.read = out[0].Float64At(0)
	return func(context.Context) { c.ends++ }, nil
}

func (c *countingCoordinator) BeforeStep(context.Context, *session.Session) error {
	if c.before != c.after {
		return fmt.Errorf("BeforeStep %d times, AfterStep %d", c.before, c.after)
	}
	c.before++
	return nil
}

func (c *countingCoordinator) AfterStep(context.Context, *session.Session) error {
	c.after++
	return nil
}

func (c *countingCoordinator) Done(context.Context, *session.Session) error {
	c.done++
	return nil
}

// TestUserStrategyTrainsThroughTheLoop: a strategy of a user's, outside
// the package, trains on a cluster through the shared loop: its
// coordinator sees every replica begin, each step and the end, the
// chief's end function runs once, its graph node is built, the user's
// hooks run, and the model trains.
func TestUserStrategyTrainsThroughTheLoop(t *testing.T) {
	s := &countingStrategy{coord: map[int]*countingCoordinator{}}
	var mu sync.Mutex
	hooks := map[string]*countingHook{}
	est, results := strategytest.Cluster{Model: linearModel, Jobs: map[string]int{"ps": 1, "worker": 2}, Strategy: s, Steps: 300,
		Task: func(task cluster.TaskID, _ *estimator.RunConfig) []estimator.Hook {
			mu.Lock()
			defer mu.Unlock()
			h := &countingHook{}
			hooks[task.String()] = h
			return []estimator.Hook{h}
		}}.Run(t)
	for _, res := range results {
		if res.Served {
			continue
		}
		if res.Strategy != "counting" {
			t.Errorf("%s: strategy %q", res.Task, res.Strategy)
		}
		if h := hooks[res.Task]; h.after != res.LocalSteps || h.end != 1 {
			t.Errorf("%s: hook %+v for %d steps", res.Task, *h, res.LocalSteps)
		}
	}
	for i := range 2 {
		c := s.coordinator(i)
		if c == nil {
			t.Fatalf("replica %d: no coordinator", i)
		}
		wantEnds := 0
		if i == 0 {
			wantEnds = 1 // the chief's
		}
		if c.begin != 1 || c.done != 1 || c.before == 0 || c.before != c.after || c.ends != wantEnds || c.read != 7 {
			t.Errorf("replica %d: coordinator %+v; want begin and done once, as many BeforeStep as AfterStep, %d ends, its node read as 7", i, *c, wantEnds)
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

// A user's strategy passes the strategies' conformance suite.
func TestUserStrategyConforms(t *testing.T) {
	strategytest.Run(t, &countingStrategy{coord: map[int]*countingCoordinator{}}, map[string]int{"ps": 1, "worker": 2})
}
