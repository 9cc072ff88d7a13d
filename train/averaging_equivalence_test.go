package train_test

import (
	"math"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestAllReduceOfHalfBatchesIsOneBigBatchStep checks the arithmetic of
// synchronous data parallelism: two ranks that each take a gradient step
// on half a batch and average the gradients over the ring end with the
// variables of one process stepping on the whole batch (the loss is a mean
// over the batch), step after step, to float32 rounding.
func TestAllReduceOfHalfBatchesIsOneBigBatchStep(t *testing.T) {
	trainSet, _, err := data.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	const workers, steps, half, lr = 2, 5, 32, 0.5
	ring := rings(t, workers, 0)
	reps := make([]*replica, workers)
	for i := range reps {
		reps[i] = newReplica(t, "mlp", lr, modeAllReduce, train.AveragingConfig{})
	}
	single := newReplica(t, "mlp", lr, modeAveraging, train.AveragingConfig{})
	ctx := timeout(t)
	for step := range steps {
		lo := step * workers * half
		feeds := map[graph.Output]*tensor.Tensor{
			single.model.Input: rows(trainSet.Images, lo, workers*half), single.model.Label: rows(trainSet.Labels, lo, workers*half),
		}
		if _, err := single.sess.Run(ctx, feeds, nil, []*graph.Node{single.local}); err != nil {
			t.Fatal(err)
		}
		runWorkers(t, workers, func(rank int) error {
			r := reps[rank]
			feeds := map[graph.Output]*tensor.Tensor{
				r.model.Input: rows(trainSet.Images, lo+rank*half, half), r.model.Label: rows(trainSet.Labels, lo+rank*half, half),
			}
			_, err := r.ar.Step(ctx, r.sess, feeds, ring[rank], int64(step))
			return err
		})
	}
	want := variables(t, single)
	for rank, r := range reps {
		got := variables(t, r)
		for i := range want {
			w, g := want[i].Float32s(), got[i].Float32s()
			worst := 0.0
			for k := range w {
				worst = max(worst, math.Abs(float64(w[k]-g[k]))/(1e-3+math.Abs(float64(w[k]))))
			}
			// A few float32 roundings per step (the sums are in a
			// different order): far below a learning-rate or batch error.
			if worst > 1e-4 {
				t.Errorf("rank %d: variable %s differs from the single process by a relative %.2g after %d steps",
					rank, r.model.Variables[i].Name(), worst, steps)
			}
		}
	}
}

// variables reads a replica's model variables.
func variables(t *testing.T, r *replica) []*tensor.Tensor {
	t.Helper()
	outs := make([]graph.Output, len(r.model.Variables))
	for i, v := range r.model.Variables {
		outs[i] = v.Value()
	}
	vals, err := r.sess.Run(t.Context(), nil, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}
