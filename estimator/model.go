package estimator

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// Mode says what a model function builds its model for.
type Mode int

const (
	// Train builds the training loss and its optimizer.
	Train Mode = iota
	// Eval builds the loss and the evaluation metrics (no dropout).
	Eval
	// Predict builds the predictions only: labels are not fed.
	Predict
)

func (m Mode) String() string {
	switch m {
	case Train:
		return "train"
	case Eval:
		return "eval"
	case Predict:
		return "predict"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Features are a model's inputs by name: placeholders of one batch each,
// whose first dimension is the batch. Read them with Get, which names a
// feature the input lacks; f["x"] of a missing name is an invalid Output,
// which the first op given it reports only as a missing input.
type Features map[string]graph.Output

// ErrUnknownFeature is wrapped by the error Features.Get records for a
// feature the input lacks.
var ErrUnknownFeature = errors.New("estimator: unknown feature")

// Get returns the feature called name. When the input has none, it
// records an error in s naming the feature and those the input has (the
// model function then fails with it, not with the error of an op given
// nothing), and returns an invalid Output, which the builders after it
// ignore.
func (f Features) Get(s *graph.Scope, name string) graph.Output {
	if x, ok := f[name]; ok {
		return x
	}
	s.SetErr(&unknownFeatureError{name: name, have: sortedNames(f)})
	return graph.Output{}
}

// unknownFeatureError is a model function's request for a feature the
// input does not have.
type unknownFeatureError struct {
	name string
	have []string
}

func (e *unknownFeatureError) Error() string {
	msg := fmt.Sprintf("estimator: the model function asked for feature %q; the input has %s", e.name, quoteNames(e.have))
	for _, h := range e.have {
		if strings.EqualFold(h, e.name) {
			msg += fmt.Sprintf(" (%q differs only in case)", h)
			break
		}
	}
	return msg
}

func (e *unknownFeatureError) Unwrap() error { return ErrUnknownFeature }

// quoteNames formats names as "a", "b", or "none".
func quoteNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// Spec is what a model function returns (tf.estimator.EstimatorSpec).
type Spec struct {
	// Loss is the scalar mean loss of a batch; required in Train and Eval.
	// A loss that may hold more than one element is refused (one of shape
	// [1] is taken as the scalar).
	Loss graph.Output
	// Optimizer turns Loss into updates; required in Train. The strategy
	// builds the update with it (and may wrap it, as sync replicas do), so
	// the model function does not call Minimize itself.
	Optimizer train.Optimizer
	// Predictions are the model's outputs by name; required in Predict.
	// They are what an export serves.
	Predictions map[string]graph.Output
	// EvalMetrics are the evaluation metrics by name (Eval). The mean loss
	// is added as "loss".
	EvalMetrics map[string]Metric
	// Log names tensors printed with each progress line (Train), as
	// TensorFlow's LoggingTensorHook does: scalars, or the first element.
	Log map[string]graph.Output
}

// ModelFn builds a model into s for mode from the features and, in Train
// and Eval, the labels (invalid in Predict). It creates its variables with
// ops.NewVariable in s (or package layers does); the estimator calls it
// again for other towers and modes in scopes that reuse them
// (graph.Scope.ReuseVariables), so the variables must be created the same
// way in every mode. The update ops it adds in Train
// (ops.UpdateOpsCollection: batch normalisation's moving statistics) run
// with every training step. Graph-building errors may be left in the
// scope: the estimator checks s.Err().
type ModelFn func(s *graph.Scope, features Features, labels graph.Output, mode Mode) (*Spec, error)

// Metric is an evaluation metric over a whole evaluation set, in one of
// two forms. A ratio of sums: the sum of Value over all batches divided by
// the sum of Weight, both scalars computed per batch. Or streaming, as
// tf.metrics (package evalmetrics), when Update is set: Update runs with
// every batch, accumulating into local variables (ops.NewLocalVariable,
// initialised before the first batch), and Value, a scalar read once after
// the last batch, is the metric; Weight is unused.
type Metric struct {
	Value, Weight graph.Output
	Update        *graph.Node
}

// StreamingMetric is the metric of a value and its update op, as the
// streaming metrics of package evalmetrics return them:
//
//	spec.EvalMetrics["auc"] = estimator.StreamingMetric(evalmetrics.AUC(s, labels, probs, 200, evalmetrics.ROC))
func StreamingMetric(value graph.Output, update *graph.Node) Metric {
	return Metric{Value: value, Update: update}
}

// MeanMetric is the mean of the elements of x over the evaluation set.
func MeanMetric(s *graph.Scope, x graph.Output) Metric {
	x = ops.Cast(s, x, tensor.Float32)
	return Metric{Value: ops.Sum(s, x, nil, false), Weight: ops.Cast(s, ops.Size(s, x), tensor.Float32)}
}

// Accuracy is the fraction of predictions equal to their labels (class
// indices of the same dtype).
func Accuracy(s *graph.Scope, labels, predictions graph.Output) Metric {
	return MeanMetric(s, ops.Equal(s, labels, predictions))
}

// InputContext tells an input function which replica it feeds, so that
// sharding is its own decision (tf.distribute.InputContext).
type InputContext struct {
	// NumReplicas is the number of replicas (or towers) that read input.
	NumReplicas int
	// ReplicaIndex is the one this input feeds, from 0.
	ReplicaIndex int
	// Seed is RunConfig.Seed: the same on every replica, so that replicas
	// can cut their shards from one shuffle.
	Seed int64

	// claims, when set, shards Examples dynamically (claim.go), for
	// tower (in-graph replication; 0 otherwise).
	claims *claimer
	tower  int
}

// Input is a pipeline of batches: each element holds one tensor per
// feature, in the order of Features, followed by the labels when the
// element has one more component than there are features.
type Input struct {
	Dataset  *data.Dataset
	Features []string
}

// InputFn makes the input of one replica. For training it usually repeats
// for ever (training stops at its step limit); for evaluation it ends.
type InputFn func(ic InputContext) (*Input, error)

// featureSpec is the dtype and shape (batch dimension unknown) of one
// feature, or of the labels.
type featureSpec struct {
	Name  string
	DType tensor.DType
	Shape tensor.Shape
}

// inputSpec describes the batches of an input: its features and labels.
type inputSpec struct {
	features []featureSpec
	labels   *featureSpec
}

// specOf describes a batch of in (taken as representative), with its first
// dimension made unknown.
func specOf(in *Input, batch []*tensor.Tensor) (inputSpec, error) {
	nf := len(in.Features)
	if nf == 0 {
		return inputSpec{}, fmt.Errorf("estimator: the input names no features (Input.Features is empty)")
	}
	if len(batch) != nf && len(batch) != nf+1 {
		return inputSpec{}, fmt.Errorf("estimator: the input's elements have %d components; want one per feature (%d: %v), and the labels", len(batch), nf, in.Features)
	}
	seen := map[string]bool{}
	describe := func(name string, t *tensor.Tensor) (featureSpec, error) {
		dims := t.Shape()
		if len(dims) == 0 {
			return featureSpec{}, fmt.Errorf("estimator: input %q is a scalar; want a batch (is the dataset batched?)", name)
		}
		dims = append([]int{-1}, dims[1:]...)
		return featureSpec{Name: name, DType: t.DType(), Shape: tensor.MakeShape(dims...)}, nil
	}
	var spec inputSpec
	for i, name := range in.Features {
		if name == "" || seen[name] {
			return inputSpec{}, fmt.Errorf("estimator: feature name %q is empty or repeated in %v", name, in.Features)
		}
		seen[name] = true
		f, err := describe(name, batch[i])
		if err != nil {
			return inputSpec{}, err
		}
		spec.features = append(spec.features, f)
	}
	if len(batch) == nf+1 {
		l, err := describe("labels", batch[nf])
		if err != nil {
			return inputSpec{}, err
		}
		spec.labels = &l
	}
	return spec, nil
}

// placeholders adds a placeholder per feature (and for the labels when
// withLabels) to s.
func (sp inputSpec) placeholders(s *graph.Scope, withLabels bool) (Features, graph.Output) {
	fs := Features{}
	for _, f := range sp.features {
		fs[f.Name] = ops.Placeholder(s, f.Name, f.DType, f.Shape)
	}
	var labels graph.Output
	if withLabels && sp.labels != nil {
		labels = ops.Placeholder(s, "labels", sp.labels.DType, sp.labels.Shape)
	}
	return fs, labels
}

// feeds maps the placeholders of a tower to the tensors of a batch.
func (t *tower) feeds(into map[graph.Output]*tensor.Tensor, batch []*tensor.Tensor) error {
	if len(batch) < len(t.order) || (t.labels.Valid() && len(batch) != len(t.order)+1) {
		return fmt.Errorf("estimator: a batch has %d components; the model was built for %d features and labels", len(batch), len(t.order))
	}
	for i, name := range t.order {
		into[t.features[name]] = batch[i]
	}
	if t.labels.Valid() {
		into[t.labels] = batch[len(t.order)]
	}
	return nil
}

// tower is the model built once for one mode on one device.
type tower struct {
	features Features
	order    []string // feature names in input order
	labels   graph.Output
	spec     *Spec
	// batchSize is the batch's first dimension (float32 scalar).
	batchSize graph.Output
}

// buildTower calls the model function in s for mode with placeholders of
// sp, and checks what it returns.
func buildTower(s *graph.Scope, fn ModelFn, sp inputSpec, mode Mode) (*tower, error) {
	features, labels := sp.placeholders(s, mode != Predict)
	if (mode == Train || mode == Eval) && !labels.Valid() {
		return nil, fmt.Errorf("estimator: %s needs labels: the input's elements have no component after the features", mode)
	}
	updatesBefore := len(s.Graph().Collection(ops.UpdateOpsCollection))
	spec, err := fn(s, features, labels, mode)
	if err == nil {
		err = s.Err()
	}
	if err != nil {
		return nil, modelFnError(mode, err, sp)
	}
	if spec == nil {
		return nil, fmt.Errorf("estimator: the model function (%s) returned no spec", mode)
	}
	switch {
	case mode != Predict && !spec.Loss.Valid():
		return nil, fmt.Errorf("estimator: the model function's spec has no Loss (mode %s)", mode)
	case mode == Train && spec.Optimizer == nil:
		return nil, fmt.Errorf("estimator: the model function's spec has no Optimizer (mode train)")
	case mode == Predict && len(spec.Predictions) == 0:
		return nil, fmt.Errorf("estimator: the model function's spec has no Predictions (mode predict)")
	}
	if mode != Predict {
		if spec.Loss, err = scalarLoss(s, spec.Loss, mode); err != nil {
			return nil, err
		}
	}
	if mode == Train {
		// The update ops this call added (batch normalisation's moving
		// statistics) run with the loss, which every strategy's training
		// step computes: one dependency, whatever builds the update.
		if updates := s.Graph().Collection(ops.UpdateOpsCollection)[updatesBefore:]; len(updates) > 0 {
			spec.Loss = ops.Identity(s.WithControlDependencies(updates...), spec.Loss)
		}
	}
	for _, name := range sortedNames(spec.EvalMetrics) {
		m := spec.EvalMetrics[name]
		if mode != Eval {
			continue
		}
		if !m.Value.Valid() || (m.Update == nil && !m.Weight.Valid()) {
			return nil, fmt.Errorf("estimator: eval metric %q has no Value, or neither a Weight nor an Update", name)
		}
		if m.Value, err = scalarMetric(s, name, "Value", m.Value); err != nil {
			return nil, err
		}
		if m.Update == nil {
			if m.Weight, err = scalarMetric(s, name, "Weight", m.Weight); err != nil {
				return nil, err
			}
		}
		spec.EvalMetrics[name] = m
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("estimator: the model function (%s): %w", mode, err)
	}
	t := &tower{features: features, labels: labels, spec: spec}
	for _, f := range sp.features {
		t.order = append(t.order, f.Name)
	}
	first := features[t.order[0]]
	t.batchSize = ops.Cast(s, ops.Slice(s, ops.Shape(s, first), []int{0}, []int{1}), tensor.Float32)
	t.batchSize = ops.ReshapeTo(s, t.batchSize)
	return t, s.Err()
}

// modelFnError is the error of a model function that failed in mode: an
// unknown feature (Features.Get) as it is; any other naming the features
// of the input, since an op given a feature the input lacks (f["X"] for
// "x") fails only as an op with a missing input.
func modelFnError(mode Mode, err error, sp inputSpec) error {
	var unknown *unknownFeatureError
	if errors.As(err, &unknown) {
		return err
	}
	names := make([]string, len(sp.features))
	for i, f := range sp.features {
		names[i] = f.Name
	}
	if strings.Contains(err.Error(), "is missing") {
		labels := ""
		if mode == Predict {
			labels = "; or are the labels read, which Predict does not feed?"
		}
		return fmt.Errorf("estimator: the model function (%s): %w (is a feature name misspelt? the input has %s; Features.Get names a feature the input lacks%s)", mode, err, quoteNames(names), labels)
	}
	return fmt.Errorf("estimator: the model function (%s): %w", mode, err)
}

// scalarLoss checks the model's loss is a scalar, as tf.estimator does: a
// loss that may hold more than one element (a loss per example, left
// unreduced) is refused; one of shape [1] or of unknown dimensions is
// reshaped to a scalar, which fails the step unless it holds one element.
func scalarLoss(s *graph.Scope, loss graph.Output, mode Mode) (graph.Output, error) {
	sh := loss.Shape()
	if !loss.DType().IsFloat() {
		return loss, fmt.Errorf("estimator: the model function's loss %s (mode %s) is %v; want a float scalar", loss, mode, loss.DType())
	}
	if sh.KnownRank() && sh.Rank() == 0 {
		return loss, nil
	}
	for i := 0; sh.KnownRank() && i < sh.Rank(); i++ {
		if sh.Dim(i) != 1 {
			return loss, fmt.Errorf("estimator: the model function's loss %s (mode %s) has shape %v; want a scalar, the mean loss of the batch (reduce it, e.g. ops.Mean(s, loss, nil, false))", loss, mode, sh)
		}
	}
	return ops.ReshapeTo(s.SubScope("scalar_loss"), loss), s.Err()
}

// scalarMetric checks what (Value or Weight) of the eval metric name, x,
// is a number per batch, as Metric says: a tensor that may hold more than
// one element is refused; one of shape [1] or of unknown dimensions is
// reshaped to a scalar, which fails the step unless it holds one element.
func scalarMetric(s *graph.Scope, name, what string, x graph.Output) (graph.Output, error) {
	sh := x.Shape()
	if dt := x.DType(); !dt.IsFloat() && dt != tensor.Int32 && dt != tensor.Int64 {
		return x, fmt.Errorf("estimator: eval metric %q: its %s %s is %v; want a number", name, what, x, dt)
	}
	if sh.KnownRank() && sh.Rank() == 0 {
		return x, nil
	}
	for i := 0; sh.KnownRank() && i < sh.Rank(); i++ {
		if sh.Dim(i) != 1 {
			return x, fmt.Errorf("estimator: eval metric %q: its %s %s has shape %v; want a scalar (a sum over the batch: reduce it, e.g. ops.Sum(s, x, nil, false); estimator.MeanMetric averages a tensor's elements)", name, what, x, sh)
		}
	}
	return ops.ReshapeTo(s.SubScope("scalar_metric"), x), s.Err()
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
