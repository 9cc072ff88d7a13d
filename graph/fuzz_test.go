package graph_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/graph"
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
	writeSeeds(f, "FuzzGraphUnmarshal", func() map[string][]any {
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
		checkAlloc(t, uint64(256*len(b))+1<<20, func() { g, err = graph.Unmarshal(b) })
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

// writeSeeds writes the seed corpus of target, testdata/fuzz/<target>/<name>,
// when DISTFLOW_WRITE_FUZZ_SEEDS is set: the committed corpus is made so
// (DISTFLOW_WRITE_FUZZ_SEEDS=1 go test -run '^$' -fuzz ^FuzzX$ -fuzztime 1x).
// Each seed is the fuzz function's arguments, made by the real encoders.
func writeSeeds(f *testing.F, target string, seeds func() map[string][]any) {
	if os.Getenv("DISTFLOW_WRITE_FUZZ_SEEDS") == "" {
		return
	}
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	for name, args := range seeds() {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			switch v := a.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			case string:
				fmt.Fprintf(&b, "string(%q)\n", v)
			case bool:
				fmt.Fprintf(&b, "bool(%v)\n", v)
			case int64:
				fmt.Fprintf(&b, "int64(%d)\n", v)
			case uint8:
				fmt.Fprintf(&b, "uint8(%d)\n", v)
			default:
				f.Fatalf("seed %s: argument of type %T", name, a)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// checkAlloc fails t when fn allocates more than limit bytes
// (runtime.MemStats.TotalAlloc). It measures twice before failing, so that
// what another goroutine allocated meanwhile is not held against fn.
func checkAlloc(t *testing.T, limit uint64, fn func()) {
	t.Helper()
	var got uint64
	for range 2 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		if got = after.TotalAlloc - before.TotalAlloc; got <= limit {
			return
		}
	}
	t.Fatalf("allocated %d bytes, more than the limit %d", got, limit)
}
