package estimator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// ErrNotTrained is returned by Evaluate, Predict and Export when there is
// no trained model: this process did not train one, and the checkpoint
// directory has no checkpoint.
var ErrNotTrained = errors.New("estimator: no trained model")

// Estimator trains, evaluates, predicts with and exports the model of a
// model function, in this process or as a task of a cluster. Its methods
// are safe for concurrent use, but Train runs one at a time.
type Estimator struct {
	fn  ModelFn
	cfg RunConfig

	mu sync.Mutex
	// input describes the features of the last input seen (Train,
	// Evaluate), which Export needs.
	input *inputSpec
	// trained holds the values of the model's variables after the last
	// Train of this process that ended with the model (the chief's, or the
	// only process's), by variable name; step is its global step.
	trained map[string]*tensor.Tensor
	step    int64
	// predictor is the in-process prediction graph over trained.
	predictor *localModel
	// obs are the task's metrics (observe.go).
	obs observed
}

// Result is what one Train did in this process.
type Result struct {
	// Task is this process's task ("" for a single process); Strategy
	// names the strategy.
	Task     string `json:"task,omitempty"`
	Strategy string `json:"strategy"`
	// Chief is set for the process that ended with the trained model.
	Chief bool `json:"-"`
	// Served is set for a task that only served (a ps).
	Served     bool    `json:"-"`
	GlobalStep int64   `json:"global_step"`
	LocalSteps int     `json:"local_step"`
	Epochs     float64 `json:"epochs,omitempty"`
	// Loss is the last training batch's loss.
	Loss      float64 `json:"loss"`
	BatchSize int     `json:"batch"`
	// ExamplesPerSecond is this process's throughput after the warm-up;
	// ClusterExamplesPerSecond the whole cluster's.
	ExamplesPerSecond        float64 `json:"examples_per_second"`
	ClusterExamplesPerSecond float64 `json:"cluster_examples_per_second,omitempty"`
	// PSVariables lists the variables each ps task held (the chief's
	// result on a ps cluster).
	PSVariables map[string][]string `json:"ps_variables,omitempty"`
	// Metrics are the evaluation's (TrainAndEvaluate on the chief).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Export is the directory of the exported version (TrainAndEvaluate on
	// the chief, with EvalSpec.ExportDir).
	Export string `json:"export,omitempty"`
	// Evaluations is how many checkpoints an evaluator task evaluated.
	Evaluations int     `json:"evaluations,omitempty"`
	WallSeconds float64 `json:"wall_seconds"`
}

// New returns an estimator of the model built by fn, configured by cfg. It
// checks cfg and starts nothing.
func New(fn ModelFn, cfg RunConfig) (*Estimator, error) {
	if fn == nil {
		return nil, errors.New("estimator: New: the model function is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Estimator{fn: fn, cfg: cfg}, nil
}

// Config returns the estimator's configuration, with its defaults.
func (e *Estimator) Config() RunConfig { return e.cfg }

// Train trains the model with the configured strategy as this process's
// task: a training replica trains until stop (and the chief then waits for
// the other replicas, saves the final checkpoint, keeps the trained model,
// marks the end of training in the checkpoint directory and stops the
// cluster); a ps task serves until the chief ends training. Hooks run on
// this replica's steps. It blocks until then, or ctx ends.
//
// When the loss becomes NaN or infinite, training stops with an error
// wrapping train.ErrNaNLoss, which blames the learning rate (on a cluster
// the ps tasks may refuse the update first, kernel.ErrNonFiniteWrite);
// Train then reads the input again from its start and, if a NaN or
// infinity is in it (within limits of time and size), says where, since
// such data make the loss non-finite whatever the rate.
//
// Training that has ended stays ended, as with tf.estimator: when the
// checkpoint directory holds the chief's end-of-training marker for stop's
// step or a later one (the same training run again, or a chief restarted
// after it crashed at the end), Train trains nothing and changes no
// checkpoint; the chief keeps the final checkpoint as the trained model,
// tells the serving tasks to stop (the crashed chief may not have), and
// returns the result the marker recorded. A replica whose global step is
// at stop's already (a checkpoint or the ps tasks at it, without the
// marker) takes no step either and goes straight to the end.
func (e *Estimator) Train(ctx context.Context, input InputFn, stop Stop, hooks ...Hook) (*Result, error) {
	if input == nil {
		return nil, errors.New("estimator: Train: the input function is nil")
	}
	if err := stop.validate(); err != nil {
		return nil, err
	}
	if e.cfg.IsEvaluator() {
		return nil, fmt.Errorf("estimator: Train: task %s is an evaluator, which trains nothing: run it with TrainAndEvaluate", e.cfg.Task)
	}
	if err := e.serveMetrics(); err != nil {
		return nil, err
	}
	r := &replica{e: e, cfg: e.cfg, input: input, stop: stop, hooks: hooks, log: e.cfg.Logger, started: time.Now()}
	if c := e.cfg.Cluster; c != nil {
		r.reps, r.index = replicas(c), replicaIndex(c, e.cfg.Task)
		r.log = r.log.With("task", e.cfg.Task.String())
		if r.index < 0 {
			return r.serve(ctx)
		}
	}
	// Training that has ended stays ended (ended.go). The other workers of
	// in-graph replication only serve, until the chief stops them.
	if !e.cfg.update().ChiefOnly || r.chief() {
		if res, ended, err := r.endedBefore(ctx); err != nil || ended {
			return res, err
		}
	}
	part, err := e.cfg.Strategy.Replica(ReplicaInfo{Index: max(r.index, 0), Replicas: r.numReplicas(), Chief: r.chief(), Logger: r.log})
	if err == nil && part == nil {
		err = fmt.Errorf("strategy %s returned no replica", e.cfg.Strategy)
	}
	if err != nil {
		return nil, fmt.Errorf("estimator: %w", err)
	}
	res, err := part.train(ctx, r)
	if nonFinite(err) && ctx.Err() == nil {
		// The guard blames the learning rate; the data may be at fault.
		err = r.explainNaN(ctx, err)
	}
	return res, err
}

// rememberInput keeps the features of an input, for Export.
func (e *Estimator) rememberInput(sp inputSpec) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.input = &sp
}

// keepTrained reads the model's variables from the training session: the
// trained model that Evaluate, Predict and Export use.
func (e *Estimator) keepTrained(ctx context.Context, sess *session.Session, vars []*ops.Variable, step *ops.Variable) error {
	fetches := []graph.Output{step.Value()}
	for _, v := range vars {
		fetches = append(fetches, v.Value())
	}
	out, err := sess.Run(ctx, nil, fetches, nil)
	if err != nil {
		return fmt.Errorf("estimator: reading the trained variables: %w", err)
	}
	values := make(map[string]*tensor.Tensor, len(vars))
	for i, v := range vars {
		values[v.Name()] = out[1+i]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.trained, e.step, e.predictor = values, int64(out[0].Float64At(0)), nil
	return nil
}

// assignment is what sets variables to values: run targets with feeds.
type assignment struct {
	feeds   map[graph.Output]*tensor.Tensor
	targets []*graph.Node
}

// continuation builds in s what sets vars and the global step to the model
// this process trained before, so that a second Train goes on from it as
// tf.estimator goes on from its model directory; nil when there is none.
func (e *Estimator) continuation(s *graph.Scope, vars []*ops.Variable, step *ops.Variable) *assignment {
	e.mu.Lock()
	trained, at := e.trained, e.step
	e.mu.Unlock()
	if trained == nil {
		return nil
	}
	a := &assignment{feeds: map[graph.Output]*tensor.Tensor{}}
	set := func(v *ops.Variable, val *tensor.Tensor) {
		ph := ops.Placeholder(s, v.Name()+"/trained_value", val.DType(), val.StaticShape())
		a.feeds[ph] = val
		a.targets = append(a.targets, ops.Assign(s, v.Value(), ph).Node)
	}
	for _, v := range vars {
		if val, ok := trained[v.Name()]; ok {
			set(v, val)
		}
	}
	gs := tensor.New(step.DType())
	gs.SetFloat64At(0, float64(at))
	set(step, gs)
	return a
}

func (e *Estimator) trainedStep() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.step
}

// VariableNames lists the variables of the trained model.
func (e *Estimator) VariableNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sortedNames(e.trained)
}

// VariableValue returns the value of a variable of the model trained in
// this process (tf.estimator's get_variable_value). The caller must not
// modify it.
func (e *Estimator) VariableValue(name string) (*tensor.Tensor, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.trained == nil {
		return nil, fmt.Errorf("%w in this process", ErrNotTrained)
	}
	t, ok := e.trained[name]
	if !ok {
		return nil, fmt.Errorf("estimator: the model has no variable %q (it has %v)", name, sortedNames(e.trained))
	}
	return t, nil
}

// localModel is the model built in this process for one mode over the
// trained values, with a local session.
type localModel struct {
	sess  *session.Session
	tower *tower
	step  int64
	// values are the variables' values, by name.
	values map[string]*tensor.Tensor
}

// buildLocal builds the model for mode with features sp in a new graph and
// loads the trained values into its variables: those this process trained,
// or else the latest checkpoint.
func (e *Estimator) buildLocal(ctx context.Context, sp inputSpec, mode Mode) (*localModel, error) {
	return e.buildLocalAt(ctx, sp, mode, 0)
}

// buildLocalAt is buildLocal from the checkpoint of step, when this
// process trained nothing (0: the latest).
func (e *Estimator) buildLocalAt(ctx context.Context, sp inputSpec, mode Mode, step int64) (*localModel, error) {
	s := graph.NewScope()
	t, err := buildTower(s, e.fn, sp, mode)
	if err != nil {
		return nil, err
	}
	vars := ops.GlobalVariables(s.Graph())
	e.mu.Lock()
	trained := e.trained
	if trained != nil {
		step = e.step
	}
	e.mu.Unlock()

	var saver *checkpoint.Saver
	var assigns []*graph.Node
	feeds := map[graph.Output]*tensor.Tensor{}
	if trained != nil {
		for _, v := range vars {
			val, ok := trained[v.Name()]
			if !ok {
				return nil, fmt.Errorf("estimator: the model function (%s) created variable %q, which the trained model does not have", mode, v.Name())
			}
			ph := ops.Placeholder(s, v.Name()+"/trained_value", val.DType(), val.StaticShape())
			feeds[ph] = val
			assigns = append(assigns, ops.Assign(s, v.Value(), ph).Node)
		}
	} else {
		if e.cfg.CheckpointDir == "" {
			return nil, fmt.Errorf("%w: train it in this process, or set RunConfig.ModelDir (or CheckpointDir) to a directory with checkpoints", ErrNotTrained)
		}
		if saver, err = checkpoint.NewSaver(s, vars, checkpoint.SaverConfig{Dir: e.cfg.CheckpointDir, Logger: e.cfg.Logger}); err != nil {
			return nil, err
		}
	}
	// Local variables (streaming metrics' accumulators) are neither trained
	// nor saved: they start from their initial values.
	var localInit *graph.Node
	if len(ops.LocalVariables(s.Graph())) > 0 {
		localInit = ops.LocalVariablesInitializer(s)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("estimator: building the %s graph: %w", mode, err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		return nil, err
	}
	if saver != nil && step > 0 {
		if err := saver.Restore(ctx, sess, step); err != nil {
			sess.Close()
			return nil, err
		}
	} else if saver != nil {
		restored, ok, err := saver.RestoreLatest(ctx, sess)
		if err == nil && !ok {
			err = fmt.Errorf("%w: no checkpoint in %s", ErrNotTrained, e.cfg.CheckpointDir)
		}
		if err != nil {
			sess.Close()
			return nil, err
		}
		step = restored
	} else if _, err := sess.Run(ctx, feeds, nil, assigns); err != nil {
		sess.Close()
		return nil, fmt.Errorf("estimator: loading the trained variables: %w", err)
	}
	if localInit != nil {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{localInit}); err != nil {
			sess.Close()
			return nil, fmt.Errorf("estimator: initialising the local variables: %w", err)
		}
	}
	m := &localModel{sess: sess, tower: t, step: step}
	if trained != nil {
		m.values = trained
	} else {
		fetches := make([]graph.Output, len(vars))
		for i, v := range vars {
			fetches[i] = v.Value()
		}
		out, err := sess.Run(ctx, nil, fetches, nil)
		if err != nil {
			sess.Close()
			return nil, err
		}
		m.values = map[string]*tensor.Tensor{}
		for i, v := range vars {
			m.values[v.Name()] = out[i]
		}
	}
	return m, nil
}

// Evaluate runs the model in Eval mode over the whole input (which must
// end) and returns the metrics: the model's EvalMetrics, the mean "loss",
// and "global_step". It uses the model trained in this process, or else
// the latest checkpoint.
func (e *Estimator) Evaluate(ctx context.Context, input InputFn) (map[string]float64, error) {
	if input == nil {
		return nil, errors.New("estimator: Evaluate: the input function is nil")
	}
	in, err := openTrainInput(ctx, input, InputContext{NumReplicas: 1, Seed: e.cfg.Seed})
	if err != nil {
		return nil, err
	}
	defer in.close()
	e.rememberInput(in.spec)
	m, err := e.buildLocal(ctx, in.spec, Eval)
	if err != nil {
		return nil, err
	}
	defer m.sess.Close()
	t := m.tower
	// Ratio metrics are fetched with every batch; streaming ones update
	// with every batch and are read once at the end.
	var names, streaming []string
	var updates []*graph.Node
	fetches := []graph.Output{t.spec.Loss, t.batchSize}
	for _, n := range sortedNames(t.spec.EvalMetrics) {
		if m := t.spec.EvalMetrics[n]; m.Update != nil {
			streaming, updates = append(streaming, n), append(updates, m.Update)
		} else {
			names = append(names, n)
			fetches = append(fetches, m.Value, m.Weight)
		}
	}
	sums := make([]float64, len(fetches))
	feeds := map[graph.Output]*tensor.Tensor{}
	for {
		b, err := in.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("estimator: evaluating: %w", err)
		}
		if err := t.feeds(feeds, b); err != nil {
			return nil, err
		}
		out, err := m.sess.Run(ctx, feeds, fetches, updates)
		if err != nil {
			return nil, fmt.Errorf("estimator: evaluating: %w", err)
		}
		n := out[1].Float64At(0)
		sums[0] += out[0].Float64At(0) * n
		sums[1] += n
		for i := 2; i < len(out); i++ {
			sums[i] += out[i].Float64At(0)
		}
	}
	if sums[1] == 0 {
		return nil, errors.New("estimator: evaluating: the input is empty")
	}
	metrics := map[string]float64{"loss": sums[0] / sums[1], "global_step": float64(m.step)}
	for i, n := range names {
		if w := sums[3+2*i]; w != 0 {
			metrics[n] = sums[2+2*i] / w
		} else {
			metrics[n] = 0
		}
	}
	if len(streaming) > 0 {
		values := make([]graph.Output, len(streaming))
		for i, n := range streaming {
			values[i] = t.spec.EvalMetrics[n].Value
		}
		out, err := m.sess.Run(ctx, nil, values, nil)
		if err != nil {
			return nil, fmt.Errorf("estimator: evaluating: reading the streaming metrics %v: %w", streaming, err)
		}
		for i, n := range streaming {
			metrics[n] = out[i].Float64At(0)
		}
	}
	e.observeEval(metrics)
	return metrics, nil
}

// Predict runs the model in Predict mode on a batch of features (by name;
// every feature the model was trained on) and returns the predictions by
// name. It uses the model trained in this process, or else the latest
// checkpoint.
func (e *Estimator) Predict(ctx context.Context, features map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	m, err := e.predictModel(ctx, features)
	if err != nil {
		return nil, err
	}
	feeds := map[graph.Output]*tensor.Tensor{}
	for name, ph := range m.tower.features {
		t, ok := features[name]
		if !ok {
			return nil, fmt.Errorf("estimator: Predict: feature %q is missing (the model reads %v)", name, m.tower.order)
		}
		if t.DType() != ph.DType() || !ph.Shape().IsCompatibleWith(t.StaticShape()) {
			return nil, fmt.Errorf("estimator: Predict: feature %q is %v%v; the model reads %v%v", name, t.DType(), t.StaticShape(), ph.DType(), ph.Shape())
		}
		feeds[ph] = t
	}
	for name := range features {
		if _, ok := m.tower.features[name]; !ok {
			return nil, fmt.Errorf("estimator: Predict: unknown feature %q (the model reads %v)", name, m.tower.order)
		}
	}
	names := sortedNames(m.tower.spec.Predictions)
	fetches := make([]graph.Output, len(names))
	for i, n := range names {
		fetches[i] = m.tower.spec.Predictions[n]
	}
	out, err := m.sess.Run(ctx, feeds, fetches, nil)
	if err != nil {
		return nil, fmt.Errorf("estimator: Predict: %w", err)
	}
	preds := make(map[string]*tensor.Tensor, len(names))
	for i, n := range names {
		preds[n] = out[i]
	}
	return preds, nil
}

// predictModel returns the in-process prediction model, built on first
// use for the features of the last input (or of these features).
func (e *Estimator) predictModel(ctx context.Context, features map[string]*tensor.Tensor) (*localModel, error) {
	e.mu.Lock()
	m, sp := e.predictor, e.input
	e.mu.Unlock()
	if m != nil {
		return m, nil
	}
	if sp == nil {
		var fs []featureSpec
		for _, n := range sortedNames(features) {
			t := features[n]
			dims := t.Shape()
			if len(dims) == 0 {
				return nil, fmt.Errorf("estimator: Predict: feature %q is a scalar; want a batch", n)
			}
			fs = append(fs, featureSpec{Name: n, DType: t.DType(), Shape: tensor.MakeShape(append([]int{-1}, dims[1:]...)...)})
		}
		sp = &inputSpec{features: fs}
	}
	m, err := e.buildLocal(ctx, *sp, Predict)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.predictor != nil { // built concurrently
		m.sess.Close()
		return e.predictor, nil
	}
	e.predictor = m
	return m, nil
}

// Export writes the model for prediction into a new numbered version
// under base (base/1, base/2, ...; see package savedmodel) and returns its
// directory: the Predict-mode graph, the trained variables, and a
// signature of the features and predictions. The features' dtypes and
// shapes are those of the last Train or Evaluate input.
func (e *Estimator) Export(ctx context.Context, base string) (string, error) {
	return e.exportAt(ctx, base, 0)
}

// exportAt is Export from the checkpoint of step, when this process
// trained nothing (0: the latest).
func (e *Estimator) exportAt(ctx context.Context, base string, step int64) (string, error) {
	e.mu.Lock()
	sp := e.input
	e.mu.Unlock()
	if sp == nil {
		return "", errors.New("estimator: Export needs the features' dtypes and shapes, which it takes from the input of Train or Evaluate: call one of them first")
	}
	m, err := e.buildLocalAt(ctx, *sp, Predict, step)
	if err != nil {
		return "", err
	}
	defer m.sess.Close()
	inputs := map[string]graph.Output{}
	for n, ph := range m.tower.features {
		inputs[n] = ph
	}
	_, dir, err := savedmodel.WriteVersion(base, savedmodel.Model{
		Graph: m.sess.Graph(), Inputs: inputs, Outputs: m.tower.spec.Predictions,
		Variables: m.values, GlobalStep: m.step,
	})
	if err != nil {
		return "", err
	}
	e.cfg.Logger.Info("exported the model", "dir", dir, "global_step", m.step)
	return dir, nil
}

// Load loads an exported model version (a directory written by Export) as
// a predictor that needs none of the code that built the model.
func Load(dir string) (*savedmodel.Predictor, error) { return savedmodel.Load(dir) }

// Hook observes and steers the training of one replica, as TensorFlow's
// SessionRunHook: Begin may add to the graph before the session is made;
// AfterCreateSession runs once the model is ready; BeforeRun, AfterRun and
// End are train.Hook's. An error from any of them ends training. Embed
// BaseHook to implement only what is needed.
type Hook interface {
	Begin(s *graph.Scope) error
	AfterCreateSession(ctx context.Context, sess *session.Session) error
	train.Hook
}

// BaseHook implements Hook with methods that do nothing.
type BaseHook struct{ train.NoHook }

// Begin does nothing.
func (BaseHook) Begin(*graph.Scope) error { return nil }

// AfterCreateSession does nothing.
func (BaseHook) AfterCreateSession(context.Context, *session.Session) error { return nil }
