package ops_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// loopGraph returns the GraphDef of a loop (y = x * 2^3) inside a
// conditional, and the name of the tensor to fetch.
func loopGraph(t testing.TB) (*pb.GraphDef, string) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.ScalarShape())
	out := ops.Cond(s, ops.Greater(s, x, ops.Const(s, float32(0))),
		func(s *graph.Scope) []graph.Output {
			w := ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(3))) },
				func(s *graph.Scope, v []graph.Output) []graph.Output {
					return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), ops.Mul(s, v[1], ops.Const(s, float32(2)))}
				},
				[]graph.Output{ops.Const(s, int32(0)), x})
			return w[1:]
		},
		func(s *graph.Scope) []graph.Output { return []graph.Output{x} })
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph().ToProto(), out[0].Name()
}

// nodeDef returns the NodeDef of the first node of op in gd.
func nodeDef(gd *pb.GraphDef, op string) *pb.NodeDef {
	for _, nd := range gd.GetNode() {
		if nd.GetOp() == op {
			return nd
		}
	}
	return nil
}

// TestMalformedFunctionAttributes decodes GraphDefs whose function
// attributes are damaged: each is refused with an error that says what is
// wrong, and nothing panics.
func TestMalformedFunctionAttributes(t *testing.T) {
	body := func(gd *pb.GraphDef) *pb.FunctionDef {
		then := nodeDef(gd, "If").GetAttr()["then_branch"].GetFunc()
		return nodeDef(then.GetGraph(), "While").GetAttr()["body"].GetFunc()
	}
	for _, tc := range []struct {
		name   string
		damage func(gd *pb.GraphDef)
		want   string
	}{
		{"no graph", func(gd *pb.GraphDef) { body(gd).Graph = nil }, "function has no graph"},
		{"missing arg", func(gd *pb.GraphDef) { body(gd).Arg[0] = "nowhere:0" }, `function argument "nowhere:0"`},
		{"bad arg name", func(gd *pb.GraphDef) { body(gd).Arg[1] = "x:-3" }, "bad tensor name"},
		{"arg not a placeholder", func(gd *pb.GraphDef) {
			f := body(gd)
			f.Arg[0] = f.Ret[0]
		}, "is not a Placeholder"},
		{"arg twice", func(gd *pb.GraphDef) {
			f := body(gd)
			f.Arg[1] = f.Arg[0]
		}, "listed twice"},
		{"ret out of range", func(gd *pb.GraphDef) { body(gd).Ret[0] += "7" }, "function result"},
		{"too few rets", func(gd *pb.GraphDef) { body(gd).Ret = nil }, "loop variable"},
		{"arity", func(gd *pb.GraphDef) {
			f := body(gd)
			f.Arg = f.Arg[:1]
		}, "body takes 1 arguments"},
		{"ret dtype", func(gd *pb.GraphDef) {
			f := body(gd)
			f.Ret[0], f.Ret[1] = f.Ret[1], f.Ret[0]
		}, "enters the loop as int32 and leaves the body as float32"},
		{"unknown op", func(gd *pb.GraphDef) {
			f := body(gd)
			f.Graph.Node[len(f.Graph.Node)-1].Op = "NoSuchOp"
		}, `unknown op "NoSuchOp"`},
		{"func where a tensor goes", func(gd *pb.GraphDef) {
			nodeDef(gd, "Const").Attr["value"] = &pb.AttrValue{Value: &pb.AttrValue_Func{Func: body(gd)}}
		}, `attribute "value": want tensor`},
		{"tensor where a func goes", func(gd *pb.GraphDef) {
			nodeDef(gd, "If").Attr["else_branch"] = nodeDef(gd, "Const").Attr["value"]
		}, `attribute "else_branch": want func`},
		{"empty func value", func(gd *pb.GraphDef) {
			nodeDef(gd, "If").Attr["else_branch"] = &pb.AttrValue{Value: &pb.AttrValue_Func{}}
		}, "function has no graph"},
		{"deep nesting", func(gd *pb.GraphDef) {
			f := body(gd)
			for range 70 {
				inner := proto.Clone(f).(*pb.FunctionDef)
				f.Graph.Node = append(f.Graph.Node, &pb.NodeDef{Name: "nest", Op: "NoOp",
					Attr: map[string]*pb.AttrValue{"x": {Value: &pb.AttrValue_Func{Func: inner}}}})
				f = inner
			}
		}, "nested more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gd, _ := loopGraph(t)
			tc.damage(gd)
			b, err := proto.Marshal(gd)
			if err != nil {
				t.Fatal(err)
			}
			_, err = graph.Unmarshal(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestFunctionRunErrors decodes a loop whose body fetches a placeholder
// that is not one of its arguments: the graph is well formed, and running
// it fails with an error naming the loop, without a panic.
func TestFunctionRunErrors(t *testing.T) {
	gd, fetch := loopGraph(t)
	then := nodeDef(gd, "If").GetAttr()["then_branch"].GetFunc()
	f := nodeDef(then.GetGraph(), "While").GetAttr()["body"].GetFunc()
	f.Graph.Node = append(f.Graph.Node, &pb.NodeDef{Name: "stray", Op: "Placeholder", Attr: map[string]*pb.AttrValue{
		"dtype": graph.AttrToProto(tensor.Float32), "shape": graph.AttrToProto(tensor.ScalarShape())}})
	f.Ret[1] = "stray:0"
	g, err := graph.FromProto(gd)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	x, _ := g.Output("x:0")
	y, _ := g.Output(fetch)
	_, err = sess.Run(context.Background(), map[graph.Output]*tensor.Tensor{x: tensor.Scalar(float32(1))}, []graph.Output{y}, nil)
	if err == nil || !strings.Contains(err.Error(), "While") || !strings.Contains(err.Error(), "stray") {
		t.Fatalf("error %v, want one naming the loop and the placeholder", err)
	}
}

// FuzzControlFlowGraph decodes arbitrary bytes as a graph, seeded with
// graphs with control flow: a graph that decodes re-encodes to the same
// bytes, and running it (bounded in time: a decoded loop may not end)
// returns a result or an error, never a panic.
func FuzzControlFlowGraph(f *testing.F) {
	gd, _ := loopGraph(f)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(gd)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := graph.Unmarshal(b)
		if err != nil {
			return
		}
		b2, err := g.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		g2, err := graph.Unmarshal(b2)
		if err != nil {
			t.Fatalf("a decoded graph re-encodes to bytes that do not decode: %v", err)
		}
		if b3, _ := g2.Marshal(); string(b3) != string(b2) {
			t.Fatalf("the encoding of a decoded graph changes through a decode")
		}
		x, err := g.Output("x:0")
		if err != nil || x.Node.Op() != "Placeholder" || x.DType() != tensor.Float32 || !x.Shape().AcceptsDims(nil) {
			return
		}
		var fetches []graph.Output
		for _, n := range g.Nodes() {
			if n.Op() == "If" || n.Op() == "While" {
				for i := range n.NumOutputs() {
					fetches = append(fetches, n.Output(i))
				}
			}
		}
		if len(fetches) == 0 {
			return
		}
		sess, err := session.New(g)
		if err != nil {
			return
		}
		defer sess.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: tensor.Scalar(float32(1))}, fetches, nil) //nolint:errcheck // any error is fine; a panic is not
	})
}
