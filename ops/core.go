package ops

import (
	"fmt"
	"reflect"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Const adds a constant. value is a *tensor.Tensor, a Go scalar (float32,
// float64, int, int32, int64, bool), a slice of one of the tensor element
// types or of ints (a 1-D constant), or nested slices of them, as
// tf.constant([[1, 2, 0.5]]) takes nested lists: [][]float32{{1, 2, 0.5}}
// is a [1, 3] constant. Ints are int32, or int64 when one does not fit.
// Nested slices must be rectangular.
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
	if t, ok, err := nestedConst(value); ok {
		return t, err
	}
	return nil, fmt.Errorf("unsupported constant type %T", value)
}

// nestedConst is the tensor of nested slices of an element type Const
// takes; ok is false for any other value.
func nestedConst(value any) (t *tensor.Tensor, ok bool, err error) {
	rv := reflect.ValueOf(value)
	if !rv.IsValid() {
		return nil, false, nil
	}
	typ, rank := rv.Type(), 0
	for typ.Kind() == reflect.Slice {
		typ, rank = typ.Elem(), rank+1
	}
	var flat reflect.Value
	switch typ.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Int32, reflect.Int64, reflect.Bool, reflect.Uint8, reflect.Int:
		flat = reflect.MakeSlice(reflect.SliceOf(typ), 0, 0)
	}
	if rank < 2 || !flat.IsValid() {
		return nil, false, nil
	}
	// The dimensions are the first element's at each depth (0 past an
	// empty slice); every slice at a depth must have that length.
	dims := make([]int, rank)
	for d, v := 0, rv; d < rank; d++ {
		dims[d] = v.Len()
		if v.Len() == 0 {
			break
		}
		v = v.Index(0)
	}
	var walk func(v reflect.Value, d int, at []int) error
	walk = func(v reflect.Value, d int, at []int) error {
		if v.Len() != dims[d] {
			return fmt.Errorf("ragged constant %T: the slice at %v has %d elements, the first at its depth %d", value, at, v.Len(), dims[d])
		}
		if d == rank-1 {
			flat = reflect.AppendSlice(flat, v)
			return nil
		}
		for i := range v.Len() {
			if err := walk(v.Index(i), d+1, append(at, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(rv, 0, nil); err != nil {
		return nil, true, err
	}
	data := flat.Interface()
	if ints, isInt := data.([]int); isInt {
		data = arrayInts(ints)
	}
	t, err = tensor.FromSlice(data, dims...)
	return t, true, err
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
