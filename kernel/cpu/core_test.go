package cpu_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// coreCompute builds n's CPU kernel and runs it once on the given inputs.
func coreCompute(t *testing.T, n *graph.Node, res *kernel.Resources, inputs ...*tensor.Tensor) ([]*tensor.Tensor, error) {
	t.Helper()
	f, err := kernel.Lookup(n.Op(), kernel.CPU)
	if err != nil {
		t.Fatal(err)
	}
	k, err := f(n)
	if err != nil {
		t.Fatalf("building the kernel of %s: %v", n, err)
	}
	c := &kernel.Context{Ctx: context.Background(), Node: n, Inputs: inputs, Resources: res,
		Outputs: make([]*tensor.Tensor, n.NumOutputs())}
	err = k.Compute(c)
	return c.Outputs, err
}

func TestCoreKernels(t *testing.T) {
	s := graph.NewScope()
	val := tensor.MustFromSlice([]float32{1, 2, 3}, 3)
	cst := ops.ConstNamed(s, "c", val)
	id := ops.Identity(s, cst)
	sg := ops.StopGradient(s, cst)
	noop := ops.Group(s, "noop")
	ph := ops.Placeholder(s, "p", tensor.Float32, tensor.MakeShape(3))
	v := s.Out("Variable", "v", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(3)})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()

	tests := []struct {
		name    string
		node    *graph.Node
		inputs  []*tensor.Tensor
		want    []*tensor.Tensor
		errWant []string
	}{
		{"Const", cst.Node, nil, []*tensor.Tensor{val}, nil},
		{"Identity", id.Node, []*tensor.Tensor{val}, []*tensor.Tensor{val}, nil},
		{"StopGradient", sg.Node, []*tensor.Tensor{val}, []*tensor.Tensor{val}, nil},
		{"NoOp", noop, nil, []*tensor.Tensor{}, nil},
		{"unfed Placeholder", ph.Node, nil, nil, []string{`placeholder "p" must be fed`, "p (Placeholder)"}},
		{"uninitialized Variable", v.Node, nil, nil, []string{`"v"`, "initializer", "v (Variable)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := coreCompute(t, tc.node, res, tc.inputs...)
			if tc.errWant != nil {
				if err == nil {
					t.Fatalf("got %v, want an error", out)
				}
				for _, w := range tc.errWant {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				if !tensor.Equal(out[i], tc.want[i]) {
					t.Errorf("output %d = %v, want %v", i, out[i], tc.want[i])
				}
			}
		})
	}
}

func TestCoreVariable(t *testing.T) {
	s := graph.NewScope()
	v := s.Out("Variable", "w", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(2)})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	if _, err := coreCompute(t, v.Node, res); !errors.Is(err, kernel.ErrUninitialized) {
		t.Fatalf("reading an uninitialized variable: got %v, want ErrUninitialized", err)
	}
	vr, err := res.Variable("w", tensor.Float32, tensor.MakeShape(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := vr.Assign(tensor.MustFromSlice([]float32{4, 5}, 2)); err != nil {
		t.Fatal(err)
	}
	out, err := coreCompute(t, v.Node, res)
	if err != nil {
		t.Fatal(err)
	}
	if want := tensor.MustFromSlice([]float32{4, 5}, 2); !tensor.Equal(out[0], want) {
		t.Fatalf("read %v, want %v", out[0], want)
	}
	// The output shares the variable's buffer; an update moves the
	// variable to another buffer, so the tensor read keeps its value.
	if err := vr.Update(func(val *tensor.Tensor) error { val.Float32s()[0] = 100; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := tensor.MustFromSlice([]float32{4, 5}, 2); !tensor.Equal(out[0], want) {
		t.Errorf("a read changed under an update: %v, want %v", out[0], want)
	}
	if again, _ := coreCompute(t, v.Node, res); again[0].Float32s()[0] != 100 {
		t.Errorf("read after the update: %v, want [100 5]", again[0])
	}
	// A variable of the same name with another shape is a clear error.
	s2 := graph.NewScope()
	v2 := s2.Out("Variable", "w", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(3)})
	if _, err := coreCompute(t, v2.Node, res); err == nil || !strings.Contains(err.Error(), "w") {
		t.Errorf("shape clash: got %v, want an error naming w", err)
	}
}
