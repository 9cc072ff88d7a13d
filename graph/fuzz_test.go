package graph_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/fuzztest"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// fuzzModel builds a graph with the features a GraphDef carries: devices,
// attributes of every kind the ops use, a tensor constant, a variable (ref
// inputs), control inputs and collections.
func fuzzModel() *graph.Graph {
	s := graph.NewScope()
	x := ops.Placeholder(s.WithDevice("/job:worker/task:0/cpu:0"), "x", tensor.Float32, tensor.MakeShape(-1, 3))
	w := ops.NewVariable(s.WithDevice("/job:ps/task:0/cpu:0"), "W", tensor.Float32, []int{2, 3}, ops.ZerosInit())
	y := ops.MatMul(s, x, w.Value(), false, true)
	c := ops.Const(s, tensor.MustFromSlice([]int32{-1, 1}, 2))
	r := ops.Reshape(s, y, c)
	ops.Identity(s.WithControlDependencies(w.Initializer()), r)
	if err := s.Err(); err != nil {
		panic(err)
	}
	return s.Graph()
}

func marshalGraph(g *graph.Graph) []byte {
	b, err := g.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

func marshalDef(gd *pb.GraphDef) []byte {
	b, err := proto.Marshal(gd)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzGraphUnmarshal decodes arbitrary bytes as a graph, as a worker's
// RegisterGraph, the master's CreateSession and savedmodel.Load do. A graph
// that decodes must re-encode to bytes that decode to the same graph, must
// import into another graph all or nothing, and must stand a pruning for
// every node (the executor-free check that runs before any kernel). The
// decoder must not allocate far beyond its input: every node, attribute and
// tensor it makes is backed by input bytes.
func FuzzGraphUnmarshal(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzGraphUnmarshal", func() map[string][]any {
		model := fuzzModel()
		gd := model.ToProto()
		later := proto.Clone(gd).(*pb.GraphDef)
		later.Node[0], later.Node[len(later.Node)-1] = later.Node[len(later.Node)-1], later.Node[0]
		dup := proto.Clone(gd).(*pb.GraphDef)
		dup.Node = append(dup.Node, dup.Node[0])
		lying := &pb.GraphDef{Version: 1, Node: []*pb.NodeDef{{Name: "c", Op: "Const", Attr: map[string]*pb.AttrValue{
			"value": {Value: &pb.AttrValue_Tensor{Tensor: &pb.TensorProto{Dtype: pb.DataType(tensor.Float32), Dims: []int64{1 << 40, 1 << 40}, Content: []byte{1, 2, 3, 4}}}},
			"dtype": {Value: &pb.AttrValue_Type{Type: pb.DataType(tensor.Float32)}},
		}}}}
		hugeShape := &pb.GraphDef{Version: 1, Node: []*pb.NodeDef{{Name: "p", Op: "Placeholder", Attr: map[string]*pb.AttrValue{
			"dtype": {Value: &pb.AttrValue_Type{Type: pb.DataType(tensor.Float32)}},
			"shape": {Value: &pb.AttrValue_Shape{Shape: &pb.ShapeProto{Dims: []int64{1 << 62, 1 << 62, -5}}}},
		}}}}
		badColl := proto.Clone(gd).(*pb.GraphDef)
		badColl.Collections = map[string]*pb.NameList{"trainable": {Names: []string{"nope"}}}
		selfLoop := &pb.GraphDef{Version: 1, Node: []*pb.NodeDef{{Name: "a", Op: "Identity", Input: []string{"a:0", "^a"}}}}
		return map[string][]any{
			"model":           {marshalGraph(model)},
			"empty":           {[]byte{}},
			"future_version":  {marshalDef(&pb.GraphDef{Version: 2})},
			"input_later":     {marshalDef(later)},
			"duplicate_name":  {marshalDef(dup)},
			"lying_tensor":    {marshalDef(lying)},
			"huge_shape":      {marshalDef(hugeShape)},
			"bad_collection":  {marshalDef(badColl)},
			"self_loop":       {marshalDef(selfLoop)},
			"unknown_op":      {marshalDef(&pb.GraphDef{Node: []*pb.NodeDef{{Name: "n", Op: "NoSuchOp"}}})},
			"bad_tensor_name": {marshalDef(&pb.GraphDef{Node: []*pb.NodeDef{{Name: "n", Op: "Identity", Input: []string{"x:-1"}}}})},
			"truncated":       {marshalGraph(model)[:40]},
		}
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		var g *graph.Graph
		var err error
		fuzztest.CheckAlloc(t, uint64(256*len(b))+1<<20, func() { g, err = graph.Unmarshal(b) })
		if err != nil {
			return
		}
		enc, err := g.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a decoded graph: %v", err)
		}
		g2, err := graph.Unmarshal(enc)
		if err != nil {
			t.Fatalf("decoding a re-encoded graph: %v", err)
		}
		if again, _ := g2.Marshal(); !bytes.Equal(again, enc) {
			t.Fatal("re-encoding differs")
		}

		// Import is all or nothing.
		host := graph.NewScope()
		ops.Placeholder(host, "x", tensor.Float32, tensor.MakeShape(2))
		before, _ := host.Graph().Marshal()
		if err := graph.Import(host.Graph(), g.ToProto()); err != nil {
			if after, _ := host.Graph().Marshal(); !bytes.Equal(before, after) {
				t.Fatalf("a failed Import (%v) changed the graph", err)
			}
		} else if host.Graph().NumNodes() != 1+g.NumNodes() {
			t.Fatalf("Import added %d nodes of %d", host.Graph().NumNodes()-1, g.NumNodes())
		}

		// Pruning for every node, and for every output as a fetch.
		sig := graph.Signature{Targets: g.Nodes()}
		for _, n := range g.Nodes() {
			for i := range n.NumOutputs() {
				sig.Fetches = append(sig.Fetches, n.Output(i))
			}
		}
		if _, err := graph.NewSubgraph(g, sig); err != nil {
			t.Fatalf("pruning a valid graph for all its nodes: %v", err)
		}
	})
}
