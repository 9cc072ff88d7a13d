package train

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// A Schedule scales an optimizer's learning rate by the global step (the
// learning-rate schedules of tf.train and torch.optim.lr_scheduler). The
// step is read from the graph's global step (GlobalStep) when the update
// runs, so every replica of a parameter-server strategy applies the rate of
// the step it updates, and a run restored from a checkpoint goes on where
// its schedule was.
type Schedule interface {
	// Factor is the scale of the learning rate at step.
	Factor(step int64) float64
	// validate says what is wrong with the schedule's parameters.
	validate() error
	// build adds the factor at step (an int64 scalar) to the graph as a
	// float32 scalar.
	build(s *graph.Scope, step graph.Output) graph.Output
	// over returns the schedule with the run's length, last, when it has
	// none of its own.
	over(last int64) Schedule
}

// LinearDecay lowers the learning rate linearly from its full value at step
// 0 to Final times it at step Steps, and holds it there after
// (tf.train.polynomial_decay with power 1; Final 0 ends at zero). A rate that
// ends low makes the final model the average of the last steps rather than
// the last step's iterate, whose accuracy one more step can move by points.
type LinearDecay struct {
	// Steps is the global step at which the decay ends: usually the run's
	// last, which the estimator sets when it is 0.
	Steps int64
	// Final is the share of the learning rate left at Steps, in [0, 1].
	Final float64
}

// Factor implements Schedule.
func (d LinearDecay) Factor(step int64) float64 {
	done := min(max(float64(step)/float64(d.Steps), 0), 1)
	return 1 - (1-d.Final)*done
}

func (d LinearDecay) validate() error {
	if d.Steps < 0 {
		return fmt.Errorf("train: linear decay over %d steps: the steps must be positive", d.Steps)
	}
	if !(d.Final >= 0 && d.Final <= 1) {
		return fmt.Errorf("train: linear decay to %v of the learning rate: the share must be in [0, 1]", d.Final)
	}
	return nil
}

func (d LinearDecay) over(last int64) Schedule {
	if d.Steps == 0 {
		d.Steps = last
	}
	return d
}

func (d LinearDecay) build(s *graph.Scope, step graph.Output) graph.Output {
	s = s.SubScope("linear_decay")
	at := ops.Cast(s, step, tensor.Float32)
	done := ops.Div(s, ops.Minimum(s, ops.Maximum(s, at, ops.Scalar(s, tensor.Float32, 0)), ops.Scalar(s, tensor.Float32, float64(d.Steps))),
		ops.Scalar(s, tensor.Float32, float64(d.Steps)))
	return ops.Sub(s, ops.Scalar(s, tensor.Float32, 1), ops.Mul(s, ops.Scalar(s, tensor.Float32, 1-d.Final), done))
}

// scheduled is embedded by the optimizers that take a Schedule.
type scheduled struct {
	// Schedule, when set, scales LearningRate by the global step.
	Schedule Schedule
}

func (o *scheduled) setSchedule(s Schedule) { o.Schedule = s }
func (o *scheduled) schedule() Schedule     { return o.Schedule }

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
		if err := s.validate(); err != nil {
			return err
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
	if err := sch.validate(); err != nil {
		return nil, fmt.Errorf("train: %s: %w", name, err)
	}
	if d, ok := sch.(LinearDecay); ok && d.Steps == 0 {
		return nil, fmt.Errorf("train: %s: a linear decay over 0 steps: set its Steps (the estimator sets them to the run's last step)", name)
	}
	gs := GlobalStep(s.Graph())
	if gs == nil {
		return nil, fmt.Errorf("train: %s: a learning-rate schedule needs the graph's global step (CreateGlobalStep)", name)
	}
	gsScope := graph.NewScopeWithGraph(s.Graph()).WithDevice(gs.Node().Device()).SubScope(name)
	factor := sch.build(gsScope, gs.Value())
	return func(s *graph.Scope, v *ops.Variable) graph.Output {
		f := factor
		if v.DType() != tensor.Float32 {
			f = ops.Cast(s, f, v.DType())
		}
		return ops.Mul(s, scalar(s, v, lr), f)
	}, nil
}

// ParseSchedule reads a learning-rate schedule as a flag gives it: "" or
// "none" (no schedule), or "linear" with optional ",end=SHARE" (the share
// of the rate left at the end, 0 by default) and ",steps=N" (the step at
// which it ends; by default the run's last, which the estimator sets).
func ParseSchedule(spec string) (Schedule, error) {
	kind, params, _ := strings.Cut(strings.TrimSpace(spec), ",")
	switch kind {
	case "", "none":
		if params != "" {
			return nil, fmt.Errorf("learning-rate schedule %q: none takes no parameters", spec)
		}
		return nil, nil
	case "linear":
	default:
		return nil, fmt.Errorf("learning-rate schedule %q: want none or linear[,end=SHARE][,steps=N]", spec)
	}
	var d LinearDecay
	for p := range strings.SplitSeq(params, ",") {
		if p == "" {
			continue
		}
		key, value, _ := strings.Cut(p, "=")
		var err error
		switch key {
		case "end":
			d.Final, err = strconv.ParseFloat(value, 64)
		case "steps":
			d.Steps, err = strconv.ParseInt(value, 10, 64)
		default:
			err = fmt.Errorf("unknown parameter %q (want end or steps)", key)
		}
		if err != nil {
			return nil, fmt.Errorf("learning-rate schedule %q: %s: %w", spec, p, err)
		}
	}
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("learning-rate schedule %q: %w", spec, err)
	}
	return d, nil
}
