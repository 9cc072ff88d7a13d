package graph

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// graphVersion is bumped when the meaning of a serialised graph changes.
const graphVersion = 1

// ToProto serialises the graph. Nodes keep their order and attributes, so
// FromProto(ToProto(g)) rebuilds an identical graph.
func (g *Graph) ToProto() *pb.GraphDef {
	nodes := g.Nodes()
	gd := &pb.GraphDef{Version: graphVersion, Node: make([]*pb.NodeDef, 0, len(nodes))}
	for _, n := range nodes {
		nd := &pb.NodeDef{Name: n.name, Op: n.def.Name, Device: n.device, Attr: map[string]*pb.AttrValue{}}
		for _, in := range n.inputs {
			nd.Input = append(nd.Input, in.Name())
		}
		for _, c := range n.control {
			nd.Input = append(nd.Input, "^"+c.name)
		}
		for k, v := range n.attrs {
			nd.Attr[k] = AttrToProto(v)
		}
		gd.Node = append(gd.Node, nd)
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if len(g.collections) > 0 {
		gd.Collections = map[string]*pb.NameList{}
		for k, v := range g.collections {
			gd.Collections[k] = &pb.NameList{Names: append([]string(nil), v...)}
		}
	}
	return gd
}

// Marshal returns the deterministic protobuf encoding of the graph.
func (g *Graph) Marshal() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(g.ToProto())
}

// Unmarshal decodes a graph produced by Marshal.
func Unmarshal(b []byte) (*Graph, error) {
	gd := &pb.GraphDef{}
	if err := proto.Unmarshal(b, gd); err != nil {
		return nil, fmt.Errorf("graph: decoding GraphDef: %w", err)
	}
	return FromProto(gd)
}

// FromProto rebuilds a graph, validating every node as AddNode does.
func FromProto(gd *pb.GraphDef) (*Graph, error) { return fromProto(gd, 0) }

// fromProto is FromProto for a graph nested depth functions deep.
func fromProto(gd *pb.GraphDef, depth int) (*Graph, error) {
	if gd.Version > graphVersion {
		return nil, fmt.Errorf("graph: GraphDef version %d is newer than this build understands (%d)", gd.Version, graphVersion)
	}
	g := New()
	for _, nd := range gd.Node {
		spec := NodeSpec{Op: nd.Op, Name: nd.Name, Device: nd.Device, Attrs: map[string]any{}}
		for _, in := range nd.Input {
			if c, ok := strings.CutPrefix(in, "^"); ok {
				n := g.Node(c)
				if n == nil {
					return nil, fmt.Errorf("graph: node %q: control input %q is not defined before it", nd.Name, c)
				}
				spec.Control = append(spec.Control, n)
				continue
			}
			o, err := g.Output(in)
			if err != nil {
				return nil, fmt.Errorf("graph: node %q: input %q: %w", nd.Name, in, err)
			}
			spec.Inputs = append(spec.Inputs, o)
		}
		for k, av := range nd.Attr {
			v, err := attrFromProto(av, depth)
			if err != nil {
				return nil, fmt.Errorf("graph: node %q: attribute %q: %w", nd.Name, k, err)
			}
			spec.Attrs[k] = v
		}
		if _, err := g.AddNode(spec); err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(gd.Collections))
	for k := range gd.Collections {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, name := range gd.Collections[k].Names {
			n := g.Node(name)
			if n == nil {
				return nil, fmt.Errorf("graph: collection %q names unknown node %q", k, name)
			}
			g.AddToCollection(k, n)
		}
	}
	return g, nil
}

// AttrToProto converts an attribute value (one of the op.AttrType Go types).
func AttrToProto(v any) *pb.AttrValue {
	switch x := v.(type) {
	case int:
		return &pb.AttrValue{Value: &pb.AttrValue_I{I: int64(x)}}
	case float32:
		return &pb.AttrValue{Value: &pb.AttrValue_F{F: x}}
	case bool:
		return &pb.AttrValue{Value: &pb.AttrValue_B{B: x}}
	case string:
		return &pb.AttrValue{Value: &pb.AttrValue_S{S: x}}
	case tensor.DType:
		return &pb.AttrValue{Value: &pb.AttrValue_Type{Type: pb.DataType(x)}}
	case tensor.Shape:
		return &pb.AttrValue{Value: &pb.AttrValue_Shape{Shape: ShapeToProto(x)}}
	case []int:
		l := &pb.AttrValue_IntList{Values: make([]int64, len(x))}
		for i, e := range x {
			l.Values[i] = int64(e)
		}
		return &pb.AttrValue{Value: &pb.AttrValue_Ints{Ints: l}}
	case []float32:
		return &pb.AttrValue{Value: &pb.AttrValue_Floats{Floats: &pb.AttrValue_FloatList{Values: append([]float32{}, x...)}}}
	case []string:
		return &pb.AttrValue{Value: &pb.AttrValue_Strings{Strings: &pb.AttrValue_StringList{Values: append([]string{}, x...)}}}
	case *tensor.Tensor:
		return &pb.AttrValue{Value: &pb.AttrValue_Tensor{Tensor: TensorToProto(x)}}
	case *Func:
		return &pb.AttrValue{Value: &pb.AttrValue_Func{Func: funcToProto(x)}}
	}
	panic(fmt.Sprintf("graph: attribute of unsupported type %T", v)) // AddNode type-checks attributes
}

// AttrFromProto converts back to the Go type of the attribute.
func AttrFromProto(av *pb.AttrValue) (any, error) { return attrFromProto(av, 0) }

// attrFromProto is AttrFromProto for an attribute of a graph nested depth
// functions deep.
func attrFromProto(av *pb.AttrValue, depth int) (any, error) {
	switch x := av.GetValue().(type) {
	case *pb.AttrValue_I:
		return int(x.I), nil
	case *pb.AttrValue_F:
		return x.F, nil
	case *pb.AttrValue_B:
		return x.B, nil
	case *pb.AttrValue_S:
		return x.S, nil
	case *pb.AttrValue_Type:
		return tensor.DType(x.Type), nil
	case *pb.AttrValue_Shape:
		return ShapeFromProto(x.Shape), nil
	case *pb.AttrValue_Ints:
		out := make([]int, len(x.Ints.GetValues()))
		for i, e := range x.Ints.GetValues() {
			out[i] = int(e)
		}
		return out, nil
	case *pb.AttrValue_Floats:
		return append([]float32{}, x.Floats.GetValues()...), nil
	case *pb.AttrValue_Strings:
		return append([]string{}, x.Strings.GetValues()...), nil
	case *pb.AttrValue_Tensor:
		return TensorFromProto(x.Tensor)
	case *pb.AttrValue_Func:
		return funcFromProto(x.Func, depth+1)
	}
	return nil, fmt.Errorf("empty or unknown attribute value")
}

// ShapeToProto converts a partial shape.
func ShapeToProto(s tensor.Shape) *pb.ShapeProto {
	if !s.KnownRank() {
		return &pb.ShapeProto{UnknownRank: true}
	}
	sp := &pb.ShapeProto{Dims: make([]int64, s.Rank())}
	for i := range sp.Dims {
		sp.Dims[i] = int64(s.Dim(i))
	}
	return sp
}

// ShapeFromProto converts back to a partial shape.
func ShapeFromProto(sp *pb.ShapeProto) tensor.Shape {
	if sp.GetUnknownRank() {
		return tensor.UnknownShape()
	}
	d := make([]int, len(sp.GetDims()))
	for i, v := range sp.GetDims() {
		d[i] = int(v)
	}
	return tensor.MakeShape(d...)
}

// TensorToProto converts a tensor; content aliases nothing (it is a copy).
func TensorToProto(t *tensor.Tensor) *pb.TensorProto {
	tp := TensorToProtoView(t)
	tp.Content = append([]byte(nil), tp.Content...)
	return tp
}

// TensorToProtoView is TensorToProto with the proto's content aliasing
// t's data instead of a copy of it: t must not change while the proto is
// in use, and whoever reads the proto's content reads t.
func TensorToProtoView(t *tensor.Tensor) *pb.TensorProto {
	tp := &pb.TensorProto{Dtype: pb.DataType(t.DType()), Dims: make([]int64, t.Rank())}
	for i, d := range t.Shape() {
		tp.Dims[i] = int64(d)
	}
	tp.Content = t.RawBytes()
	return tp
}

// TensorFromProto converts back, validating dtype and size.
func TensorFromProto(tp *pb.TensorProto) (*tensor.Tensor, error) {
	return tensorFromProto(tp, false)
}

// TensorViewFromProto is TensorFromProto with the tensor's data aliasing
// tp's content when it can (tensor.ViewRawBytes): tp's content must not
// change while the tensor is in use.
func TensorViewFromProto(tp *pb.TensorProto) (*tensor.Tensor, error) {
	return tensorFromProto(tp, true)
}

func tensorFromProto(tp *pb.TensorProto, view bool) (*tensor.Tensor, error) {
	var buf [8]int // the common case allocates nothing
	shape := buf[:0]
	for i, d := range tp.GetDims() {
		if d < 0 || d > 1<<40 {
			return nil, fmt.Errorf("graph: tensor dimension %d is %d", i, d)
		}
		shape = append(shape, int(d))
	}
	if view {
		return tensor.ViewRawBytes(tensor.DType(tp.GetDtype()), shape, tp.GetContent())
	}
	return tensor.FromRawBytes(tensor.DType(tp.GetDtype()), shape, tp.GetContent())
}

// ParseTensorName splits "node:3" into ("node", 3); "node" means index 0.
func ParseTensorName(name string) (string, int, error) {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		v, err := strconv.Atoi(name[i+1:])
		if err != nil || v < 0 {
			return "", 0, fmt.Errorf("graph: bad tensor name %q: want node:index", name)
		}
		return name[:i], v, nil
	}
	return name, 0, nil
}
