package train

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// A Schedule scales an optimizer's learning rate by the global step (the
// learning-rate schedules of tf.train and torch.optim.lr_scheduler): a
// LinearDecay, CosineDecay or ExponentialDecay, each with an optional
// linear warm-up. The step is read from the graph's global step
// (GlobalStep) when the update runs, so every replica of a parameter-server
// strategy applies the rate of the step it updates, and a run restored from
// a checkpoint goes on where its schedule was.
type Schedule interface {
	// Factor is the scale of the learning rate at step.
	Factor(step int64) float64
	// spec is the schedule as the graph runs it.
	spec() op.Schedule
	// over returns the schedule with the run's length, last, when it has
	// none of its own.
	over(last int64) Schedule
}

// LinearDecay lowers the learning rate linearly from its full value at step
// 0 (or at the end of the warm-up) to Final times it at step Steps, and
// holds it there after (tf.train.polynomial_decay with power 1; Final 0
// ends at zero). A rate that ends low makes the final model the average of
// the last steps rather than the last step's iterate, whose accuracy one
// more step can move by points.
type LinearDecay struct {
	// Steps is the global step at which the decay ends: usually the run's
	// last, which the estimator sets when it is 0.
	Steps int64
	// Final is the share of the learning rate left at Steps, in [0, 1].
	Final float64
	// Warmup is how many first steps raise the rate linearly to its full
	// value: (step+1)/Warmup of it (0: none). The decay starts after.
	Warmup int64
}

// Factor implements Schedule.
func (d LinearDecay) Factor(step int64) float64 { return d.spec().Factor(step) }

func (d LinearDecay) spec() op.Schedule {
	return op.Schedule{Kind: op.ScheduleLinear, Steps: d.Steps, Final: float32(d.Final), Warmup: d.Warmup}
}

func (d LinearDecay) over(last int64) Schedule {
	if d.Steps == 0 {
		d.Steps = last
	}
	return d
}

// CosineDecay lowers the learning rate along half a cosine from its full
// value to Final times it at step Steps, and holds it there after
// (tf.keras.optimizers.schedules.CosineDecay with alpha Final,
// torch.optim.lr_scheduler.CosineAnnealingLR), after an optional linear
// warm-up.
type CosineDecay struct {
	// Steps is the global step at which the decay ends: usually the run's
	// last, which the estimator sets when it is 0.
	Steps int64
	// Final is the share of the learning rate left at Steps, in [0, 1].
	Final float64
	// Warmup is as LinearDecay's.
	Warmup int64
}

// Factor implements Schedule.
func (d CosineDecay) Factor(step int64) float64 { return d.spec().Factor(step) }

func (d CosineDecay) spec() op.Schedule {
	return op.Schedule{Kind: op.ScheduleCosine, Steps: d.Steps, Final: float32(d.Final), Warmup: d.Warmup}
}

func (d CosineDecay) over(last int64) Schedule {
	if d.Steps == 0 {
		d.Steps = last
	}
	return d
}

// ExponentialDecay multiplies the learning rate by Rate every Every steps
// (tf.train.exponential_decay); with Staircase, all at once at each
// multiple of Every (torch.optim.lr_scheduler.StepLR), else continuously.
// The decay starts after an optional linear warm-up.
type ExponentialDecay struct {
	Rate      float64 // in (0, 1]
	Every     int64
	Staircase bool
	// Warmup is as LinearDecay's.
	Warmup int64
}

// Factor implements Schedule.
func (d ExponentialDecay) Factor(step int64) float64 { return d.spec().Factor(step) }

func (d ExponentialDecay) spec() op.Schedule {
	return op.Schedule{Kind: op.ScheduleExponential, Rate: float32(d.Rate), Every: d.Every, Staircase: d.Staircase, Warmup: d.Warmup}
}

func (d ExponentialDecay) over(int64) Schedule { return d }

// scheduled is embedded by the optimizers: the hyper-parameters they all
// take besides their own.
type scheduled struct {
	// Schedule, when set, scales LearningRate by the global step.
	Schedule Schedule
	// WeightDecay, when positive, shrinks each variable by learning rate
	// times WeightDecay of itself before every update: decoupled weight
	// decay (Loshchilov and Hutter; PyTorch's and Keras' AdamW, and for
	// plain gradient descent the same as PyTorch's weight_decay). Sparse
	// updates (embedding rows) refuse it.
	WeightDecay float32
}

func (o *scheduled) setSchedule(s Schedule)   { o.Schedule = s }
func (o *scheduled) setWeightDecay(d float32) { o.WeightDecay = d }

// SetWeightDecay gives opt a decoupled weight decay (see the optimizers'
// WeightDecay field), or that of the optimizer it wraps. It fails for an
// optimizer that takes none, and for a decay that is negative or not a
// number.
func SetWeightDecay(opt Optimizer, d float32) error {
	if !(d >= 0) || math.IsInf(float64(d), 0) {
		return fmt.Errorf("train: weight decay %v: want 0 (none) or a positive number", d)
	}
	if w, ok := opt.(wrapper); ok && w.wrapped() != nil {
		return SetWeightDecay(w.wrapped(), d)
	}
	o, ok := opt.(interface{ setWeightDecay(float32) })
	if !ok {
		return fmt.Errorf("train: %s takes no weight decay", opt.Name())
	}
	o.setWeightDecay(d)
	return nil
}
func (o *scheduled) schedule() Schedule { return o.Schedule }

// wrapper is an optimizer that applies the gradients through another
// (HashEmbeddingOptimizer, ClipByGlobalNorm): the learning-rate schedule is
// that one's.
type wrapper interface{ wrapped() Optimizer }

// ScheduleOf returns opt's learning-rate schedule (nil: none), or that of
// the optimizer it wraps (HashEmbeddingOptimizer, ClipByGlobalNorm).
func ScheduleOf(opt Optimizer) Schedule {
	if o, ok := opt.(interface{ schedule() Schedule }); ok {
		return o.schedule()
	}
	if w, ok := opt.(wrapper); ok && w.wrapped() != nil {
		return ScheduleOf(w.wrapped())
	}
	return nil
}

// SetSchedule gives opt a learning-rate schedule (nil: none). It fails for
// an optimizer that takes none (a wrapper such as SyncReplicasOptimizer:
// give the schedule to the optimizer it wraps); HashEmbeddingOptimizer and
// ClipByGlobalNorm pass it to the optimizer they wrap.
func SetSchedule(opt Optimizer, s Schedule) error {
	if w, ok := opt.(wrapper); ok && w.wrapped() != nil {
		return SetSchedule(w.wrapped(), s)
	}
	o, ok := opt.(interface{ setSchedule(Schedule) })
	if !ok {
		return fmt.Errorf("train: %s takes no learning-rate schedule", opt.Name())
	}
	if s != nil {
		if err := s.spec().Validate(); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	o.setSchedule(s)
	return nil
}

// ScheduleOverRun gives opt's schedule, when it has no length of its own
// (LinearDecay with Steps 0), the run's: last, its final global step. The
// estimator calls it before it builds the update.
func ScheduleOverRun(opt Optimizer, last int64) error {
	sch := ScheduleOf(opt)
	if sch == nil {
		return nil
	}
	if err := SetSchedule(opt, sch.over(last)); err != nil {
		return fmt.Errorf("train: the learning-rate schedule over the run's %d steps: %w", last, err)
	}
	return nil
}

// learningRate returns the function giving an update its learning rate lr,
// in the variable's type on the variable's device: a constant, or with a
// schedule lr times the schedule's factor, which is computed once, next to
// the global step, from its value.
func learningRate(s *graph.Scope, name string, lr float32, sch Schedule) (func(s *graph.Scope, v *ops.Variable) graph.Output, error) {
	if sch == nil {
		return func(s *graph.Scope, v *ops.Variable) graph.Output { return scalar(s, v, lr) }, nil
	}
	spec := sch.spec()
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("train: %s: %w", name, err)
	}
	if spec.Sized() && spec.Steps == 0 {
		return nil, fmt.Errorf("train: %s: a %s decay over 0 steps: set its Steps (the estimator sets them to the run's last step)", name, spec.Kind)
	}
	gs := GlobalStep(s.Graph())
	if gs == nil {
		return nil, fmt.Errorf("train: %s: a learning-rate schedule needs the graph's global step (CreateGlobalStep)", name)
	}
	gsScope := graph.NewScopeWithGraph(s.Graph()).WithDevice(gs.Node().Device()).SubScope(name)
	factor := ops.LearningRateFactor(gsScope, gs.Value(), spec)
	return func(s *graph.Scope, v *ops.Variable) graph.Output {
		f := factor
		if v.DType() != tensor.Float32 {
			f = ops.Cast(s, f, v.DType())
		}
		return ops.Mul(s, scalar(s, v, lr), f)
	}, nil
}

// ParseSchedule reads a learning-rate schedule as a flag gives it:
//
//	none (or "")                         no schedule
//	linear[,end=SHARE][,steps=N]         LinearDecay to SHARE (0) of the rate at step N (the run's last)
//	cosine[,end=SHARE][,steps=N]         CosineDecay, the same
//	exponential,rate=R,every=N           ExponentialDecay: times R every N steps, continuously
//	step,rate=R,every=N                  the same all at once at each multiple of N (staircase)
//
// each with an optional ",warmup=W": the first W steps raise the rate
// linearly to its full value.
func ParseSchedule(spec string) (Schedule, error) {
	const want = "want none, linear[,end=SHARE][,steps=N], cosine[,end=SHARE][,steps=N], exponential,rate=R,every=N or step,rate=R,every=N, each with an optional ,warmup=STEPS"
	kind, params, _ := strings.Cut(strings.TrimSpace(spec), ",")
	var end, rate float64
	var steps, every, warmup int64
	given := map[string]bool{}
	for p := range strings.SplitSeq(params, ",") {
		if p == "" {
			continue
		}
		key, value, _ := strings.Cut(p, "=")
		var err error
		switch key {
		case "end":
			end, err = strconv.ParseFloat(value, 64)
		case "steps":
			steps, err = strconv.ParseInt(value, 10, 64)
		case "rate":
			rate, err = strconv.ParseFloat(value, 64)
		case "every":
			every, err = strconv.ParseInt(value, 10, 64)
		case "warmup":
			warmup, err = strconv.ParseInt(value, 10, 64)
		default:
			err = fmt.Errorf("unknown parameter %q (%s)", key, want)
		}
		if err != nil {
			return nil, fmt.Errorf("learning-rate schedule %q: %s: %w", spec, p, err)
		}
		given[key] = true
	}
	allowed := map[string][]string{"none": nil, "": nil, "linear": {"end", "steps", "warmup"}, "cosine": {"end", "steps", "warmup"},
		"exponential": {"rate", "every", "warmup"}, "step": {"rate", "every", "warmup"}}
	keys, known := allowed[kind]
	if !known {
		return nil, fmt.Errorf("learning-rate schedule %q: %s", spec, want)
	}
	for key := range given {
		if !slices.Contains(keys, key) {
			return nil, fmt.Errorf("learning-rate schedule %q: %s takes no %s (%s)", spec, cmp.Or(kind, "none"), key, want)
		}
	}
	var sch Schedule
	switch kind {
	case "", "none":
		return nil, nil
	case "linear":
		sch = LinearDecay{Steps: steps, Final: end, Warmup: warmup}
	case "cosine":
		sch = CosineDecay{Steps: steps, Final: end, Warmup: warmup}
	case "exponential", "step":
		if !given["rate"] || !given["every"] {
			return nil, fmt.Errorf("learning-rate schedule %q: %s needs rate=R and every=N", spec, kind)
		}
		sch = ExponentialDecay{Rate: rate, Every: every, Staircase: kind == "step", Warmup: warmup}
	}
	if err := sch.spec().Validate(); err != nil {
		return nil, fmt.Errorf("learning-rate schedule %q: %w", spec, err)
	}
	return sch, nil
}
