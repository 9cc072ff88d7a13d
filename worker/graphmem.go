package worker

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/distflow/distflow/proto/distflowpb"
)

// Per-item costs of a decoded graph (graph.FromProto) beyond the bytes of
// its strings and tensors: a node's struct, its entry in the graph's name
// index and node list, its attribute map, its outputs' infos and names;
// an input edge; an attribute's map entry and boxed value. Measured with
// runtime.MemStats on the reference models and on graphs of many small
// nodes (TestGraphMemoryEstimate), and rounded up. A decoded graph holds
// 6 to 7 times its serialised size for the reference models' training
// graphs, 8.6 times for a chain of small nodes, 3 times for nodes with
// many control inputs, and about its size when Const tensors make up most
// of it; the estimate is 1.0 to 2 times what is held.
const (
	nodeCost  = 448
	inputCost = 24
	attrCost  = 96
)

// GraphMemory estimates the bytes that the graph decoded from gd holds in
// memory once built (graph.FromProto): the unit in which Config's graph
// limits (and master.Config's) are counted. It is never less than gd's
// serialised size, so a request larger than a limit is over it, and it
// reads gd without allocating.
func GraphMemory(gd *pb.GraphDef) int64 {
	var n int64
	for _, nd := range gd.GetNode() {
		// The name is held by the node, the name index and the outputs'
		// names ("name:0"), which a node has about as many as inputs.
		n += nodeCost + 3*int64(len(nd.GetName())) + int64(len(nd.GetDevice()))
		for _, in := range nd.GetInput() {
			n += inputCost + int64(len(in))
		}
		for k, av := range nd.GetAttr() {
			n += attrCost + int64(len(k)) + attrMemory(av)
		}
	}
	for k, l := range gd.GetCollections() {
		n += int64(len(k))
		for _, name := range l.GetNames() {
			n += 16 + int64(len(name))
		}
	}
	return max(n, int64(proto.Size(gd)))
}

// attrMemory is the bytes an attribute value holds beyond attrCost.
func attrMemory(av *pb.AttrValue) int64 {
	switch v := av.GetValue().(type) {
	case *pb.AttrValue_S:
		return int64(len(v.S))
	case *pb.AttrValue_Shape:
		return 8 * int64(len(v.Shape.GetDims()))
	case *pb.AttrValue_Ints:
		return 8 * int64(len(v.Ints.GetValues()))
	case *pb.AttrValue_Floats:
		return 4 * int64(len(v.Floats.GetValues()))
	case *pb.AttrValue_Strings:
		var n int64
		for _, s := range v.Strings.GetValues() {
			n += 16 + int64(len(s))
		}
		return n
	case *pb.AttrValue_Tensor:
		// A tensor's data is a copy of its content, in one allocation.
		return 128 + 8*int64(len(v.Tensor.GetDims())) + int64(len(v.Tensor.GetContent()))
	case *pb.AttrValue_Func:
		// A function (a loop body) is a decoded graph of its own.
		n := GraphMemory(v.Func.GetGraph())
		for _, s := range append(v.Func.GetArg(), v.Func.GetRet()...) {
			n += 16 + int64(len(s))
		}
		return n
	}
	return 0
}
