package estimator_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// countingHook counts its calls, fetches a tensor it adds in Begin, and
// asks to stop at stopAt, or fails there when fail is set.
type countingHook struct {
	begin, created, before, after, end int
	stopAt                             int64
	fail                               error
	extra                              graph.Output
	fetched                            float64
}

func (h *countingHook) Begin(s *graph.Scope) error {
	h.begin++
	h.extra = ops.Scalar(s, tensor.Float32, 42)
	return nil
}

func (h *countingHook) AfterCreateSession(context.Context, *session.Session) error {
	h.created++
	return nil
}

func (h *countingHook) BeforeRun(context.Context, *train.StepContext) ([]graph.Output, error) {
	h.before++
	return []graph.Output{h.extra}, nil
}

func (h *countingHook) AfterRun(_ context.Context, step *train.StepContext, extra []*tensor.Tensor) error {
	h.after++
	h.fetched = extra[0].Float64At(0)
	if step.LocalStep == h.stopAt {
		if h.fail != nil {
			return h.fail
		}
		step.RequestStop()
	}
	return nil
}

func (h *countingHook) End(context.Context, *train.MonitoredSession) error {
	h.end++
	return nil
}

func TestHooksSeeEveryPhase(t *testing.T) {
	ctx := context.Background()
	est, err := estimator.New(linearModel, estimator.RunConfig{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	h := &countingHook{stopAt: 30}
	res, err := est.Train(ctx, linearInput(100, true), estimator.Stop{MaxSteps: 1000}, h)
	if err != nil {
		t.Fatal(err)
	}
	if h.begin != 1 || h.created != 1 || h.before != 30 || h.after != 30 || h.end != 1 || h.fetched != 42 {
		t.Errorf("hook calls %+v; want begin, created and end once, 30 steps, the extra fetch 42", *h)
	}
	if res.LocalSteps != 30 {
		t.Errorf("trained %d steps; the hook asked to stop after 30", res.LocalSteps)
	}

	boom := errors.New("boom")
	failing := &countingHook{stopAt: 5, fail: boom}
	if _, err := est.Train(ctx, linearInput(100, true), estimator.Stop{MaxSteps: 1000}, failing); !errors.Is(err, boom) {
		t.Errorf("a hook's AfterRun error: training returned %v; want it", err)
	}
}
