package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Test-only ops; their names start with "Sess" so that they never collide
// with real ops.

var runs atomic.Int64 // SessCount invocations

func init() {
	op.Register(op.Def{Name: "SessCount", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("SessCount", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		runs.Add(1)
		c.Outputs[0] = c.Inputs[0]
		return nil
	}))
	// SessAccumulate sets ref to ref + value (float32) and outputs the new value.
	op.Register(op.Def{Name: "SessAccumulate", Inputs: []op.Arg{{Name: "ref", Ref: true}, {Name: "value"}},
		Stateful: true, Infer: op.PassThrough})
	kernel.Register("SessAccumulate", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		var out *tensor.Tensor
		err := c.Refs[0].Update(func(v *tensor.Tensor) error {
			d, add := v.Float32s(), c.Inputs[1].Float32s()
			if len(d) != len(add) {
				return c.Errorf("sizes differ: %d and %d", len(d), len(add))
			}
			for i := range d {
				d[i] += add[i]
			}
			out = v.Clone()
			return nil
		})
		c.Outputs[0] = out
		return err
	}))
	op.Register(op.Def{Name: "SessSet", Inputs: []op.Arg{{Name: "ref", Ref: true}, {Name: "value"}},
		Stateful: true, Infer: func(c *op.InferContext) error { return nil }})
	kernel.Register("SessSet", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		return c.Refs[0].Assign(c.Inputs[1])
	}))
}

func f32(v ...float32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }

// counterGraph builds a variable "v" of 2 floats with an initializer "init"
// (sets it to 0), an increment "inc" (adds the fed "step"), and a read "read".
func counterGraph(t testing.TB) (g *graph.Graph, v, step, inc, read graph.Output, init *graph.Node) {
	t.Helper()
	s := graph.NewScope()
	v = s.Out("Variable", "v", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(2)})
	init = s.AddNode("SessSet", "init", []graph.Output{v, ops.Const(s, []float32{0, 0})}, nil)
	step = ops.Placeholder(s, "step", tensor.Float32, tensor.MakeShape(2))
	inc = s.Out("SessAccumulate", "inc", []graph.Output{v, step}, nil)
	read = s.Out("SessCount", "read", []graph.Output{v}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph(), v, step, inc, read, init
}

func TestVariablesKeepValuesAcrossRuns(t *testing.T) {
	g, _, step, inc, read, init := counterGraph(t)
	sess, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{step: f32(1, 10)}, []graph.Output{inc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := f32(float32(i), float32(10*i)); !tensor.Equal(out[0], want) {
			t.Fatalf("after %d increments: %v, want %v", i, out[0], want)
		}
	}
	out, err := sess.RunNamed(ctx, nil, []string{"read:0", "read"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(out[0], f32(3, 30)) || !tensor.Equal(out[1], f32(3, 30)) {
		t.Errorf("read %v %v, want [3 30] twice", out[0], out[1])
	}
	// Another session on the same resources sees the values.
	other, _ := session.New(g, session.WithResources(sess.Resources()))
	if out, err := other.Run(ctx, nil, []graph.Output{read}, nil); err != nil || !tensor.Equal(out[0], f32(3, 30)) {
		t.Errorf("shared resources: got %v, %v", out, err)
	}
	// A fresh session has fresh variables.
	fresh, _ := session.New(g)
	if _, err := fresh.Run(ctx, nil, []graph.Output{read}, nil); !errors.Is(err, kernel.ErrUninitialized) {
		t.Errorf("fresh session read: got %v, want ErrUninitialized", err)
	}
}

func TestRunNamed(t *testing.T) {
	g, _, _, _, _, _ := counterGraph(t)
	sess, _ := session.New(g)
	ctx := context.Background()
	if _, err := sess.RunNamed(ctx, nil, nil, []string{"init"}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.RunNamed(ctx, map[string]*tensor.Tensor{"step": f32(2, 3)}, []string{"inc:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(out[0], f32(2, 3)) {
		t.Errorf("inc = %v, want [2 3]", out[0])
	}
}

func TestErrors(t *testing.T) {
	g, v, step, inc, read, init := counterGraph(t)
	s := graph.NewScopeWithGraph(g)
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	useX := s.Out("SessCount", "use_x", []graph.Output{x}, nil)
	foreign := ops.Const(graph.NewScope(), float32(1))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	_ = v
	type feeds = map[graph.Output]*tensor.Tensor
	type named = map[string]*tensor.Tensor
	tests := []struct {
		name string
		run  func(*session.Session) ([]*tensor.Tensor, error)
		is   error
		want []string
	}{
		{"nil feed", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), feeds{x: nil}, []graph.Output{useX}, nil)
		}, nil, []string{"x:0", "nil"}},
		{"feed dtype", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), feeds{x: tensor.New(tensor.Int32, 1, 2)}, []graph.Output{useX}, nil)
		}, nil, []string{"x:0", "float32[?,2]", "int32[1,2]"}},
		{"feed shape", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), feeds{x: tensor.New(tensor.Float32, 3)}, []graph.Output{useX}, nil)
		}, nil, []string{"x:0", "float32[?,2]", "float32[3]"}},
		{"unfed placeholder", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), nil, []graph.Output{useX}, nil)
		}, nil, []string{`placeholder "x" must be fed`}},
		{"uninitialized variable", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), nil, []graph.Output{read}, nil)
		}, kernel.ErrUninitialized, []string{`"v"`, "initializer"}},
		{"update of an uninitialized variable", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), feeds{step: f32(1, 1)}, []graph.Output{inc}, nil)
		}, kernel.ErrUninitialized, []string{`"v"`}},
		{"unknown fetch name", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.RunNamed(context.Background(), nil, []string{"nope:0"}, nil)
		}, graph.ErrNotFound, []string{"nope"}},
		{"unknown feed name", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.RunNamed(context.Background(), named{"missing": f32(1)}, []string{"read"}, nil)
		}, graph.ErrNotFound, []string{"missing"}},
		{"unknown target name", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.RunNamed(context.Background(), nil, nil, []string{"ghost"})
		}, graph.ErrNotFound, []string{"ghost"}},
		{"fetch a node without outputs", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.RunNamed(context.Background(), nil, []string{"init"}, nil)
		}, nil, []string{"init", "no outputs", "target"}},
		{"fetch a node without outputs by Output", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), nil, []graph.Output{{Node: init}}, nil)
		}, nil, []string{"init", "no outputs"}},
		{"fetch from another graph", func(s *session.Session) ([]*tensor.Tensor, error) {
			return s.Run(context.Background(), nil, []graph.Output{foreign}, nil)
		}, nil, []string{"another graph"}},
		{"cancelled context", func(s *session.Session) ([]*tensor.Tensor, error) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return s.Run(ctx, feeds{x: tensor.New(tensor.Float32, 1, 2)}, []graph.Output{useX}, nil)
		}, context.Canceled, nil},
		{"run after close", func(s *session.Session) ([]*tensor.Tensor, error) {
			s.Close()
			return s.Run(context.Background(), feeds{x: tensor.New(tensor.Float32, 1, 2)}, []graph.Output{useX}, nil)
		}, session.ErrClosed, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sess, err := session.New(g)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tc.run(sess)
			if err == nil {
				t.Fatalf("got %v, want an error", out)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestGraphGrowsBetweenRuns(t *testing.T) {
	s := graph.NewScope()
	a := ops.Const(s, []float32{1, 2})
	b := s.Out("SessCount", "b", []graph.Output{a}, nil)
	sess, _ := session.New(s.Graph())
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, []graph.Output{b}, nil); err != nil {
		t.Fatal(err)
	}
	c := s.Out("SessCount", "c", []graph.Output{b}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	before := runs.Load()
	out, err := sess.Run(ctx, nil, []graph.Output{b, c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(out[1], f32(1, 2)) {
		t.Errorf("c = %v", out[1])
	}
	if n := runs.Load() - before; n != 2 {
		t.Errorf("%d counting kernels ran, want 2", n)
	}
}

// TestConcurrentRuns runs increments and reads from many goroutines on one
// session (run it with -race): every increment is applied exactly once.
func TestConcurrentRuns(t *testing.T) {
	g, _, step, inc, read, init := counterGraph(t)
	sess, _ := session.New(g)
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	const workers, steps = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range steps {
				var err error
				if (w+i)%2 == 0 {
					_, err = sess.Run(ctx, map[graph.Output]*tensor.Tensor{step: f32(1, 2)}, []graph.Output{inc}, nil)
				} else {
					_, err = sess.RunNamed(ctx, nil, []string{"read"}, nil)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d step %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{read}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := float32(workers * steps / 2)
	if want := f32(n, 2*n); !tensor.Equal(out[0], want) {
		t.Errorf("v = %v, want %v", out[0], want)
	}
}
