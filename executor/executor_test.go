package executor_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/internal/stepctx"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Test-only ops. Their names start with "Exec" so that they never collide
// with real ops.

// counts holds the number of kernel invocations per node name.
var counts sync.Map // string -> *atomic.Int64

func count(name string) int64 {
	if v, ok := counts.Load(name); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func resetCounts() { counts.Clear() }

// meet holds the channels of the ExecMeet kernels of the current test.
var meet [2]chan struct{}

// blockStarted is signalled by ExecBlock when it starts waiting.
var blockStarted = make(chan struct{}, 1)

func init() {
	scalarOut := func(c *op.InferContext) error {
		c.SetOutput(0, tensor.Float32, tensor.ScalarShape())
		return nil
	}
	op.Register(op.Def{Name: "ExecCount", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecCount", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		v, _ := counts.LoadOrStore(c.Node.Name(), new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		c.Outputs[0] = c.Inputs[0]
		return nil
	}))

	// ExecAdd adds two float32 tensors of one shape.
	op.Register(op.Def{Name: "ExecAdd", Inputs: []op.Arg{{Name: "a"}, {Name: "b"}}, Infer: op.PassThrough})
	kernel.Register("ExecAdd", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		a, b := c.Inputs[0].Float32s(), c.Inputs[1].Float32s()
		if len(a) != len(b) {
			return c.Errorf("sizes differ: %d and %d", len(a), len(b))
		}
		out := c.Alloc(0, tensor.Float32, c.Inputs[0].Shape()...).Float32s()
		for i := range out {
			out[i] = a[i] + b[i]
		}
		return nil
	}))

	// ExecMeet signals its own channel and waits for its partner's: it
	// completes only if both run at the same time.
	op.Register(op.Def{Name: "ExecMeet", Inputs: []op.Arg{{Name: "x"}}, Attrs: []op.Attr{{Name: "me", Type: op.AttrInt}}, Infer: scalarOut})
	kernel.Register("ExecMeet", kernel.CPU, func(n *graph.Node) (kernel.Kernel, error) {
		me := n.AttrInt("me")
		return kernel.Func(func(c *kernel.Context) error {
			close(meet[me])
			select {
			case <-meet[1-me]:
			case <-time.After(5 * time.Second):
				return c.Errorf("partner never ran concurrently")
			}
			c.Outputs[0] = tensor.Scalar(float32(me))
			return nil
		}), nil
	})

	op.Register(op.Def{Name: "ExecFail", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecFail", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		return c.Errorf("boom")
	}))
	op.Register(op.Def{Name: "ExecPlainFail", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecPlainFail", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		return errors.New("plain failure")
	}))
	op.Register(op.Def{Name: "ExecPanic", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecPanic", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		var m map[string]int
		m["x"] = 1 // nil map write
		return nil
	}))
	op.Register(op.Def{Name: "ExecWrongDType", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecWrongDType", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		c.Alloc(0, tensor.Float64, c.Inputs[0].Shape()...)
		return nil
	}))
	op.Register(op.Def{Name: "ExecNoOutput", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecNoOutput", kernel.CPU, kernel.Simple(func(c *kernel.Context) error { return nil }))
	op.Register(op.Def{Name: "ExecNoKernel", Infer: scalarOut})

	// ExecBlock waits until its context is cancelled.
	op.Register(op.Def{Name: "ExecBlock", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecBlock", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		select {
		case blockStarted <- struct{}{}:
		default:
		}
		<-c.Ctx.Done()
		return c.Ctx.Err()
	}))

	// ExecWait waits for ExecSignal; it declares that it may block.
	op.Register(op.Def{Name: "ExecWait", Infer: scalarOut})
	kernel.Register("ExecWait", kernel.CPU, func(*graph.Node) (kernel.Kernel, error) { return execWait{}, nil })
	op.Register(op.Def{Name: "ExecSignal", Infer: scalarOut})
	kernel.Register("ExecSignal", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		close(signal)
		c.Outputs[0] = tensor.Scalar(float32(1))
		return nil
	}))

	// ExecDetach forwards its input on a goroutine of its own (it declares
	// that it may block, and never does).
	op.Register(op.Def{Name: "ExecDetach", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecDetach", kernel.CPU, func(*graph.Node) (kernel.Kernel, error) { return execDetach{}, nil })

	// ExecLease is a stateful sink that takes its input's lease, as Send does.
	op.Register(op.Def{Name: "ExecLease", Inputs: []op.Arg{{Name: "x"}}, Stateful: true,
		Infer: func(c *op.InferContext) error { return nil }})
	kernel.Register("ExecLease", kernel.CPU, func(*graph.Node) (kernel.Kernel, error) { return execLease{}, nil })

	// ExecStepID outputs the step's ID.
	op.Register(op.Def{Name: "ExecStepID", Infer: func(c *op.InferContext) error {
		c.SetOutput(0, tensor.Int64, tensor.ScalarShape())
		return nil
	}})
	kernel.Register("ExecStepID", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		c.Outputs[0] = tensor.Scalar(c.Step.ID)
		return nil
	}))

	// ExecAssign stores value into the variable behind its ref input.
	op.Register(op.Def{Name: "ExecAssign", Inputs: []op.Arg{{Name: "ref", Ref: true}, {Name: "value"}},
		Stateful: true, Infer: func(c *op.InferContext) error { return nil }})
	kernel.Register("ExecAssign", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		return c.Refs[0].Assign(c.Inputs[1])
	}))
}

// signal is closed by ExecSignal and awaited by ExecWait.
var signal chan struct{}

type execWait struct{}

func (execWait) MayBlock() bool { return true }

func (execWait) Compute(c *kernel.Context) error {
	select {
	case <-signal:
	case <-time.After(5 * time.Second):
		return c.Errorf("never signalled")
	}
	c.Outputs[0] = tensor.Scalar(float32(2))
	return nil
}

type execDetach struct{}

func (execDetach) MayBlock() bool { return true }

func (execDetach) Compute(c *kernel.Context) error {
	c.Outputs[0] = c.Inputs[0]
	return nil
}

type execLease struct{}

func (execLease) LeasesInputs() bool { return true }

func (execLease) Compute(c *kernel.Context) error {
	for _, l := range c.InputLeases {
		l.Release()
	}
	return nil
}

func f32(v ...float32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }

func variable(s *graph.Scope, name string, shape ...int) graph.Output {
	return s.Out("Variable", name, nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(shape...)})
}

func mustNew(t *testing.T, g *graph.Graph, feeds, fetches []graph.Output, targets []*graph.Node, res *kernel.Resources) *executor.Executor {
	t.Helper()
	e, err := executor.New(g, graph.Signature{Feeds: feeds, Fetches: fetches, Targets: targets}, res)
	if err != nil {
		t.Fatalf("executor.New: %v", err)
	}
	return e
}

func TestPruning(t *testing.T) {
	s := graph.NewScope()
	a := ops.ConstNamed(s, "a", []float32{1, 2})
	b := s.Out("ExecCount", "b", []graph.Output{a}, nil)
	c := s.Out("ExecCount", "c", []graph.Output{b}, nil)
	d := s.Out("ExecCount", "d", []graph.Output{a}, nil)
	p := ops.Placeholder(s, "p", tensor.Float32, tensor.MakeShape(2))
	e := s.Out("ExecCount", "e", []graph.Output{p}, nil)
	// f runs after the placeholder p: feeding p satisfies the dependency.
	f := s.WithControlDependencies(p.Node).Out("ExecCount", "f", []graph.Output{a}, nil)
	grp := ops.Group(s, "grp", d.Node)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	g := s.Graph()

	tests := []struct {
		name    string
		feeds   []graph.Output
		fetches []graph.Output
		targets []*graph.Node
		nodes   int              // size of the pruned subgraph
		want    map[string]int64 // kernel invocations per counting node
	}{
		{"chain", nil, []graph.Output{c}, nil, 3, map[string]int64{"b": 1, "c": 1}},
		{"branch", nil, []graph.Output{d}, nil, 2, map[string]int64{"d": 1}},
		{"feed cuts the walk", []graph.Output{b}, []graph.Output{c}, nil, 1, map[string]int64{"c": 1}},
		{"fetch a feed", []graph.Output{b}, []graph.Output{b}, nil, 0, map[string]int64{}},
		{"shared input runs once", nil, []graph.Output{c, d}, nil, 4, map[string]int64{"b": 1, "c": 1, "d": 1}},
		{"duplicate fetches", nil, []graph.Output{d, d}, nil, 2, map[string]int64{"d": 1}},
		{"target via control edge", nil, nil, []*graph.Node{grp}, 3, map[string]int64{"d": 1}},
		{"fed placeholder does not run", []graph.Output{p}, []graph.Output{e}, nil, 1, map[string]int64{"e": 1}},
		{"control dep on a fed node", []graph.Output{p}, []graph.Output{f}, nil, 2, map[string]int64{"f": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resetCounts()
			ex := mustNew(t, g, tc.feeds, tc.fetches, tc.targets, nil)
			if got := ex.Stats().Nodes; got != tc.nodes {
				t.Errorf("pruned subgraph has %d nodes %v, want %d", got, ex.Nodes(), tc.nodes)
			}
			feeds := make([]*tensor.Tensor, len(tc.feeds))
			for i := range feeds {
				feeds[i] = f32(5, 6)
			}
			out, err := ex.Run(context.Background(), feeds)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(tc.fetches) {
				t.Fatalf("got %d fetches, want %d", len(out), len(tc.fetches))
			}
			for _, name := range []string{"b", "c", "d", "e", "f"} {
				if got := count(name); got != tc.want[name] {
					t.Errorf("node %s ran %d times, want %d", name, got, tc.want[name])
				}
			}
			if st := ex.Stats(); st.NodesExecuted != int64(tc.nodes) {
				t.Errorf("NodesExecuted = %d, want %d", st.NodesExecuted, tc.nodes)
			}
		})
	}
}

func TestFetchValues(t *testing.T) {
	s := graph.NewScope()
	a := ops.ConstNamed(s, "a", []float32{1, 2})
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1))
	sum := s.Out("ExecAdd", "sum", []graph.Output{a, x}, nil)
	twice := s.Out("ExecAdd", "twice", []graph.Output{sum, sum}, nil)
	id := ops.Identity(s, a)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), []graph.Output{x}, []graph.Output{twice, sum, id}, nil, nil)
	for range 3 {
		out, err := ex.Run(context.Background(), []*tensor.Tensor{f32(10, 20)})
		if err != nil {
			t.Fatal(err)
		}
		want := []*tensor.Tensor{f32(22, 44), f32(11, 22), f32(1, 2)}
		for i := range want {
			if !tensor.Equal(out[i], want[i]) {
				t.Errorf("fetch %d = %v, want %v", i, out[i], want[i])
			}
		}
		// The caller owns fetches: scribbling on a fetched constant must not
		// change the graph's constant.
		out[2].Float32s()[0] = 99
	}
}

func TestRefInputDoesNotReadVariable(t *testing.T) {
	s := graph.NewScope()
	w := variable(s, "W", 2)
	init := s.AddNode("ExecAssign", "init", []graph.Output{w, ops.Const(s, []float32{3, 4})}, nil)
	read := s.Out("ExecCount", "read", []graph.Output{w}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	// The variable is uninitialized: reading it would fail, so the assign
	// step succeeds only if the Variable node does not run.
	ex := mustNew(t, s.Graph(), nil, nil, []*graph.Node{init}, res)
	if n := ex.Stats().Nodes; n != 2 {
		t.Errorf("assign step runs %d nodes %v, want 2 (Const and ExecAssign)", n, ex.Nodes())
	}
	if _, err := ex.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	rd := mustNew(t, s.Graph(), nil, []graph.Output{read}, nil, res)
	out, err := rd.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(out[0], f32(3, 4)) {
		t.Errorf("W = %v, want [3 4]", out[0])
	}
}

// TestIndependentBranchesRunConcurrently proves concurrency without sleeps:
// each ExecMeet kernel waits for the other's signal, so the step completes
// only if both run at once.
func TestIndependentBranchesRunConcurrently(t *testing.T) {
	s := graph.NewScope()
	// Cheap nodes run on one goroutine; the meeting nodes take a large input
	// so that the executor deems them worth running in parallel.
	big := ops.Const(s, make([]float32, 1<<16))
	m0 := s.Out("ExecMeet", "m0", []graph.Output{big}, map[string]any{"me": 0})
	m1 := s.Out("ExecMeet", "m1", []graph.Output{big}, map[string]any{"me": 1})
	a := ops.Const(s, float32(1))
	sum0 := s.Out("ExecAdd", "sum0", []graph.Output{m0, a}, nil)
	sum1 := s.Out("ExecAdd", "sum1", []graph.Output{m1, a}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), nil, []graph.Output{sum0, sum1}, nil, nil)
	for range 5 {
		meet = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		out, err := ex.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Float32s()[0] != 1 || out[1].Float32s()[0] != 2 {
			t.Errorf("got %v %v, want 1 2", out[0], out[1])
		}
	}
}

func TestErrors(t *testing.T) {
	s := graph.NewScope()
	a := ops.ConstNamed(s, "a", []float32{1, 2})
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	unfed := s.Out("ExecCount", "uses_x", []graph.Output{x}, nil)
	w := variable(s, "W", 2)
	readW := s.Out("ExecCount", "readW", []graph.Output{w}, nil)
	fail := s.Out("ExecFail", "failing", []graph.Output{a}, nil)
	plain := s.Out("ExecPlainFail", "plain", []graph.Output{a}, nil)
	pan := s.Out("ExecPanic", "panicky", []graph.Output{a}, nil)
	wrong := s.Out("ExecWrongDType", "wrongdt", []graph.Output{a}, nil)
	noOut := s.Out("ExecNoOutput", "noout", []graph.Output{a}, nil)
	after := s.Out("ExecCount", "after_fail", []graph.Output{fail}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	g := s.Graph()

	tests := []struct {
		name    string
		feeds   []graph.Output
		values  []*tensor.Tensor
		fetches []graph.Output
		is      error
		want    []string // substrings of the error
	}{
		{"feed dtype", []graph.Output{x}, []*tensor.Tensor{tensor.New(tensor.Float64, 1, 2)}, []graph.Output{unfed}, nil,
			[]string{"x:0", "float32[?,2]", "float64[1,2]"}},
		{"feed shape", []graph.Output{x}, []*tensor.Tensor{tensor.New(tensor.Float32, 1, 3)}, []graph.Output{unfed}, nil,
			[]string{"x:0", "float32[?,2]", "float32[1,3]"}},
		{"feed rank", []graph.Output{x}, []*tensor.Tensor{tensor.New(tensor.Float32, 2)}, []graph.Output{unfed}, nil,
			[]string{"x:0", "[2]"}},
		{"nil feed", []graph.Output{x}, []*tensor.Tensor{nil}, []graph.Output{unfed}, nil, []string{"x:0", "nil"}},
		{"feed count", []graph.Output{x}, nil, []graph.Output{unfed}, nil, []string{"0 feed values", "1 fed"}},
		{"unfed placeholder", nil, nil, []graph.Output{unfed}, nil, []string{`placeholder "x" must be fed`}},
		{"uninitialized variable", nil, nil, []graph.Output{readW}, kernel.ErrUninitialized, []string{"W", "initializer"}},
		{"kernel error", nil, nil, []graph.Output{after}, nil, []string{"failing (ExecFail)", "boom"}},
		{"plain kernel error gets the node", nil, nil, []graph.Output{plain}, nil, []string{"plain (ExecPlainFail)", "plain failure"}},
		{"kernel panic", nil, nil, []graph.Output{pan}, nil, []string{"panicky (ExecPanic)", "panicked"}},
		{"wrong output dtype", nil, nil, []graph.Output{wrong}, nil, []string{"wrongdt (ExecWrongDType)", "float64[2]", "float32[2]"}},
		{"output not set", nil, nil, []graph.Output{noOut}, nil, []string{"noout (ExecNoOutput)", "output 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resetCounts()
			ex := mustNew(t, g, tc.feeds, tc.fetches, nil, nil)
			out, err := ex.Run(context.Background(), tc.values)
			if err == nil {
				t.Fatalf("Run succeeded with %v, want an error", out)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if count("after_fail") != 0 {
				t.Error("a node after the failing one ran")
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	s := graph.NewScope()
	a := ops.ConstNamed(s, "a", []float32{1, 2})
	nk := s.Out("ExecNoKernel", "nokernel", nil, nil)
	other := ops.Const(graph.NewScope(), float32(1))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		feeds   []graph.Output
		fetches []graph.Output
		want    string
	}{
		{"missing kernel", nil, []graph.Output{nk}, "nokernel (ExecNoKernel)"},
		{"fetch from another graph", nil, []graph.Output{other}, "another graph"},
		{"fetch index", nil, []graph.Output{{Node: a.Node, Index: 3}}, "a:3"},
		{"zero fetch", nil, []graph.Output{{}}, "a fetch is the zero Output"},
		{"feed twice", []graph.Output{a, a}, nil, "fed twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := executor.New(s.Graph(), graph.Signature{Feeds: tc.feeds, Fetches: tc.fetches}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	s := graph.NewScope()
	a := ops.Const(s, float32(1))
	blk := s.Out("ExecBlock", "blocker", []graph.Output{a}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), nil, []graph.Output{blk}, nil, nil)

	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := ex.Run(ctx, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("during the step", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-blockStarted
			cancel()
		}()
		_, err := ex.Run(ctx, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := ex.Run(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want context.DeadlineExceeded", err)
		}
	})
	// A stepctx.Context parent is heard through a Hook, not its Done.
	t.Run("stepctx during the step", func(t *testing.T) {
		ctx := stepctx.New(context.Background(), time.Time{})
		go func() {
			<-blockStarted
			ctx.Cancel(nil)
		}()
		if _, err := ex.Run(ctx, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("stepctx deadline", func(t *testing.T) {
		ctx := stepctx.New(context.Background(), time.Now().Add(20*time.Millisecond))
		defer ctx.Cancel(nil)
		if _, err := ex.Run(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want context.DeadlineExceeded", err)
		}
	})
}

// TestCancelAsTheStepEnds cancels a step's stepctx.Context parent at about
// the time the step ends, many times: each step returns its own result or
// the cancellation, and the run it leaves is fit for the next step (a
// leftover wake-up would end that one before it ran).
func TestCancelAsTheStepEnds(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1))
	y := x
	for range 32 {
		y = ops.Identity(s, s.Out("ExecAdd", "add", []graph.Output{y, x}, nil))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), []graph.Output{x}, []graph.Output{y}, nil, nil)
	var outcomes [3]int // finished, cancelled while running, cancelled before
	// The steps run on a goroutine of their own, watched: a run left
	// unfit could block inside the executor, and the test must fail then,
	// not hang.
	failed := make(chan error, 1)
	go func() {
		failed <- func() error {
			for i := range 3000 {
				v := float32(i)
				ctx := stepctx.New(context.Background(), time.Time{})
				ended := make(chan struct{})
				go func() {
					defer close(ended)
					for j := 0; j < i%4; j++ { // a spread of moments, not a wait
						runtime.Gosched()
					}
					ctx.Cancel(nil)
				}()
				out, err := ex.Run(ctx, []*tensor.Tensor{f32(v)})
				switch {
				case err != nil && !errors.Is(err, context.Canceled):
					return fmt.Errorf("step %d: %w", i, err)
				case err == nil && out[0].Float32s()[0] != 33*v:
					return fmt.Errorf("step %d: %v, want %v", i, out[0].Float32s(), 33*v)
				case err == nil:
					outcomes[0]++
				case strings.Contains(err.Error(), "not started"):
					outcomes[2]++
				default:
					outcomes[1]++
				}
				<-ended
				out, err = ex.Run(context.Background(), []*tensor.Tensor{f32(v + 1)})
				if err != nil || out[0].Float32s()[0] != 33*(v+1) {
					return fmt.Errorf("the step after step %d: %v, %v; want %v", i, out, err, 33*(v+1))
				}
			}
			return nil
		}()
	}()
	select {
	case err := <-failed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the steps did not end in 2 minutes: a run was left unfit for its next step")
	}
	t.Logf("steps finished %d, cancelled while running %d, cancelled before %d", outcomes[0], outcomes[1], outcomes[2])
}

func TestConcurrentRuns(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	y := x
	for range 10 {
		y = s.Out("ExecAdd", "add", []graph.Output{y, x}, nil)
	}
	z := s.Out("ExecAdd", "z", []graph.Output{y, ops.Const(s, []float32{1, 1})}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), []graph.Output{x}, []graph.Output{z, y}, nil, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for gi := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				v := float32(gi*100 + i)
				out, err := ex.Run(context.Background(), []*tensor.Tensor{f32(v, -v)})
				if err != nil {
					errs <- err
					return
				}
				if want := f32(11*v+1, -11*v+1); !tensor.Equal(out[0], want) {
					errs <- fmt.Errorf("run %d/%d: got %v, want %v", gi, i, out[0], want)
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
	if st := ex.Stats(); st.Runs != 400 || st.NodesExecuted != 400*12 {
		t.Errorf("stats %+v, want 400 runs of 12 nodes", st)
	}
}

// TestConcurrentDetachedRuns runs steps whose blocking nodes take their
// workers from the run's reused ones, several steps at once.
func TestConcurrentDetachedRuns(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	y := x
	for range 4 {
		d := s.Out("ExecDetach", "d", []graph.Output{y}, nil)
		a := s.Out("ExecAdd", "a", []graph.Output{d, x}, nil)
		b := s.Out("ExecAdd", "b", []graph.Output{d, d}, nil)
		y = s.Out("ExecAdd", "y", []graph.Output{a, b}, nil) // 3y + x
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), []graph.Output{x}, []graph.Output{y}, nil, nil)
	var wg sync.WaitGroup
	for gi := range 8 {
		wg.Go(func() {
			for i := range 50 {
				v := float32(gi*100 + i)
				out, err := ex.Run(context.Background(), []*tensor.Tensor{f32(v, -v)})
				if err != nil {
					t.Error(err)
					return
				}
				if want := f32(121*v, -121*v); !tensor.Equal(out[0], want) { // 3⁴v + (3³+3²+3+1)v
					t.Errorf("run %d/%d: got %v, want %v", gi, i, out[0], want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkChain measures the per-node overhead of a chain of tiny ops (batch
// 1, as in the linear-regression step): one op is one "node".
func BenchmarkChain(b *testing.B) {
	const n = 20
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1))
	one := ops.Const(s, []float32{1})
	y := x
	for range n {
		y = s.Out("ExecAdd", "add", []graph.Output{y, one}, nil)
	}
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	ex, err := executor.New(s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{y}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	feed := []*tensor.Tensor{f32(0)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ex.Run(ctx, feed); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n+1), "ns/node")
}

// BenchmarkWide measures a step of independent branches, which use the pool.
func BenchmarkWide(b *testing.B) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1))
	var outs []graph.Output
	for range 8 {
		y := x
		for range 4 {
			y = s.Out("ExecAdd", "add", []graph.Output{y, x}, nil)
		}
		outs = append(outs, y)
	}
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	ex, err := executor.New(s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: outs}, nil)
	if err != nil {
		b.Fatal(err)
	}
	feed := []*tensor.Tensor{f32(0)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ex.Run(context.Background(), feed); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStepAllocs bounds the executor's own allocations per step, on graphs
// whose kernels allocate nothing: the returned fetch slice, and for a step
// with blocking kernels its cancellable context (context.WithCancelCause:
// two). Detached workers, their stacks and lease slices are reused.
func TestStepAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1))
	// A fan-out, so that ready nodes wait on a worker's stack.
	fan := func(in graph.Output) (a, b, c graph.Output) {
		return ops.Identity(s, in), ops.Identity(s, in), ops.Identity(s, in)
	}
	a, b, c := fan(x)
	local := []graph.Output{a, b, c}
	d1 := s.Out("ExecDetach", "d1", []graph.Output{a}, nil)
	e1, e2, e3 := fan(d1)
	d2 := s.Out("ExecDetach", "d2", []graph.Output{e1}, nil)
	f1, f2, _ := fan(d2)
	sink := s.AddNode("ExecLease", "sink", []graph.Output{e2}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	feed := []*tensor.Tensor{f32(1)}
	for _, tc := range []struct {
		name    string
		fetches []graph.Output
		targets []*graph.Node
		max     float64
	}{
		{"local", local, nil, 1},
		{"blocking", []graph.Output{e3, f1, f2}, []*graph.Node{sink}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := mustNew(t, s.Graph(), []graph.Output{x}, tc.fetches, tc.targets, nil)
			var err error
			n := testing.AllocsPerRun(200, func() {
				if _, e := ex.Run(context.Background(), feed); e != nil {
					err = e
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if n > tc.max {
				t.Errorf("%v allocations per step, want at most %v", n, tc.max)
			}
		})
	}
}

// TestStepWithCallerContextAllocs: a step run in the caller's context,
// into the caller's buffer (StepOptions), allocates nothing of its own:
// the two allocations counted are the caller's context.WithCancelCause,
// which the executor leaves to the caller to end.
func TestStepWithCallerContextAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1))
	d := s.Out("ExecDetach", "d", []graph.Output{ops.Identity(s, x)}, nil)
	a, b := ops.Identity(s, d), ops.Identity(s, d)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), []graph.Output{x}, []graph.Output{a, b}, nil, nil)
	feed := []*tensor.Tensor{f32(1)}
	var out [2]*tensor.Tensor
	var err error
	var kctx context.Context
	step := func() {
		ctx, cancel := context.WithCancelCause(context.Background())
		got, e := ex.RunStepWith(context.Background(), nil, feed, executor.StepOptions{Context: ctx, Canceler: executor.CancelFunc(cancel), Out: out[:0]})
		switch {
		case e != nil:
			err = e
		case &got[0] != &out[0]:
			err = errors.New("the fetches are not in StepOptions.Out")
		case ctx.Err() != nil:
			err = errors.New("a step that succeeded cancelled the caller's context")
		}
		cancel(nil)
		kctx = ctx
	}
	n := testing.AllocsPerRun(200, step)
	if err != nil {
		t.Fatal(err)
	}
	if context.Cause(kctx) != context.Canceled {
		t.Errorf("cause %v, want context.Canceled", context.Cause(kctx))
	}
	if n > 2 {
		t.Errorf("%v allocations per step, want at most 2 (the caller's context)", n)
	}
}

// TestStepWithCallerContextCancel: the first error of a step run in the
// caller's context cancels it, with the error as its cause, so that a
// kernel blocked on it returns: a standard one (CancelFunc) or a
// stepctx.Context.
func TestStepWithCallerContextCancel(t *testing.T) {
	s := graph.NewScope()
	a := ops.Const(s, float32(1))
	blk := s.Out("ExecBlock", "blocker", []graph.Output{s.Out("ExecDetach", "d", []graph.Output{a}, nil)}, nil)
	fail := s.Out("ExecFail", "fail", []graph.Output{a}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), nil, []graph.Output{blk, fail}, nil, nil)
	for _, tc := range []struct {
		name string
		opts func() (executor.StepOptions, func() error)
	}{
		{"standard", func() (executor.StepOptions, func() error) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return executor.StepOptions{Context: ctx, Canceler: executor.CancelFunc(cancel)}, func() error { return context.Cause(ctx) }
		}},
		{"stepctx", func() (executor.StepOptions, func() error) {
			ctx := stepctx.New(context.Background(), time.Time{})
			return executor.StepOptions{Context: ctx, Canceler: ctx}, ctx.Cause
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, cause := tc.opts()
			defer opts.Canceler.Cancel(nil)
			_, err := ex.RunStepWith(context.Background(), nil, nil, opts)
			if err == nil || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("got %v, want the kernel's error", err)
			}
			if cause := cause(); cause != err {
				t.Errorf("the caller's context ended with %v, want the step's error", cause)
			}
		})
	}
}

// TestStepWithStepContextAllocs: a step run in a stepctx.Context kept in
// the caller's state (StepOptions.Canceler) allocates nothing for it.
func TestStepWithStepContextAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1))
	d := s.Out("ExecDetach", "d", []graph.Output{ops.Identity(s, x)}, nil)
	a := ops.Identity(s, d)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), []graph.Output{x}, []graph.Output{a}, nil, nil)
	feed := []*tensor.Tensor{f32(1)}
	const runs = 200
	states := make([]stepctx.Context, runs+1) // not reused: each is one step's
	var out [1]*tensor.Tensor
	var err error
	i := 0
	// The parent a stepctx.Context too (a master's step, a request's):
	// heard through a Hook, without its Done channel.
	parent := stepctx.New(context.Background(), time.Time{})
	defer parent.Cancel(nil)
	n := testing.AllocsPerRun(runs, func() {
		ctx := &states[i]
		i++
		ctx.Init(parent, time.Time{})
		if _, e := ex.RunStepWith(parent, nil, feed, executor.StepOptions{Context: ctx, Canceler: ctx, Out: out[:0]}); e != nil {
			err = e
		}
		if ctx.Err() != nil {
			err = errors.New("a step that succeeded cancelled the caller's context")
		}
		ctx.Cancel(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%v allocations per step, want 0", n)
	}
}

// TestBlockingKernelRunsApart checks that a kernel declaring MayBlock does not
// hold up the worker that would run the node it waits for.
func TestBlockingKernelRunsApart(t *testing.T) {
	s := graph.NewScope()
	wait := s.Out("ExecWait", "wait", nil, nil) // the first root: it would run inline
	sig := s.Out("ExecSignal", "signal", nil, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), nil, []graph.Output{wait, sig}, nil, nil)
	for range 3 {
		signal = make(chan struct{})
		if _, err := ex.Run(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRunStepPassesTheStep(t *testing.T) {
	s := graph.NewScope()
	id := s.Out("ExecStepID", "id", nil, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex := mustNew(t, s.Graph(), nil, []graph.Output{id}, nil, nil)
	out, err := ex.RunStep(context.Background(), &kernel.Step{ID: 42}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Int64s()[0]; got != 42 {
		t.Errorf("step ID %d, want 42", got)
	}
	a, _ := ex.Run(context.Background(), nil)
	b, _ := ex.Run(context.Background(), nil)
	if a[0].Int64s()[0] == b[0].Int64s()[0] {
		t.Error("two runs got the same step ID")
	}
}
