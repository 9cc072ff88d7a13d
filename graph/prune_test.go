package graph_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// pruneGraph builds:
//
//	x (Placeholder)   w (Variable)   c (Const)
//	y = Add(x, c)     read = Identity(w)
//	z = Add(y, read)  assign = Assign(w, z)   side = Identity(c) with ^assign
//	unrelated = Identity(c)
func pruneGraph(t *testing.T) *graph.Graph {
	t.Helper()
	s := graph.NewScope()
	x := placeholder(s, "x", 2)
	w := s.Out("Variable", "w", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(2)})
	c := s.Out("Const", "c", nil, map[string]any{"value": tensor.MustFromSlice([]float32{1, 2}, 2)})
	y := s.Out("GraphTestAdd", "y", []graph.Output{x, c}, nil)
	read := s.Out("Identity", "read", []graph.Output{w}, nil)
	z := s.Out("GraphTestAdd", "z", []graph.Output{y, read}, nil)
	assign := s.AddNode("Assign", "assign", []graph.Output{w, z}, nil)
	s.WithControlDependencies(assign).Out("Identity", "side", []graph.Output{c}, nil)
	s.Out("Identity", "unrelated", []graph.Output{c}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph()
}

// outputOf is g's output name, which the test needs.
func outputOf(t *testing.T, g *graph.Graph, name string) graph.Output {
	t.Helper()
	o, err := g.Output(name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestPrune(t *testing.T) {
	g := pruneGraph(t)
	out := func(name string) graph.Output { return outputOf(t, g, name) }
	tests := []struct {
		name    string
		feeds   []string
		fetches []string
		targets []string
		refs    bool
		want    string
	}{
		{name: "fetch leaf", fetches: []string{"c"}, want: "c"},
		{name: "fetch through data inputs", fetches: []string{"z"}, want: "x w c y read z"},
		{name: "fed output cuts the walk but keeps the producer", feeds: []string{"y:0"}, fetches: []string{"z"}, want: "w y read z"},
		{name: "fetch of a fed tensor", feeds: []string{"y:0"}, fetches: []string{"y:0"}, want: "y"},
		{name: "ref input skipped for the executor", feeds: []string{"z:0"}, targets: []string{"assign"}, want: "z assign"},
		{name: "ref input pulls the variable for the master", feeds: []string{"z:0"}, targets: []string{"assign"}, refs: true, want: "w z assign"},
		{name: "control input is walked", feeds: []string{"z:0"}, fetches: []string{"side"}, refs: true, want: "w c z assign side"},
		{name: "control input on an all-fed node is satisfied", feeds: []string{"c:0"}, targets: []string{"unrelated"}, want: "c unrelated"},
		{name: "target all fed", feeds: []string{"y:0"}, targets: []string{"y"}, want: "y"},
		{name: "nothing", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var feeds, fetches []graph.Output
			var targets []*graph.Node
			for _, f := range tc.feeds {
				feeds = append(feeds, out(f))
			}
			for _, f := range tc.fetches {
				fetches = append(fetches, out(f))
			}
			for _, n := range tc.targets {
				targets = append(targets, g.Node(n))
			}
			var names []string
			for _, n := range graph.Prune(feeds, fetches, targets, tc.refs) {
				names = append(names, n.Name())
			}
			if got := strings.Join(names, " "); got != tc.want {
				t.Errorf("Prune = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestImport(t *testing.T) {
	base := func(t *testing.T) *graph.Graph {
		s := graph.NewScope()
		x := placeholder(s, "x", 2)
		s.Out("Identity", "id", []graph.Output{x}, nil)
		g := s.Graph()
		g.AddToCollection("inputs", g.Node("x"))
		return g
	}
	node := func(name, opName string, inputs ...string) *pb.NodeDef {
		return &pb.NodeDef{Name: name, Op: opName, Input: inputs}
	}
	ph := &pb.NodeDef{Name: "p", Op: "Placeholder", Attr: map[string]*pb.AttrValue{"dtype": graph.AttrToProto(tensor.Float32)}}
	tests := []struct {
		name    string
		gd      *pb.GraphDef
		wantErr string
		notFnd  bool
		want    string // node names after import
		coll    string // names in collection "inputs"
	}{
		{name: "append referring to old nodes", gd: &pb.GraphDef{Node: []*pb.NodeDef{node("id2", "Identity", "id:0"), node("id3", "Identity", "id2", "^x")}},
			want: "x id id2 id3", coll: "x"},
		{name: "collections appended", gd: &pb.GraphDef{Node: []*pb.NodeDef{ph}, Collections: map[string]*pb.NameList{"inputs": {Names: []string{"p", "id"}}}},
			want: "x id p", coll: "x p id"},
		{name: "duplicate name", gd: &pb.GraphDef{Node: []*pb.NodeDef{node("ok", "Identity", "x"), node("id", "Identity", "x")}},
			wantErr: `"id"`, want: "x id", coll: "x"},
		{name: "unknown input", gd: &pb.GraphDef{Node: []*pb.NodeDef{node("a", "Identity", "x"), node("b", "Identity", "nope:0")}},
			wantErr: `"nope"`, notFnd: true, want: "x id", coll: "x"},
		{name: "unknown control input", gd: &pb.GraphDef{Node: []*pb.NodeDef{node("a", "Identity", "x", "^nope")}},
			wantErr: `"nope"`, notFnd: true, want: "x id", coll: "x"},
		{name: "unknown op", gd: &pb.GraphDef{Node: []*pb.NodeDef{node("a", "NoSuchOp")}},
			wantErr: "NoSuchOp", want: "x id", coll: "x"},
		{name: "collection names unknown node", gd: &pb.GraphDef{Node: []*pb.NodeDef{ph}, Collections: map[string]*pb.NameList{"inputs": {Names: []string{"ghost"}}}},
			wantErr: "ghost", notFnd: true, want: "x id", coll: "x"},
		{name: "newer version", gd: &pb.GraphDef{Version: 99}, wantErr: "version 99", want: "x id", coll: "x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := base(t)
			err := graph.Import(g, tc.gd)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Import: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Import error %v, want one mentioning %s", err, tc.wantErr)
			case tc.notFnd && !errors.Is(err, graph.ErrNotFound):
				t.Errorf("error %v does not wrap graph.ErrNotFound", err)
			}
			var names, coll []string
			for _, n := range g.Nodes() {
				names = append(names, n.Name())
			}
			for _, n := range g.Collection("inputs") {
				coll = append(coll, n.Name())
			}
			if got := strings.Join(names, " "); got != tc.want {
				t.Errorf("nodes after Import = %q, want %q", got, tc.want)
			}
			if got := strings.Join(coll, " "); got != tc.coll {
				t.Errorf("collection after Import = %q, want %q", got, tc.coll)
			}
			// The graph stays usable: a rolled-back name can be added again.
			if _, err := g.AddNode(graph.NodeSpec{Op: "Identity", Name: "ok", Inputs: []graph.Output{g.Node("x").Output(0)}}); tc.wantErr != "" && err != nil {
				t.Errorf("adding a node after a failed Import: %v", err)
			}
		})
	}
}
