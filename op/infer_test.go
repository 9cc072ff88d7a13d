package op_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// inferIn builds one input of a shape-inference case.
type inferIn func(s *graph.Scope) graph.Output

// inferCase is one row of a shape-inference table: an op over inputs with
// attributes, and its outputs written "float32[?,3];int64[]", or
// "error: a|b" for an error that must contain a, b and the op's name.
type inferCase struct {
	op    string
	in    []inferIn
	attrs map[string]any
	want  string
}

// ph is a placeholder input written "float32[?,3]" (or "int32<unknown>").
func ph(spec string) inferIn {
	return func(s *graph.Scope) graph.Output {
		i := strings.IndexAny(spec, "[<")
		dt, err := tensor.ParseDType(spec[:i])
		if err != nil {
			panic(err)
		}
		sh, err := tensor.ParseShape(spec[i:])
		if err != nil {
			panic(err)
		}
		return s.Out("Placeholder", "x", nil, map[string]any{"dtype": dt, "shape": sh})
	}
}

// checkInfer builds the node of every case and compares its inferred
// outputs, or its error, with the case's.
func checkInfer(t *testing.T, cases []inferCase) {
	t.Helper()
	for _, c := range cases {
		s := graph.NewScope()
		var ins []graph.Output
		for _, f := range c.in {
			ins = append(ins, f(s))
		}
		n := s.AddNode(c.op, "", ins, c.attrs)
		name := fmt.Sprintf("%s%v", c.op, c.attrs)
		if want, ok := strings.CutPrefix(c.want, "error: "); ok {
			err := s.Err()
			if err == nil {
				t.Errorf("%s: no error, want %q", name, want)
				continue
			}
			for _, w := range append(strings.Split(want, "|"), c.op) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not contain %q", name, err, w)
				}
			}
			continue
		}
		if err := s.Err(); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var got []string
		for i := range n.NumOutputs() {
			o := n.Output(i)
			got = append(got, o.DType().String()+o.Shape().String())
		}
		if g := strings.Join(got, ";"); g != c.want {
			t.Errorf("%s: got %s, want %s", name, g, c.want)
		}
	}
}
