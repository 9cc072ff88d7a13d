package ops_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

func stateSession(t *testing.T, g *graph.Graph) *session.Session {
	t.Helper()
	sess, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

func TestNewVariableNamesAndCollections(t *testing.T) {
	s := graph.NewScope()
	layer := s.SubScope("dense").WithDevice("/job:ps/task:0")
	w := ops.NewVariable(layer, "W", tensor.Float32, []int{2, 3}, ops.GlorotUniformInit(1))
	w2 := ops.NewVariable(layer, "W2", tensor.Float64, []int{3}, ops.ZerosInit())
	dep := ops.Group(s, "dep")
	c := ops.NewVariable(s.WithControlDependencies(dep), "count", tensor.Int64, nil, ops.ZerosInit(), ops.NotTrainable())
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(c.Node().ControlInputs()) != 0 || len(c.Initializer().ControlInputs()) != 0 {
		t.Error("a variable or its initializer inherited the scope's control dependencies")
	}
	checks := []struct{ got, want string }{
		{w.Name(), "dense/W"},
		{w.String(), "dense/W float32[2,3]"},
		{w.Initializer().Name(), "dense/W/Assign"},
		{w2.Name(), "dense/W2"},
		{w2.Initializer().Name(), "dense/W2/Assign"},
		{c.String(), "count int64[]"},
		{w.Value().Name(), "dense/W:0"},
		{w.Node().Device(), "/job:ps/task:0"},
		{w.Initializer().Device(), "/job:ps/task:0"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for _, n := range s.Graph().Nodes() {
		if strings.HasPrefix(n.Name(), "dense/W/Initializer/") && n.Device() != "/job:ps/task:0" {
			t.Errorf("initializer node %s is on %q", n, n.Device())
		}
	}

	names := func(vs []*ops.Variable) string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Name())
			if v.Initializer() == nil {
				out = append(out, "(no initializer)")
			}
		}
		return strings.Join(out, ",")
	}
	// The collections survive serialisation.
	b, err := s.Graph().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := graph.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*graph.Graph{s.Graph(), g2} {
		if got, want := names(ops.GlobalVariables(g)), "dense/W,dense/W2,count"; got != want {
			t.Errorf("GlobalVariables = %s, want %s", got, want)
		}
		if got, want := names(ops.TrainableVariables(g)), "dense/W,dense/W2"; got != want {
			t.Errorf("TrainableVariables = %s, want %s", got, want)
		}
		if v := ops.LookupVariable(g, "count"); v == nil || v.Initializer() == nil || v.Initializer().Name() != "count/Assign" {
			t.Errorf("LookupVariable(count) = %v", v)
		}
		if v := ops.LookupVariable(g, "count/Assign"); v != nil {
			t.Errorf("LookupVariable(count/Assign) = %v, want nil", v)
		}
	}
}

func TestNewVariableErrors(t *testing.T) {
	cases := []struct {
		name  string
		build func(s *graph.Scope)
		want  []string
	}{
		{"no initializer", func(s *graph.Scope) {
			ops.NewVariable(s, "v", tensor.Float32, []int{2}, nil)
		}, []string{"v", "no initializer"}},
		{"negative dimension", func(s *graph.Scope) {
			ops.NewVariable(s, "v", tensor.Float32, []int{2, -1}, ops.ZerosInit())
		}, []string{"v", "[2,?]"}},
		{"assign of the wrong shape", func(s *graph.Scope) {
			v := ops.NewVariable(s, "v", tensor.Float32, []int{2}, ops.ZerosInit())
			ops.Assign(s, v.Value(), ops.Const(s, []float32{1, 2, 3}))
		}, []string{"Assign", "float32[3]", "float32[2]"}},
		{"assign of the wrong dtype", func(s *graph.Scope) {
			v := ops.NewVariable(s, "v", tensor.Float32, []int{2}, ops.ZerosInit())
			ops.AssignAdd(s, v.Value(), ops.Const(s, []float64{1, 2}))
		}, []string{"AssignAdd", "float64[2]", "float32[2]"}},
		{"assign to a non-variable", func(s *graph.Scope) {
			ops.Assign(s, ops.Const(s, []float32{1}), ops.Const(s, []float32{1}))
		}, []string{"Assign", "must be a variable"}},
	}
	for _, tc := range cases {
		s := graph.NewScope()
		tc.build(s)
		err := s.Err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
			}
		}
	}
}

func TestVariablesInitializeAndAssign(t *testing.T) {
	s := graph.NewScope()
	z := ops.NewVariable(s, "z", tensor.Float32, []int{2, 2}, ops.ZerosInit())
	o := ops.NewVariable(s, "o", tensor.Float64, []int{3}, ops.OnesInit())
	c := ops.NewVariable(s, "c", tensor.Int32, []int{}, ops.ConstantInit(7))
	initialized := ops.IsVariableInitialized(s, c.Value())
	initZ := ops.VariablesInitializer(s, z)
	initAll := ops.GlobalVariablesInitializer(s)
	add := ops.AssignAdd(s, c.Value(), ops.Const(s, int32(3)))
	sub := ops.AssignSub(s, o.Value(), ops.Const(s, []float64{1, 2, 3}))
	set := ops.Assign(s, z.Value(), ops.Const(s, tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if initAll.Name() != "init_1" || len(initAll.ControlInputs()) != 3 {
		t.Errorf("initializer %s depends on %d nodes, want 3", initAll, len(initAll.ControlInputs()))
	}
	sess := stateRun2(t, s.Graph())

	if out := sess.fetch(initialized); out[0].Bools()[0] {
		t.Error("c is initialized before the initializer ran")
	}
	if _, err := sess.Run(context.Background(), nil, []graph.Output{c.Value()}, nil); !errors.Is(err, kernel.ErrUninitialized) {
		t.Errorf("reading an uninitialized variable: %v, want ErrUninitialized", err)
	}
	sess.run(initZ)
	if out := sess.fetch(z.Value(), initialized); out[0].NumElements() != 4 || out[0].Float64At(3) != 0 || out[1].Bools()[0] {
		t.Errorf("after initializing z: z = %v, c initialized = %v", out[0], out[1])
	}
	sess.run(initAll)
	out := sess.fetch(z.Value(), o.Value(), c.Value(), initialized)
	want := []string{"float32[2,2]{0 0 0 0}", "float64[3]{1 1 1}", "int32[]{7}", "bool[]{1}"}
	for i := range want {
		if out[i].String() != want[i] {
			t.Errorf("after init: fetch %d = %v, want %s", i, out[i], want[i])
		}
	}
	out = sess.fetch(add, sub, set)
	want = []string{"int32[]{10}", "float64[3]{0 -1 -2}", "float32[2,2]{1 2 3 4}"}
	for i := range want {
		if out[i].String() != want[i] {
			t.Errorf("assignment %d returned %v, want %s", i, out[i], want[i])
		}
	}
	if out := sess.fetch(c.Value()); out[0].String() != "int32[]{10}" {
		t.Errorf("c = %v after AssignAdd, want 10", out[0])
	}
}

type stateSess struct {
	*session.Session
	t *testing.T
}

func stateRun2(t *testing.T, g *graph.Graph) stateSess { return stateSess{stateSession(t, g), t} }

func (s stateSess) run(targets ...*graph.Node) {
	s.t.Helper()
	if _, err := s.Run(context.Background(), nil, nil, targets); err != nil {
		s.t.Fatal(err)
	}
}

func (s stateSess) fetch(fetches ...graph.Output) []*tensor.Tensor {
	s.t.Helper()
	out, err := s.Run(context.Background(), nil, fetches, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// TestNewVariableRefusesARepeatedName: a second variable of the same name
// is refused, as tf.get_variable does, rather than renamed: a model
// function that made "w" twice would otherwise get w and w_1 in its first
// tower and w twice in the towers that reuse its variables.
func TestNewVariableRefusesARepeatedName(t *testing.T) {
	s := graph.NewScope()
	build := func(s *graph.Scope) (*ops.Variable, *ops.Variable) {
		return ops.NewVariable(s, "w", tensor.Float32, []int{2}, ops.ZerosInit()),
			ops.NewVariable(s, "w", tensor.Float32, []int{2}, ops.ZerosInit())
	}
	if _, second := build(s.NameScope("tower_0")); second != nil || s.Err() == nil ||
		!strings.Contains(s.Err().Error(), `variable "w" already exists`) || !strings.Contains(s.Err().Error(), "ReuseVariables") {
		t.Errorf("a repeated name: %v, error %v; want it refused, naming the variable and ReuseVariables", second, s.Err())
	}
	// Within a scope of its own, the name is free.
	s = graph.NewScope()
	a := ops.NewVariable(s.SubScope("a"), "w", tensor.Float32, []int{2}, ops.ZerosInit())
	b := ops.NewVariable(s.SubScope("b"), "w", tensor.Float32, []int{2}, ops.ZerosInit())
	if err := s.Err(); err != nil || a.Name() != "a/w" || b.Name() != "b/w" {
		t.Errorf("variables of subscopes: %v %v, %v", a, b, err)
	}
}

func TestReuseVariablesSharesAcrossNameScopes(t *testing.T) {
	s := graph.NewScope()
	build := func(s *graph.Scope) *ops.Variable {
		return ops.NewVariable(s.SubScope("dense"), "W", tensor.Float32, []int{2, 3}, ops.ZerosInit())
	}
	first := build(s.NameScope("tower_0"))
	second := build(s.NameScope("tower_1").ReuseVariables())
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if first.Name() != "dense/W" || second != nil && second.Node() != first.Node() {
		t.Fatalf("got variables %v and %v; want one variable dense/W", first, second)
	}
	if n := len(ops.GlobalVariables(s.Graph())); n != 1 {
		t.Fatalf("%d variables; want 1", n)
	}
	for _, tc := range []struct {
		name  string
		dt    tensor.DType
		shape []int
		want  string
	}{
		{"missing", tensor.Float32, []int{2, 3}, "does not exist"},
		{"W", tensor.Float32, []int{3, 2}, "reusing it as"},
		{"W", tensor.Int32, []int{2, 3}, "reusing it as"},
	} {
		s2 := graph.NewScopeWithGraph(s.Graph())
		if v := ops.NewVariable(s2.ReuseVariables(), "dense/"+tc.name, tc.dt, tc.shape, ops.ZerosInit()); v != nil {
			t.Errorf("%s %v%v: got %v; want an error", tc.name, tc.dt, tc.shape, v)
		}
		if err := s2.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v%v: error %v; want %q", tc.name, tc.dt, tc.shape, err, tc.want)
		}
	}
}
