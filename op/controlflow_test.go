package op_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// fn builds a function whose arguments and results are written as
// placeholders are ("float32[?,3]"), separated by ";": a signature is all
// shape inference sees of a function.
func fn(args, rets string) *graph.Func {
	s := graph.NewScope()
	f := &graph.Func{Graph: s.Graph()}
	for _, a := range split(args) {
		f.Args = append(f.Args, ph(a)(s))
	}
	for _, r := range split(rets) {
		f.Rets = append(f.Rets, ph(r)(s))
	}
	if err := s.Err(); err != nil {
		panic(err)
	}
	return f
}

func split(specs string) []string {
	if specs == "" {
		return nil
	}
	return strings.Split(specs, ";")
}

func TestIfInfer(t *testing.T) {
	p := ph("bool[]")
	checkInfer(t, []inferCase{
		{"If", []inferIn{p, ph("float32[2,3]")}, map[string]any{
			"then_branch": fn("float32[2,3]", "float32[2,3];int32[]"),
			"else_branch": fn("float32[?,3]", "float32[5,3];int32[]")}, "float32[?,3];int32[]"},
		{"If", []inferIn{p}, map[string]any{
			"then_branch": fn("", "float32[2]"), "else_branch": fn("", "float32[2,1]")}, "float32<unknown>"},
		{"If", []inferIn{p}, map[string]any{"then_branch": fn("", ""), "else_branch": fn("", "")}, ""},
		{"If", []inferIn{ph("int32[]")}, map[string]any{"then_branch": fn("", ""), "else_branch": fn("", "")},
			"error: cond must be bool"},
		{"If", []inferIn{ph("bool[2]")}, map[string]any{"then_branch": fn("", ""), "else_branch": fn("", "")},
			"error: cond must be a scalar"},
		{"If", []inferIn{p, ph("float32[2]")}, map[string]any{"then_branch": fn("float32[3]", ""), "else_branch": fn("float32[2]", "")},
			"error: then_branch argument 0 has shape [3]|passes [2]"},
		{"If", []inferIn{p, ph("float32[2]")}, map[string]any{"then_branch": fn("float32[2]", ""), "else_branch": fn("", "")},
			"error: else_branch takes 0 arguments"},
		{"If", []inferIn{p}, map[string]any{"then_branch": fn("", "float32[]"), "else_branch": fn("", "float64[]")},
			"error: result 0 is float32 in then_branch and float64"},
		{"If", []inferIn{p}, map[string]any{"then_branch": fn("", "float32[]")}, "error: required attribute \"else_branch\""},
	})
}

func TestWhileInfer(t *testing.T) {
	cond := fn("int32[];float32[?,4];float32[4]", "bool[]")
	checkInfer(t, []inferCase{
		// Loop variables i and h, the invariant w: outputs i, h, the
		// iteration count, the histories of i and h.
		{"While", []inferIn{ph("int32[]"), ph("float32[2,4]"), ph("float32[4]")}, map[string]any{
			"cond": cond, "body": fn("int32[];float32[?,4];float32[4]", "int32[];float32[3,4]")},
			"int32[];float32[?,4];int32[];int32[?];float32[?,?,4]"},
		{"While", []inferIn{ph("int32[]"), ph("float32[2,4]"), ph("float32[4]")}, map[string]any{
			"cond": cond, "body": fn("int32[];float32[?,4];float32[4]", "int32[];float32[3,5]")},
			"error: loop variable 1 has shape [?,4] on entry and [3,5]|shape invariant"},
		{"While", []inferIn{ph("int32[]"), ph("float32[2,4]"), ph("float32[4]")}, map[string]any{
			"cond": cond, "body": fn("int32[];float32[?,4];float32[4]", "float32[];float32[3,4]")},
			"error: loop variable 0 enters the loop as int32 and leaves the body as float32"},
		{"While", []inferIn{ph("int32[]"), ph("float32[2,4]"), ph("float32[4]")}, map[string]any{
			"cond": fn("int32[];float32[?,4];float32[4]", "int32[]"), "body": fn("int32[];float32[?,4];float32[4]", "int32[]")},
			"error: cond must return one bool scalar"},
		{"While", []inferIn{ph("int32[]")}, map[string]any{
			"cond": fn("int32[]", "bool[]"), "body": fn("int32[]", "")}, "error: body returns no loop variables"},
		{"While", []inferIn{ph("int32[]")}, map[string]any{
			"cond": fn("int32[]", "bool[]"), "body": fn("int32[]", "int32[];int32[]")}, "error: body returns 2 tensors for 1 inputs"},
		{"While", []inferIn{ph("int32[]"), ph("int32[]")}, map[string]any{
			"cond": fn("int32[]", "bool[]"), "body": fn("int32[];int32[]", "int32[]")}, "error: cond takes 1 arguments, the op passes 2"},
		{"While", []inferIn{ph("int32[]")}, map[string]any{
			"cond": fn("int32[]", "bool[]"), "body": fn("int32[]", "int32[]"), "maximum_iterations": "3"},
			"error: attribute \"maximum_iterations\": want int"},
	})
}

func TestRelaxShapes(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"[2,3]", "[2,3]", "[2,3]"},
		{"[2,3]", "[5,3]", "[?,3]"},
		{"[2,?]", "[2,3]", "[2,?]"},
		{"[2]", "[2,1]", "<unknown>"},
		{"<unknown>", "[]", "<unknown>"},
		{"[]", "[]", "[]"},
	} {
		a, _ := tensor.ParseShape(c.a)
		b, _ := tensor.ParseShape(c.b)
		got := op.RelaxShapes(a, b).String()
		if got != c.want {
			t.Errorf("RelaxShapes(%s, %s) = %s, want %s", c.a, c.b, got, c.want)
		}
	}
}
