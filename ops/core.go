package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Const adds a constant. value is a *tensor.Tensor, a Go scalar (float32,
// float64, int, int32, int64, bool) or a slice of one of the tensor element
// types (a 1-D constant).
func Const(s *graph.Scope, value any) graph.Output {
	t, err := toTensor(value)
	if err != nil {
		s.SetErr(fmt.Errorf("ops: Const in scope %q: %w", s.Prefix(), err))
		return graph.Output{}
	}
	return s.Out("Const", "Const", nil, map[string]any{"value": t})
}

// ConstNamed is Const with an explicit node name.
func ConstNamed(s *graph.Scope, name string, value any) graph.Output {
	t, err := toTensor(value)
	if err != nil {
		s.SetErr(fmt.Errorf("ops: Const %q: %w", name, err))
		return graph.Output{}
	}
	return s.Out("Const", name, nil, map[string]any{"value": t})
}

// Scalar adds a scalar constant of dtype dt (float32 or float64 usually).
// An invalid dt is a build error.
func Scalar(s *graph.Scope, dt tensor.DType, v float64) graph.Output {
	if !dt.Valid() {
		s.SetErr(fmt.Errorf("ops: Scalar in scope %q: invalid dtype %v", s.Prefix(), dt))
		return graph.Output{}
	}
	t := tensor.New(dt)
	t.SetFloat64At(0, v)
	return s.Out("Const", "Const", nil, map[string]any{"value": t})
}

func toTensor(value any) (*tensor.Tensor, error) {
	switch v := value.(type) {
	case *tensor.Tensor:
		if v == nil {
			return nil, fmt.Errorf("nil tensor")
		}
		return v, nil
	case float32, float64, int32, int64, bool, uint8:
		return tensor.Scalar(v), nil
	case int:
		return tensor.Scalar(int32(v)), nil
	case []int:
		// int32, or int64 if a value does not fit (as TensorFlow converts
		// Python ints): a dimension is never truncated.
		d := arrayInts(v)
		return tensor.FromSlice(d, len(v))
	case []float32, []float64, []int32, []int64, []bool, []uint8:
		return tensor.FromSlice(v, sliceLen(v))
	}
	return nil, fmt.Errorf("unsupported constant type %T", value)
}

func sliceLen(v any) int {
	switch x := v.(type) {
	case []float32:
		return len(x)
	case []float64:
		return len(x)
	case []int32:
		return len(x)
	case []int64:
		return len(x)
	case []bool:
		return len(x)
	case []uint8:
		return len(x)
	}
	return 0
}

// Placeholder adds a tensor to be fed at run time. shape may be partial
// (tensor.MakeShape(-1, 784)).
func Placeholder(s *graph.Scope, name string, dt tensor.DType, shape tensor.Shape) graph.Output {
	return s.Out("Placeholder", name, nil, map[string]any{"dtype": dt, "shape": shape})
}

// Identity returns x.
func Identity(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Identity", "Identity", []graph.Output{x}, nil)
}

// StopGradient returns x and blocks gradients.
func StopGradient(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("StopGradient", "StopGradient", []graph.Output{x}, nil)
}

// Group returns a no-op that runs after all of deps: run it as a target.
func Group(s *graph.Scope, name string, deps ...*graph.Node) *graph.Node {
	return s.WithControlDependencies(deps...).AddNode("NoOp", name, nil, nil)
}

// GroupOutputs is Group over the producers of outputs.
func GroupOutputs(s *graph.Scope, name string, outs ...graph.Output) *graph.Node {
	nodes := make([]*graph.Node, 0, len(outs))
	for _, o := range outs {
		if o.Node == nil {
			s.SetErr(fmt.Errorf("ops: Group %q: an input is missing", name))
			return nil
		}
		nodes = append(nodes, o.Node)
	}
	return Group(s, name, nodes...)
}
