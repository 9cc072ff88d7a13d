package estimator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/train"
	"github.com/distflow/distflow/worker"
)

// TestPermanentIsTheTasksOwnFailure: the errors that a restart would meet
// again are the task's own kernels' and input's, never a peer's, a cut's
// or a lost task's.
func TestPermanentIsTheTasksOwnFailure(t *testing.T) {
	node := func(err error) error {
		return fmt.Errorf("master: step 7: %w", &kernel.NodeError{Err: err})
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{node(errors.New("indices[0] = 5 is out of range [0, 1)")), true},
		{fmt.Errorf("step 3: %w", errors.Join(estimator.ErrInputEnded, io.EOF)), true},
		{fmt.Errorf("step 3: %w", train.ErrNaNLoss), true},
		{node(context.Canceled), false},
		{node(context.DeadlineExceeded), false},
		{node(kernel.ErrUninitialized), false},
		{node(kernel.ErrNonFiniteWrite), false},
		{node(fmt.Errorf("recv: %w", worker.ErrUnavailable)), false},
		{node(&rpc.RemoteError{Peer: "/job:ps/task:0", Method: "RunGraph", Msg: "kernel: node Gather: out of range"}), false},
		{errors.New("connection refused"), false},
		{nil, false},
	} {
		if got := estimator.Permanent(tc.err); got != tc.want {
			t.Errorf("Permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestAWorkersOwnStepFailureIsPermanent: a worker of a synchronous cluster
// on parameter servers whose own step cannot compute ends with an error
// that Permanent recognises, so that its launcher stops the run rather
// than restarting it, or going on without it, for ever.
func TestAWorkersOwnStepFailureIsPermanent(t *testing.T) {
	c := newElasticCluster(t, map[string]int{"ps": 1, "worker": 2}, estimator.RunConfig{
		Strategy: estimator.Sync{}, StepTimeout: 20 * time.Second, WaitTimeout: 20 * time.Second})
	odd := cluster.TaskID{Job: "worker", Index: 1}
	c.models = map[cluster.TaskID]estimator.ModelFn{odd: outOfRangeModel}
	for _, task := range []cluster.TaskID{{Job: "ps"}, {Job: "worker"}, odd} {
		c.start(task, 50)
	}
	errs := c.wait()
	if err := errs[odd]; err == nil || !estimator.Permanent(err) {
		t.Errorf("%s: %v; want the gather's error, permanent", odd, err)
	}
	for task, err := range errs {
		if task != odd && estimator.Permanent(err) {
			t.Errorf("%s: %v is permanent; only %s's own step failed", task, err, odd)
		}
	}
}
