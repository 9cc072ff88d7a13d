package estimator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// ErrInputMismatch is wrapped by the error of TrainAndEvaluate when the
// evaluation input's features or labels differ in name, dtype or shape
// from the training input's.
var ErrInputMismatch = errors.New("estimator: the evaluation input does not match the training input")

// checkEvalInput opens the evaluation input and the training input (as
// replica ic reads it) and checks that their features and labels agree,
// before any training: a test file of the wrong width fails at once, not
// after the training it would have thrown away.
func (e *Estimator) checkEvalInput(ctx context.Context, trainFn, evalFn InputFn, ic InputContext) error {
	ev, err := openTrainInput(ctx, evalFn, InputContext{NumReplicas: 1, Seed: e.cfg.Seed})
	if err != nil {
		return fmt.Errorf("estimator: the evaluation input (EvalSpec.Input), opened before training: %w", err)
	}
	ev.close()
	tr, err := openTrainInput(ctx, trainFn, ic)
	if err != nil {
		return err
	}
	tr.close()
	return matchInputs(tr.spec, ev.spec)
}

// matchInputs checks that an evaluation input has the features and labels
// of the training input, of the same dtypes and shapes (but the batch).
func matchInputs(trained, eval inputSpec) error {
	have := map[string]featureSpec{}
	for _, f := range eval.features {
		have[f.Name] = f
	}
	for _, f := range trained.features {
		g, ok := have[f.Name]
		if !ok {
			return fmt.Errorf("%w: it has no feature %q (its features: %s; the training input's: %s)", ErrInputMismatch, f.Name, quoteNames(specNames(eval)), quoteNames(specNames(trained)))
		}
		if err := matchSpec("feature "+fmt.Sprintf("%q", f.Name), f, g); err != nil {
			return err
		}
		delete(have, f.Name)
	}
	for _, f := range eval.features {
		if _, extra := have[f.Name]; extra {
			return fmt.Errorf("%w: it has feature %q, which the training input has not (the training input's features: %s)", ErrInputMismatch, f.Name, quoteNames(specNames(trained)))
		}
	}
	switch {
	case eval.labels == nil:
		return fmt.Errorf("%w: it has no labels (its elements end with the features %s); evaluation needs them", ErrInputMismatch, quoteNames(specNames(eval)))
	case trained.labels != nil:
		return matchSpec("the labels", *trained.labels, *eval.labels)
	}
	return nil
}

// matchSpec compares one feature (or the labels) of the training input
// with the evaluation input's.
func matchSpec(what string, trained, eval featureSpec) error {
	if trained.DType != eval.DType || !trained.Shape.Equal(eval.Shape) {
		return fmt.Errorf("%w: %s: %v %v in the evaluation input (EvalSpec.Input), %v %v in the training input (? is the batch)",
			ErrInputMismatch, what, eval.DType, eval.Shape, trained.DType, trained.Shape)
	}
	return nil
}

func specNames(sp inputSpec) []string {
	names := make([]string, len(sp.features))
	for i, f := range sp.features {
		names[i] = f.Name
	}
	return names
}

// nonFinite reports whether training failed on a non-finite value: the
// loss guard's error, or a variable's write refused by a ps task (whose
// error crosses the network as text).
func nonFinite(err error) bool {
	return err != nil && (errors.Is(err, train.ErrNaNLoss) || errors.Is(err, kernel.ErrNonFiniteWrite) ||
		strings.Contains(err.Error(), kernel.ErrNonFiniteWrite.Error()))
}

// Limits of the search for non-finite input after a non-finite loss.
const (
	nanScanValues = 1 << 26
	nanScanTime   = 10 * time.Second
)

// explainNaN adds to err, a non-finite loss of replica r, what the
// training input says of it: the loss blames the learning rate, but a NaN
// or infinity in the data makes it non-finite whatever the rate. The input
// is read again from the start (the batches the steps read, when it is
// deterministic), within limits, for the first non-finite value.
func (r *replica) explainNaN(ctx context.Context, err error) error {
	ic := InputContext{NumReplicas: r.numReplicas(), ReplicaIndex: max(r.index, 0), Seed: r.cfg.Seed}
	bps := r.batchesPerStep()
	// No more batches than training to its end reads.
	limit := func(rows int) int { return int(min(r.stop.steps(rows, bps)*int64(bps), math.MaxInt32)) }
	where, batches, covered, cerr := findNonFinite(ctx, r.input, ic, limit)
	switch {
	case cerr != nil:
		return fmt.Errorf("%w; or the input data hold NaN or infinities (reading them again to check failed: %v)", err, cerr)
	case where != "":
		return fmt.Errorf("estimator: the training input holds non-finite values (%s), which make the loss and the updates non-finite whatever the learning rate: remove or replace them (data.ReadCSV refuses them): %w", where, err)
	case covered:
		return fmt.Errorf("%w (the input data are finite: the %d batches of the training input that training reads hold no NaN or infinity)", err, batches)
	}
	return fmt.Errorf("%w; or the input data hold NaN or infinities (the first %d batches of the training input are finite; the rest was not checked)", err, batches)
}

// findNonFinite reads the input of fn for ic from its start, at most
// maxBatches(rows of the first batch) batches, and describes the first
// NaN or infinity in a float feature or the labels; covered says that the
// input ended, or that maxBatches were read.
func findNonFinite(ctx context.Context, fn InputFn, ic InputContext, maxBatches func(rows int) int) (where string, batches int, covered bool, err error) {
	in, err := openTrainInput(ctx, fn, ic)
	if err != nil {
		return "", 0, false, err
	}
	defer in.close()
	limit := maxBatches(in.first[0].Shape()[0])
	names := specNames(in.spec)
	if in.spec.labels != nil {
		names = append(names, "labels")
	}
	deadline := time.Now().Add(nanScanTime)
	values := 0
	for batches < limit && values < nanScanValues && time.Now().Before(deadline) && ctx.Err() == nil {
		b, err := in.next()
		if errors.Is(err, io.EOF) {
			return "", batches, true, nil
		}
		if err != nil {
			return "", batches, false, err
		}
		for j, t := range b {
			if j >= len(names) || !t.DType().IsFloat() {
				continue
			}
			values += t.NumElements()
			if i, v, ok := firstNonFinite(t); ok {
				name := fmt.Sprintf("feature %q", names[j])
				if j == len(in.spec.features) {
					name = "the labels"
				}
				return fmt.Sprintf("%v in %s at %v of batch %d, counting from 1", v, name, unflatten(i, t.Shape()), batches+1), batches, false, nil
			}
		}
		batches++
	}
	return "", batches, batches >= limit, nil
}

// firstNonFinite returns the index and value of the first NaN or infinity
// in t, a float tensor.
func firstNonFinite(t *tensor.Tensor) (int, float64, bool) {
	if xs := t.Float32s(); xs != nil {
		for i, x := range xs {
			if x != x || x > math.MaxFloat32 || x < -math.MaxFloat32 {
				return i, float64(x), true
			}
		}
		return 0, 0, false
	}
	for i := range t.NumElements() {
		if x := t.Float64At(i); math.IsNaN(x) || math.IsInf(x, 0) {
			return i, x, true
		}
	}
	return 0, 0, false
}

// unflatten is the index of element i of a tensor of shape dims, from 1 in
// each dimension: [row column].
func unflatten(i int, dims []int) []int {
	idx := make([]int, len(dims))
	for d := len(dims) - 1; d >= 0; d-- {
		n := max(dims[d], 1)
		idx[d] = i%n + 1
		i /= n
	}
	return idx
}
