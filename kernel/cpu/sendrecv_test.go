package cpu_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// partitionRun builds n's kernel and computes it once in a step with rv.
func partitionRun(ctx context.Context, t *testing.T, n *graph.Node, rv kernel.Rendezvous, inputs ...*tensor.Tensor) ([]*tensor.Tensor, error) {
	t.Helper()
	f, err := kernel.Lookup(n.Op(), kernel.CPU)
	if err != nil {
		t.Fatal(err)
	}
	k, err := f(n)
	if err != nil {
		t.Fatalf("building the kernel of %s: %v", n, err)
	}
	if b, ok := k.(interface{ MayBlock() bool }); n.Op() == "Recv" && (!ok || !b.MayBlock()) {
		t.Errorf("the Recv kernel does not declare MayBlock")
	}
	c := &kernel.Context{Ctx: ctx, Node: n, Inputs: inputs, Outputs: make([]*tensor.Tensor, n.NumOutputs()),
		Step: &kernel.Step{ID: 1, Rendezvous: rv}}
	err = k.Compute(c)
	return c.Outputs, err
}

func TestSendRecvKernels(t *testing.T) {
	const ps, wk = "/job:ps/task:0/cpu:0", "/job:worker/task:0/cpu:0"
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	key := map[string]any{"tensor_name": "x:0", "send_device": ps, "recv_device": wk}
	send := s.AddNode("Send", "send", []graph.Output{x}, key)
	recv := s.AddNode("Recv", "recv", nil, map[string]any{"tensor_name": "x:0", "send_device": ps, "recv_device": wk,
		"dtype": tensor.Float32, "shape": tensor.MakeShape(2)})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if send.NumOutputs() != 0 || recv.NumOutputs() != 1 || recv.Output(0).DType() != tensor.Float32 {
		t.Fatalf("Send has %d outputs, Recv %d", send.NumOutputs(), recv.NumOutputs())
	}
	ctx := context.Background()
	val := tensor.MustFromSlice([]float32{1, 2}, 2)

	rv := rendezvous.NewLocal()
	if _, err := partitionRun(ctx, t, send, rv, val); err != nil {
		t.Fatal(err)
	}
	out, err := partitionRun(ctx, t, recv, rv)
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != val {
		t.Errorf("Recv returned %v, want the sent tensor itself (no copy)", out[0])
	}

	tests := []struct {
		name    string
		node    *graph.Node
		rv      kernel.Rendezvous
		timeout time.Duration
		want    []string
		is      error
	}{
		{"send without rendezvous", send, nil, 0, []string{"send (Send)", "no rendezvous"}, nil},
		{"recv deadline", recv, rendezvous.NewLocal(), 10 * time.Millisecond, []string{"recv (Recv)", "x:0"}, context.DeadlineExceeded},
		{"recv aborted", recv, aborted(), 0, []string{"recv (Recv)"}, rendezvous.ErrAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			_, err := partitionRun(ctx, t, tt.node, tt.rv, val)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
		})
	}
}

func aborted() *rendezvous.Local {
	l := rendezvous.NewLocal()
	l.Abort(errors.New("peer failed"))
	return l
}

func TestSendRecvOpErrors(t *testing.T) {
	tests := []struct {
		name  string
		op    string
		attrs map[string]any
		want  string
	}{
		{"empty device", "Send", map[string]any{"tensor_name": "a:0", "send_device": "", "recv_device": "/job:w/task:0/cpu:0"}, "send_device"},
		{"missing dtype", "Recv", map[string]any{"tensor_name": "a:0", "send_device": "/job:a/task:0/cpu:0", "recv_device": "/job:w/task:0/cpu:0"}, "dtype"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := graph.NewScope()
			var in []graph.Output
			if tt.op == "Send" {
				in = []graph.Output{ops.Const(s, float32(1))}
			}
			s.AddNode(tt.op, "n", in, tt.attrs)
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}
