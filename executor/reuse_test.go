package executor_test

import (
	"context"
	"sync"
	"testing"
	"unsafe"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// kept holds the last input of each ExecKeep node: a stateful kernel that
// keeps its input past Compute, as Send does.
var kept sync.Map // node name -> *tensor.Tensor

// seen records the data address of each ExecAddr node's input per call.
var seen sync.Map // node name -> []uintptr

func init() {
	op.Register(op.Def{Name: "ExecKeep", Inputs: []op.Arg{{Name: "x"}}, Stateful: true,
		Infer: func(*op.InferContext) error { return nil }})
	kernel.Register("ExecKeep", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		kept.Store(c.Node.Name(), c.Inputs[0])
		return nil
	}))
	op.Register(op.Def{Name: "ExecAddr", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecAddr", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		x := c.Inputs[0]
		prev, _ := seen.Load(c.Node.Name())
		addrs, _ := prev.([]uintptr)
		seen.Store(c.Node.Name(), append(addrs, uintptr(unsafe.Pointer(&x.Float32s()[0]))))
		c.Alloc(0, x.DType(), x.Shape()...)
		return nil
	}))
}

// TestBufferReuse checks the recycling of output buffers across steps: an
// intermediate's buffer is reused from the second step on, while tensors the
// caller fetched (directly or through a forwarding kernel) and tensors a
// stateful kernel kept are never written again.
func TestBufferReuse(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(4))
	sum := ops.Add(s, x, x)                 // fetched
	sq := ops.Identity(s, ops.Mul(s, x, x)) // fetched through Identity
	neg := ops.Neg(s, x)                    // consumed by ExecKeep only
	keep := s.AddNode("ExecKeep", "keep", []graph.Output{neg}, nil)
	mid := ops.Square(s, ops.Add(s, x, sum)) // an intermediate
	addr := s.Out("ExecAddr", "addr", []graph.Output{mid}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, s.Graph(), []graph.Output{x}, []graph.Output{sum, sq, addr}, []*graph.Node{keep}, nil)
	run := func(v float32) []*tensor.Tensor {
		out, err := e.Run(context.Background(), []*tensor.Tensor{f32(v, v, v, v)})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := run(1)
	k, _ := kept.Load("keep")
	keptFirst := k.(*tensor.Tensor)
	for i := 2; i <= 4; i++ {
		run(float32(i))
	}
	if got := first[0].Float32s()[0]; got != 2 {
		t.Errorf("fetched Add changed to %v after later steps, want 2", got)
	}
	if got := first[1].Float32s()[0]; got != 1 {
		t.Errorf("fetched Identity(Mul) changed to %v after later steps, want 1", got)
	}
	if got := keptFirst.Float32s()[0]; got != -1 {
		t.Errorf("tensor kept by a stateful kernel changed to %v, want -1", got)
	}
	v, _ := seen.Load("addr")
	addrs := v.([]uintptr)
	if len(addrs) != 4 || addrs[1] != addrs[0] || addrs[2] != addrs[0] || addrs[3] != addrs[0] {
		t.Errorf("intermediate buffer addresses over 4 steps %x: want the first one reused", addrs)
	}
}
