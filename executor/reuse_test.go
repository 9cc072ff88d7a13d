package executor_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
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
	// The records are package state: start clean under -count=N.
	seen.Delete("addr")
	kept.Delete("keep")
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

// ranOn records the goroutine that ran each ExecWhere node.
var ranOn sync.Map // node name -> goroutine ID

// goroutineID parses the current goroutine's ID from its stack header
// ("goroutine 42 [running]:").
func goroutineID() string {
	var buf [64]byte
	f := strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))
	return f[1]
}

func init() {
	op.Register(op.Def{Name: "ExecWhere", Inputs: []op.Arg{{Name: "x"}}, Infer: op.PassThrough})
	kernel.Register("ExecWhere", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		ranOn.Store(c.Node.Name(), goroutineID())
		c.Outputs[0] = c.Inputs[0]
		return nil
	}))
	// ExecWaitFor gives other goroutines up to a second to run the node
	// named by its attribute "other", as a slow kernel would.
	op.Register(op.Def{Name: "ExecWaitFor", Inputs: []op.Arg{{Name: "x"}}, Attrs: []op.Attr{{Name: "other", Type: op.AttrString}},
		Infer: op.PassThrough})
	kernel.Register("ExecWaitFor", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		other := c.Node.AttrString("other")
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); runtime.Gosched() {
			if _, ok := ranOn.Load(other); ok {
				break
			}
		}
		c.Outputs[0] = c.Inputs[0]
		return nil
	}))
}

// TestCostlySuccessorRunsInline checks the scheduling rule for a node whose
// completion readies a cheap and a costly successor: the costly one runs
// next on the same goroutine (here the caller's), not on a worker it would
// have to wake, whatever the order of the successors.
func TestCostlySuccessorRunsInline(t *testing.T) {
	s := graph.NewScope()
	small := ops.Placeholder(s, "small", tensor.Float32, tensor.MakeShape(4))
	big := ops.Placeholder(s, "big", tensor.Float32, tensor.MakeShape(1<<15))
	a := s.Out("ExecWhere", "a", []graph.Output{small}, nil)
	// The first successor of a; if it ran first, it would leave the costly
	// one the time to be taken by another goroutine.
	cheap := s.Out("ExecWaitFor", "cheap", []graph.Output{a}, map[string]any{"other": "costly"})
	costly := s.WithControlDependencies(a.Node).Out("ExecWhere", "costly", []graph.Output{big}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, s.Graph(), []graph.Output{small, big}, []graph.Output{cheap, costly}, nil, nil)
	for range 20 {
		ranOn.Clear()
		if _, err := e.Run(context.Background(), []*tensor.Tensor{tensor.New(tensor.Float32, 4), tensor.New(tensor.Float32, 1<<15)}); err != nil {
			t.Fatal(err)
		}
		caller := goroutineID()
		for _, n := range []string{"a", "costly"} {
			if g, _ := ranOn.Load(n); g != caller {
				t.Fatalf("node %s ran on goroutine %v, want the caller's (%s)", n, g, caller)
			}
		}
	}
}
