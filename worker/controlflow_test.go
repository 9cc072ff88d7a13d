package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// TestRegisterGraphRefusesHostOpsInLoops hides a node of a host-only op
// in the body of a loop in a branch: the graph is refused as if the node
// were at the top level.
func TestRegisterGraphRefusesHostOpsInLoops(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.ScalarShape())
	ops.Cond(s, ops.Const(s, true),
		func(s *graph.Scope) []graph.Output {
			return ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, false) },
				func(s *graph.Scope, v []graph.Output) []graph.Output {
					s.AddNode("WorkerTestHostOnly", "pwn", nil, nil)
					return v
				},
				[]graph.Output{x})
		},
		func(s *graph.Scope) []graph.Output { return []graph.Output{x} })
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	w := worker.New(worker.Config{Task: victim})
	_, err := w.RegisterGraph(context.Background(), &pb.RegisterGraphRequest{SessionHandle: "s", Graph: s.Graph().ToProto()})
	if !errors.Is(err, worker.ErrRemoteOp) || !strings.Contains(err.Error(), "pwn") {
		t.Errorf("RegisterGraph with a host-only op in a loop body: %v, want worker.ErrRemoteOp naming the node", err)
	}
	if w.NumGraphs() != 0 {
		t.Errorf("%d graphs registered", w.NumGraphs())
	}
}

// TestGraphMemoryCountsFunctions: a loop body's nodes count towards the
// memory a graph holds, as the same nodes at the top level would.
func TestGraphMemoryCountsFunctions(t *testing.T) {
	build := func(inLoop bool) *pb.GraphDef {
		s := graph.NewScope()
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.ScalarShape())
		chain := func(s *graph.Scope, v graph.Output) graph.Output {
			for range 200 {
				v = ops.Neg(s, v)
			}
			return v
		}
		if inLoop {
			ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, false) },
				func(s *graph.Scope, v []graph.Output) []graph.Output { return []graph.Output{chain(s, v[0])} },
				[]graph.Output{x})
		} else {
			chain(s, x)
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return s.Graph().ToProto()
	}
	flat, nested := worker.GraphMemory(build(false)), worker.GraphMemory(build(true))
	if nested < flat {
		t.Errorf("a graph of 200 nodes in a loop body counts %d bytes, the same nodes at the top level %d", nested, flat)
	}
}
