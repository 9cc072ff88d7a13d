package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// State ops: assignments to variables and the optimizers' fused update rules.
// Their first inputs are refs: the producer must be a Variable node and the
// kernel updates the variable's storage in place.

func init() {
	for _, name := range []string{"Assign", "AssignAdd", "AssignSub"} {
		Register(Def{
			Name:     name,
			Remote:   true,
			Inputs:   []Arg{{Name: "ref", Ref: true}, {Name: "value"}},
			Stateful: true,
			Summary:  stateAssignSummary[name],
			Infer:    stateInferAssign,
		})
	}
	Register(Def{
		Name:     "IsVariableInitialized",
		Remote:   true,
		Inputs:   []Arg{{Name: "ref", Ref: true}},
		Stateful: true,
		Summary:  "Returns a bool scalar: whether the variable holds a value.",
		Infer: func(c *InferContext) error {
			c.SetOutput(0, tensor.Bool, tensor.ScalarShape())
			return nil
		},
	})
	stateRegisterApply("ApplyGradientDescent",
		"var -= alpha * delta.",
		[]string{"var"}, []string{"alpha", "delta"}, "delta", nil)
	stateRegisterApply("ApplyMomentum",
		"accum = accum*momentum + grad; var -= lr*accum (use_nesterov: var -= lr*grad + lr*momentum*accum).",
		[]string{"var", "accum"}, []string{"lr", "grad", "momentum"}, "grad",
		[]Attr{{Name: "use_nesterov", Type: AttrBool, Default: false}})
	stateRegisterApply("ApplyAdagrad",
		"accum += grad^2; var -= lr * grad / sqrt(accum).",
		[]string{"var", "accum"}, []string{"lr", "grad"}, "grad", nil)
	stateRegisterApply("ApplyRMSProp",
		"ms = rho*ms + (1-rho)*grad^2; mom = momentum*mom + lr*grad/sqrt(ms+epsilon); var -= mom.",
		[]string{"var", "ms", "mom"}, []string{"lr", "rho", "momentum", "epsilon", "grad"}, "grad", nil)
	stateRegisterApply("ApplyAdam",
		"lr_t = lr*sqrt(1-beta2_power)/(1-beta1_power); m += (grad-m)*(1-beta1); v += (grad^2-v)*(1-beta2); var -= lr_t*m/(sqrt(v)+epsilon).",
		[]string{"var", "m", "v"}, []string{"beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"}, "grad", nil)
}

var stateAssignSummary = map[string]string{
	"Assign":    "Sets the variable to value and returns the new value.",
	"AssignAdd": "Adds value to the variable and returns the new value.",
	"AssignSub": "Subtracts value from the variable and returns the new value.",
}

// stateInferAssign checks that value matches the variable's dtype and shape.
func stateInferAssign(c *InferContext) error {
	ref, val := c.Inputs[0], c.Inputs[1]
	if ref.DType != val.DType || !ref.Shape.IsCompatibleWith(val.Shape) {
		return fmt.Errorf("value %v%v does not match variable %v%v", val.DType, val.Shape, ref.DType, ref.Shape)
	}
	s, err := ref.Shape.Merge(val.Shape)
	if err != nil {
		return err
	}
	c.SetOutput(0, ref.DType, s)
	return nil
}

// stateRegisterApply declares an optimizer update op with zero outputs: refs
// (the variable first, then its slots) followed by values. Every ref and the
// tensor named like (gradient) must share the variable's shape; the other
// values are scalars; everything shares the variable's float dtype.
func stateRegisterApply(name, summary string, refs, values []string, like string, attrs []Attr) {
	args := applyArgs(refs, values)
	Register(Def{
		Name:     name,
		Remote:   true,
		Inputs:   args,
		Attrs:    attrs,
		Stateful: true,
		Summary:  summary,
		Infer: func(c *InferContext) error {
			dt, err := c.SameDTypes()
			if err != nil {
				return err
			}
			if !dt.IsFloat() {
				return fmt.Errorf("variable must be float32 or float64, got %v", dt)
			}
			vs := c.Inputs[0].Shape
			for i, a := range args {
				s := c.Inputs[i].Shape
				if a.Ref || a.Name == like {
					if !vs.IsCompatibleWith(s) {
						return fmt.Errorf("%s shape %v does not match var shape %v", a.Name, s, vs)
					}
					continue
				}
				if s.KnownRank() && s.Rank() != 0 {
					return fmt.Errorf("%s must be a scalar, got shape %v", a.Name, s)
				}
			}
			return nil
		},
	})
}

// applyArgs are the inputs of an update op: its variable and slots by
// ref, then its values.
func applyArgs(refs, values []string) []Arg {
	var args []Arg
	for _, r := range refs {
		args = append(args, Arg{Name: r, Ref: true})
	}
	for _, v := range values {
		args = append(args, Arg{Name: v})
	}
	return args
}
