package graph_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// testAdd is a test-only op: two inputs of one dtype and merged shapes.
func init() {
	op.Register(op.Def{
		Name:   "GraphTestAdd",
		Inputs: []op.Arg{{Name: "a"}, {Name: "b"}},
		Attrs:  []op.Attr{{Name: "scale", Type: op.AttrFloat, Default: float32(1)}, {Name: "axes", Type: op.AttrInts, Default: []int{}}},
		Infer: func(c *op.InferContext) error {
			dt, err := c.SameDTypes()
			if err != nil {
				return err
			}
			s, err := c.InputShape(0).Merge(c.InputShape(1))
			if err != nil {
				return err
			}
			c.SetOutput(0, dt, s)
			return nil
		},
	})
}

func placeholder(s *graph.Scope, name string, dims ...int) graph.Output {
	return s.Out("Placeholder", name, nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(dims...)})
}

func TestShapeErrorNamesNodeOpAndShapes(t *testing.T) {
	s := graph.NewScope()
	a := placeholder(s, "a", -1, 784)
	b := placeholder(s, "b", -1, 10)
	s.SubScope("layer").Out("GraphTestAdd", "sum", []graph.Output{a, b}, nil)
	err := s.Err()
	if err == nil {
		t.Fatal("incompatible shapes accepted")
	}
	for _, want := range []string{`"layer/sum"`, "GraphTestAdd", "[?,784]", "[?,10]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestScopeDefersFirstError(t *testing.T) {
	s := graph.NewScope()
	bad := s.Out("NoSuchOp", "x", nil, nil)
	if bad.Valid() {
		t.Fatal("unknown op produced an output")
	}
	first := s.Err()
	// Builders after the error are no-ops and keep the first error.
	if n := s.AddNode("NoOp", "later", nil, nil); n != nil {
		t.Error("AddNode after an error added a node")
	}
	if s.Err() != first || !strings.Contains(first.Error(), "NoSuchOp") {
		t.Errorf("Err() = %v, want the first error about NoSuchOp", s.Err())
	}
	if s.Graph().NumNodes() != 0 {
		t.Errorf("graph has %d nodes after failed builds", s.Graph().NumNodes())
	}
}

func TestAttrValidation(t *testing.T) {
	cases := []struct {
		attrs map[string]any
		want  string
	}{
		{map[string]any{"scale": 2.0}, `attribute "scale": want float, got float64`},
		{map[string]any{"nope": 1}, `op has no attribute "nope"`},
	}
	for _, c := range cases {
		s := graph.NewScope()
		a := placeholder(s, "a", 2)
		s.Out("GraphTestAdd", "", []graph.Output{a, a}, c.attrs)
		if s.Err() == nil || !strings.Contains(s.Err().Error(), c.want) {
			t.Errorf("attrs %v: error %v, want %q", c.attrs, s.Err(), c.want)
		}
	}
	s := graph.NewScope()
	s.Out("Placeholder", "p", nil, map[string]any{"shape": tensor.MakeShape(1)})
	if s.Err() == nil || !strings.Contains(s.Err().Error(), `required attribute "dtype"`) {
		t.Errorf("missing required attr: %v", s.Err())
	}
	s = graph.NewScope()
	a := placeholder(s, "a", 2)
	s.Out("GraphTestAdd", "", []graph.Output{a}, nil)
	if s.Err() == nil || !strings.Contains(s.Err().Error(), "takes 2 inputs, got 1") {
		t.Errorf("wrong input count: %v", s.Err())
	}
}

func TestNamesAreUniqueAndScoped(t *testing.T) {
	s := graph.NewScope()
	a := placeholder(s, "x", 2)
	b := placeholder(s, "x", 2)
	l1 := s.SubScope("dense")
	l2 := s.SubScope("dense")
	c := l1.Out("GraphTestAdd", "", []graph.Output{a, b}, nil)
	d := l2.Out("GraphTestAdd", "", []graph.Output{a, b}, nil)
	got := []string{a.Name(), b.Name(), c.Name(), d.Name()}
	want := []string{"x:0", "x_1:0", "dense/GraphTestAdd:0", "dense_1/GraphTestAdd:0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("names %v, want %v", got, want)
	}
	if o, err := s.Graph().Output("dense_1/GraphTestAdd:0"); err != nil || o != d {
		t.Errorf("Output lookup: %v %v", o, err)
	}
	if _, err := s.Graph().Output("missing:0"); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("unknown name: %v", err)
	}
}

func TestDevicesAndControlDependencies(t *testing.T) {
	s := graph.NewScope()
	ps := s.WithDevice("/job:ps/task:0")
	v := ps.AddNode("Variable", "w", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(3)})
	init := s.WithControlDependencies(v).AddNode("NoOp", "init", nil, nil)
	if v.Device() != "/job:ps/task:0" || init.Device() != "" {
		t.Errorf("devices: %q %q", v.Device(), init.Device())
	}
	if len(init.ControlInputs()) != 1 || init.ControlInputs()[0] != v {
		t.Errorf("control inputs: %v", init.ControlInputs())
	}
}

// TestProtoRoundTrip checks that a graph with every attribute type, control
// dependencies, devices and collections survives serialisation exactly.
func TestProtoRoundTrip(t *testing.T) {
	s := graph.NewScope()
	a := placeholder(s, "a", -1, 3)
	c := s.Out("Const", "c", nil, map[string]any{"value": tensor.MustFromSlice([]float32{1, 2, 3}, 1, 3)})
	sum := s.WithDevice("/job:worker/task:1").Out("GraphTestAdd", "sum", []graph.Output{a, c},
		map[string]any{"scale": float32(0.5), "axes": []int{0, -1}})
	v := s.AddNode("Variable", "v", nil, map[string]any{"dtype": tensor.Int64, "shape": tensor.ScalarShape()})
	grp := s.WithControlDependencies(sum.Node, v).AddNode("NoOp", "group", nil, nil)
	s.Graph().AddToCollection("variables", v)
	s.Graph().AddToCollection("train_op", grp)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	b1, err := s.Graph().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := graph.Unmarshal(b1)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := g2.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Error("re-serialised graph differs")
	}
	if g2.NumNodes() != s.Graph().NumNodes() {
		t.Fatalf("nodes: %d vs %d", g2.NumNodes(), s.Graph().NumNodes())
	}
	for i, n := range s.Graph().Nodes() {
		m := g2.Nodes()[i]
		if n.Name() != m.Name() || n.Op() != m.Op() || n.Device() != m.Device() || n.NumOutputs() != m.NumOutputs() {
			t.Errorf("node %d: %v/%q vs %v/%q", i, n, n.Device(), m, m.Device())
		}
		for j := 0; j < n.NumOutputs(); j++ {
			if !n.Output(j).Shape().Equal(m.Output(j).Shape()) || n.Output(j).DType() != m.Output(j).DType() {
				t.Errorf("%v output %d: %v %v vs %v %v", n, j, n.Output(j).DType(), n.Output(j).Shape(), m.Output(j).DType(), m.Output(j).Shape())
			}
		}
	}
	if got := g2.Node("sum").AttrInts("axes"); fmt.Sprint(got) != "[0 -1]" {
		t.Errorf("axes attr: %v", got)
	}
	if got := g2.Node("c").AttrTensor("value"); !tensor.Equal(got, tensor.MustFromSlice([]float32{1, 2, 3}, 1, 3)) {
		t.Errorf("tensor attr: %v", got)
	}
	if got := g2.Collection("variables"); len(got) != 1 || got[0].Name() != "v" {
		t.Errorf("collection: %v", got)
	}
	if got := g2.Node("group").ControlInputs(); len(got) != 2 {
		t.Errorf("control inputs after round trip: %v", got)
	}
}

func TestUnmarshalRejectsBadGraphs(t *testing.T) {
	if _, err := graph.Unmarshal([]byte{0xff, 0xff}); err == nil {
		t.Error("garbage accepted")
	}
	s := graph.NewScope()
	a := placeholder(s, "a", 2)
	s.Out("GraphTestAdd", "sum", []graph.Output{a, a}, nil)
	gd := s.Graph().ToProto()
	gd.Node[0], gd.Node[1] = gd.Node[1], gd.Node[0] // input defined after its consumer
	if _, err := graph.FromProto(gd); err == nil || !strings.Contains(err.Error(), `"sum"`) {
		t.Errorf("out-of-order graph: %v", err)
	}
}

func TestDeviceFunc(t *testing.T) {
	s := graph.NewScope().WithDeviceFunc(func(spec *graph.NodeSpec) string {
		if spec.Op == "Variable" {
			return "/job:ps/task:0"
		}
		if spec.Device != "" {
			return spec.Device
		}
		return "/job:worker/task:1"
	})
	v := s.AddNode("Variable", "v", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(2)})
	n := s.AddNode("NoOp", "n", nil, nil)
	e := s.WithDevice("/job:worker/task:3").AddNode("NoOp", "e", nil, nil)
	if v.Device() != "/job:ps/task:0" || n.Device() != "/job:worker/task:1" || e.Device() != "/job:worker/task:3" {
		t.Errorf("devices %q %q %q", v.Device(), n.Device(), e.Device())
	}
}
