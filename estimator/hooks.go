package estimator

import (
	"context"
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// What every strategy's replica does around its steps, whichever way it
// updates the model: the user's hooks, the model's summaries and the
// training events of the progress windows.

// beginHooks calls the user's hooks' Begin on the graph being built.
func (r *replica) beginHooks(s *graph.Scope) error {
	for _, h := range r.hooks {
		if err := h.Begin(s); err != nil {
			return fmt.Errorf("estimator: a hook's Begin: %w", err)
		}
	}
	return nil
}

// sessionCreated calls the user's hooks' AfterCreateSession once the
// model is ready in sess.
func (r *replica) sessionCreated(ctx context.Context, sess *session.Session) error {
	for _, h := range r.hooks {
		if err := h.AfterCreateSession(ctx, sess); err != nil {
			return fmt.Errorf("estimator: a hook's AfterCreateSession: %w", err)
		}
	}
	return nil
}

// trainHooks returns the user's hooks as the monitored session runs them.
func (r *replica) trainHooks() []train.Hook {
	out := make([]train.Hook, len(r.hooks))
	for i, h := range r.hooks {
		out[i] = h
	}
	return out
}

// modelSummaries adds a histogram of each trainable variable to s and
// returns every summary of the graph merged, when training events are
// written (ModelDir set); otherwise an invalid output.
func (r *replica) modelSummaries(s *graph.Scope, trainable []*ops.Variable) graph.Output {
	if r.cfg.ModelDir == "" {
		return graph.Output{}
	}
	for _, v := range trainable {
		ops.HistogramSummary(s, v.Name(), v.Value())
	}
	return ops.MergeAllSummaries(s)
}

// window is one progress window's figures, as the training events record
// them.
type window struct {
	globalStep     int64
	loss           float64
	examplesPerSec float64
	stepsPerSec    float64
	// logNames name the model's logged tensors, logged their values;
	// summaries are serialized Summary protos.
	logNames  []string
	logged    []*tensor.Tensor
	summaries []*tensor.Tensor
}

// writeWindow records w in the event file (nil: none). The events are
// best effort: a full disk does not end training.
func writeWindow(events *summary.Writer, w window) {
	if events == nil {
		return
	}
	_ = events.AddScalar("loss", w.globalStep, w.loss)
	_ = events.AddScalar("examples_per_second", w.globalStep, w.examplesPerSec)
	_ = events.AddScalar("steps_per_second", w.globalStep, w.stepsPerSec)
	for i, n := range w.logNames {
		_ = events.AddScalar(n, w.globalStep, w.logged[i].Float64At(0))
	}
	for _, t := range w.summaries {
		_ = events.AddSummary(t.Uint8s(), w.globalStep)
	}
}
