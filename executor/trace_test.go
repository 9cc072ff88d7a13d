package executor_test

import (
	"context"
	"slices"
	"testing"

	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

func init() {
	// ExecDetached passes its input through on a goroutine of its own (it
	// declares MayBlock), so a traced step has a lane besides the caller's
	// whatever the scheduler does.
	op.Register(op.Def{Name: "ExecDetached", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecDetached", kernel.CPU, func(*graph.Node) (kernel.Kernel, error) { return detached{}, nil })
}

type detached struct{}

func (detached) MayBlock() bool { return true }

func (detached) Compute(c *kernel.Context) error {
	c.Outputs[0] = c.Inputs[0]
	return nil
}

// wideGraph builds branches of chained adds over a fed vector of n
// elements: with n large, the branches may run on the pool's lanes. The
// first branch starts with an ExecDetached node, which runs on a lane of
// its own.
func wideGraph(tb testing.TB, n, branches, depth int) (*executor.Executor, []*tensor.Tensor) {
	tb.Helper()
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(n))
	var outs []graph.Output
	for b := range branches {
		y := x
		if b == 0 {
			y = s.Out("ExecDetached", "detached", []graph.Output{x}, nil)
		}
		for range depth {
			y = s.Out("ExecAdd", "add", []graph.Output{y, x}, nil)
		}
		outs = append(outs, y)
	}
	if err := s.Err(); err != nil {
		tb.Fatal(err)
	}
	ex, err := executor.New(s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: outs}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return ex, []*tensor.Tensor{tensor.New(tensor.Float32, n)}
}

func TestRunTracedRecordsEveryNode(t *testing.T) {
	const n, branches, depth = 1 << 14, 4, 3
	ex, feed := wideGraph(t, n, branches, depth)
	ctx := context.Background()
	for round := range 2 { // the second reuses the pooled run and its workers
		var tr executor.StepTrace
		if _, err := ex.RunTraced(ctx, nil, feed, &tr); err != nil {
			t.Fatal(err)
		}
		nodes := tr.Nodes()
		if len(nodes) != branches*depth+1 {
			t.Fatalf("round %d: %d nodes traced, want %d", round, len(nodes), branches*depth+1)
		}
		seen := map[*graph.Node]bool{}
		byLane := map[int32][]executor.NodeTrace{}
		for _, nt := range nodes {
			if seen[nt.Node] {
				t.Errorf("node %s traced twice", nt.Node)
			}
			seen[nt.Node] = true
			if nt.End < nt.Start || nt.Start == 0 {
				t.Errorf("node %s: start %d end %d", nt.Node, nt.Start, nt.End)
			}
			if nt.Node.Op() == "ExecDetached" {
				if nt.Lane == 0 || nt.InBytes != 4*n || nt.OutBytes != 4*n {
					t.Errorf("detached node: lane %d, %d bytes in, %d out; want a lane of its own and %d bytes", nt.Lane, nt.InBytes, nt.OutBytes, 4*n)
				}
			} else if nt.Shapes != "[16384]" {
				t.Errorf("node %s: shapes %q, want [16384]", nt.Node, nt.Shapes)
			} else if want := int64(4 * n); nt.OutBytes != want || nt.InBytes != 2*want || nt.Failed {
				t.Errorf("node %s: %d bytes in, %d out, failed %v; want %d and %d", nt.Node, nt.InBytes, nt.OutBytes, nt.Failed, 2*want, want)
			}
			if nt.Lane < 0 || int(nt.Lane) > tr.Lanes() {
				t.Errorf("node %s: lane %d of %d", nt.Node, nt.Lane, tr.Lanes())
			}
			byLane[nt.Lane] = append(byLane[nt.Lane], nt)
		}
		// Lane 0, the caller's, may hold none of them: the caller starts
		// with the first root, which may be the detached node (a lane of
		// its own), and the costly adds are queued for any goroutine (CI
		// saw lane 0 empty under the race detector).
		// A lane is one goroutine at a time: its nodes never overlap.
		for lane, nts := range byLane {
			slices.SortFunc(nts, func(a, b executor.NodeTrace) int { return int(a.Start - b.Start) })
			for i := 1; i < len(nts); i++ {
				if nts[i].Start < nts[i-1].End {
					t.Errorf("lane %d: %s starts before %s ends", lane, nts[i].Node, nts[i-1].Node)
				}
			}
		}
	}
	// An untraced run after traced ones records nothing anywhere.
	var tr executor.StepTrace
	if _, err := ex.Run(ctx, feed); err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes()) != 0 {
		t.Error("an untraced run recorded nodes")
	}
}

func TestRunTracedMarksTheFailedNode(t *testing.T) {
	s := graph.NewScope()
	a := ops.Placeholder(s, "a", tensor.Float32, tensor.MakeShape(-1))
	b := ops.Placeholder(s, "b", tensor.Float32, tensor.MakeShape(-1))
	bad := s.Out("ExecAdd", "bad", []graph.Output{a, b}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ex, err := executor.New(s.Graph(), graph.Signature{Feeds: []graph.Output{a, b}, Fetches: []graph.Output{bad}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tr executor.StepTrace
	if _, err := ex.RunTraced(context.Background(), nil, []*tensor.Tensor{f32(1), f32(1, 2)}, &tr); err == nil {
		t.Fatal("adding sizes 1 and 2 succeeded")
	}
	if nodes := tr.Nodes(); len(nodes) != 1 || !nodes[0].Failed || nodes[0].Node.Name() != "bad" {
		t.Errorf("traced %+v, want the failed node bad", nodes)
	}
}

// BenchmarkTrace runs a step of tiny nodes (BenchmarkChain's: per-node
// overhead dominates) untraced and traced: "off" is RunStep, which pays one
// branch per node for tracing; compare it with BenchmarkChain built without
// the tracing code (docs/BENCHMARKS.md, "Step traces").
func BenchmarkTrace(b *testing.B) {
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
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ex.RunStep(ctx, nil, feed); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n+1), "ns/node")
	})
	b.Run("on", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var tr executor.StepTrace
			if _, err := ex.RunTraced(ctx, nil, feed, &tr); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n+1), "ns/node")
	})
}
