package pki_test

import (
	"context"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/pki"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/tensor"
)

// TestToolCannotWriteNaNThroughTheMaster: a tool's certificate may open a
// session on a task's master, which runs the tool's graphs on the task's
// worker; a NaN the tool writes into a variable, through an Identity, is
// refused there as it is from any other process.
func TestToolCannotWriteNaNThroughTheMaster(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	spec, ps, err := cluster.FromFlags(lis.Addr().String(), "127.0.0.1:1", "", "ps", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := pki.Create(pki.CreateConfig{Dir: dir, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	opts, err := pki.Security{CertsDir: dir}.TaskOptions(spec, ps, log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Cluster: spec, Task: ps, Listener: lis, RPC: opts, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	tool, err := pki.Security{CertsDir: dir}.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	s := graph.NewScope()
	v := ops.NewVariable(s.WithDevice(ps.String()), "w", tensor.Float32, []int{2}, ops.ConstantInit(1))
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	write := ops.Assign(s.WithDevice(ps.String()), v.Node().Output(0), ops.Identity(s, x))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := rpc.OpenSession(ctx, "grpc://"+lis.Addr().String(), s.Graph(), tool)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{v.Initializer()}); err != nil {
		t.Fatal(err)
	}
	nan := tensor.MustFromSlice([]float32{float32(math.NaN()), 0}, 2)
	_, err = sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: nan}, nil, []*graph.Node{write.Node})
	if err == nil || !strings.Contains(err.Error(), "non-finite value written into a variable") || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("a tool's NaN write: %v; want it refused naming the variable", err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{v.Value()}, nil)
	if err != nil || out[0].Float32s()[0] != 1 {
		t.Errorf("the variable after the refused write: %v, %v; want 1", out, err)
	}
}
