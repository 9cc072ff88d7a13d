package op

import (
	"fmt"
	"math"

	"github.com/distflow/distflow/tensor"
)

// Schedule is a learning-rate schedule as the LearningRateFactor op runs it:
// the factor by which it scales the rate at each global step. Package train
// builds it (train.LinearDecay, CosineDecay, ExponentialDecay) and computes
// the same factors in Go with Factor.
//
// For step < Warmup the factor rises linearly to 1, (step+1)/Warmup; after,
// the decay runs from 1 at step Warmup:
//
//	linear:      1 - (1-Final)·p, p = (step-Warmup)/(Steps-Warmup) in [0, 1]
//	cosine:      Final + (1-Final)·(1+cos(π·p))/2
//	exponential: Rate^((step-Warmup)/Every), floored with Staircase
type Schedule struct {
	Kind      string // ScheduleLinear, ScheduleCosine or ScheduleExponential
	Steps     int64  // linear and cosine: the step at which the decay ends
	Final     float32
	Rate      float32 // exponential: the factor per Every steps
	Every     int64
	Staircase bool
	Warmup    int64
}

// The kinds of Schedule.
const (
	ScheduleLinear      = "linear"
	ScheduleCosine      = "cosine"
	ScheduleExponential = "exponential"
)

// Sized reports whether the schedule decays over a length, Steps, which 0
// leaves to be set (the run's last step).
func (s Schedule) Sized() bool { return s.Kind == ScheduleLinear || s.Kind == ScheduleCosine }

// Factor is the schedule's factor at step.
func (s Schedule) Factor(step int64) float64 {
	if s.Warmup > 0 && step < s.Warmup {
		return float64(max(step, 0)+1) / float64(s.Warmup)
	}
	step = max(step-s.Warmup, 0)
	switch s.Kind {
	case ScheduleLinear, ScheduleCosine:
		p := 1.0
		if n := s.Steps - s.Warmup; n > 0 {
			p = min(float64(step)/float64(n), 1)
		}
		final := float64(s.Final)
		if s.Kind == ScheduleLinear {
			return 1 - (1-final)*p
		}
		return final + (1-final)*(1+math.Cos(math.Pi*p))/2
	case ScheduleExponential:
		e := float64(step) / float64(s.Every)
		if s.Staircase {
			e = math.Floor(e)
		}
		return math.Pow(float64(s.Rate), e)
	}
	return 1
}

// Validate says what is wrong with the parameters; Steps 0 (the run's
// length, not yet known) is allowed.
func (s Schedule) Validate() error {
	switch {
	case s.Warmup < 0:
		return fmt.Errorf("a warm-up of %d steps: the steps must not be negative", s.Warmup)
	case s.Sized():
		switch {
		case s.Steps < 0:
			return fmt.Errorf("%s decay over %d steps: the steps must be positive", s.Kind, s.Steps)
		case s.Steps != 0 && s.Steps <= s.Warmup:
			return fmt.Errorf("%s decay ending at step %d, within its warm-up of %d steps: the decay must end after it", s.Kind, s.Steps, s.Warmup)
		case !(s.Final >= 0 && s.Final <= 1):
			return fmt.Errorf("%s decay to %v of the learning rate: the share must be in [0, 1]", s.Kind, s.Final)
		}
	case s.Kind == ScheduleExponential:
		switch {
		case !(s.Rate > 0 && s.Rate <= 1):
			return fmt.Errorf("exponential decay by %v: the rate must be in (0, 1]", s.Rate)
		case s.Every <= 0:
			return fmt.Errorf("exponential decay every %d steps: the steps must be positive", s.Every)
		}
	default:
		return fmt.Errorf("learning-rate schedule %q: want linear, cosine or exponential", s.Kind)
	}
	return nil
}

// Attrs are the LearningRateFactor node's attributes for s.
func (s Schedule) Attrs() map[string]any {
	return map[string]any{"kind": s.Kind, "steps": int(s.Steps), "final": s.Final, "rate": s.Rate,
		"every": int(s.Every), "staircase": s.Staircase, "warmup": int(s.Warmup)}
}

// AttrReader reads a node's attributes by name (graph.Node is one).
type AttrReader interface {
	AttrInt(name string) int
	AttrFloat(name string) float32
	AttrBool(name string) bool
	AttrString(name string) string
}

// ScheduleOf reads a schedule back from a LearningRateFactor node's
// attributes.
func ScheduleOf(n AttrReader) Schedule {
	return Schedule{Kind: n.AttrString("kind"), Steps: int64(n.AttrInt("steps")), Final: n.AttrFloat("final"), Rate: n.AttrFloat("rate"),
		Every: int64(n.AttrInt("every")), Staircase: n.AttrBool("staircase"), Warmup: int64(n.AttrInt("warmup"))}
}

// inferAttrs reads an InferContext's attributes as an AttrReader.
type inferAttrs struct{ c *InferContext }

func (a inferAttrs) AttrInt(name string) int       { return a.c.Int(name) }
func (a inferAttrs) AttrFloat(name string) float32 { return a.c.Float(name) }
func (a inferAttrs) AttrBool(name string) bool     { return a.c.Bool(name) }
func (a inferAttrs) AttrString(name string) string { return a.c.String(name) }

func init() {
	Register(Def{
		Name:   "LearningRateFactor",
		Remote: true,
		Inputs: []Arg{{Name: "step"}},
		Attrs: []Attr{{Name: "kind", Type: AttrString}, {Name: "steps", Type: AttrInt, Default: 0},
			{Name: "final", Type: AttrFloat, Default: float32(0)}, {Name: "rate", Type: AttrFloat, Default: float32(1)},
			{Name: "every", Type: AttrInt, Default: 1}, {Name: "staircase", Type: AttrBool, Default: false},
			{Name: "warmup", Type: AttrInt, Default: 0}},
		Summary: "The factor of a learning-rate schedule (op.Schedule) at the global step: a float32 scalar.",
		Infer: func(c *InferContext) error {
			if dt := c.InputDType(0); dt != tensor.Int64 {
				return fmt.Errorf("step is %v, want the int64 global step", dt)
			}
			if err := c.RequireRank(0, 0); err != nil {
				return err
			}
			s := ScheduleOf(inferAttrs{c})
			if err := s.Validate(); err != nil {
				return err
			}
			if s.Sized() && s.Steps == 0 {
				return fmt.Errorf("a %s decay over 0 steps: give its length", s.Kind)
			}
			c.SetOutput(0, tensor.Float32, tensor.ScalarShape())
			return nil
		},
	})
}
