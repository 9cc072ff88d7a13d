//go:build linux

package cuda

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	gops "github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// TestFakeInputTypeFallsBack: a comparison or a cast whose input type
// the CUDA kernel lacks (float64) goes to the CPU under soft placement,
// logged with the reason, rather than fail its launch; one it has runs on
// the GPU.
func TestFakeInputTypeFallsBack(t *testing.T) {
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", fakeDir(t))
	devs, err := (&Platform{}).Open(device.Options{Count: 1, MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	s := graph.NewScope().WithDevice("/job:localhost/task:0/device:GPU:0")
	x64 := gops.Placeholder(s, "x64", tensor.Float64, tensor.MakeShape(3))
	x32 := gops.Placeholder(s, "x32", tensor.Float32, tensor.MakeShape(3))
	wide := gops.Greater(s, x64, gops.ZerosLike(s, x64))
	cast := gops.Cast(s, x64, tensor.Float32)
	narrow := gops.Greater(s, x32, cast)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := taskgraph.Config{Task: "/job:localhost/task:0", Devices: devs, SoftPlacement: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	e, err := taskgraph.New(s.Graph(), graph.Signature{Feeds: []graph.Output{x64, x32}, Fetches: []graph.Output{wide, narrow}}, kernel.NewResources(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for node, wantGPU := range map[*graph.Node]bool{wide.Node: false, cast.Node: false, narrow.Node: true} {
		if got := strings.HasSuffix(e.Placement()[node.Name()], "/gpu:0"); got != wantGPU {
			t.Errorf("%s (%s) on the GPU: %v; want %v", node.Name(), node.Op(), got, wantGPU)
		}
	}
	if !strings.Contains(logs.String(), "kernel for Greater of a float64 input") {
		t.Errorf("the fallback's reason is not logged:\n%s", logs.String())
	}
	out, err := e.Run(context.Background(), []*tensor.Tensor{
		tensor.MustFromSlice([]float64{-1, 0, 2}, 3), tensor.MustFromSlice([]float32{0, 1, 1}, 3)})
	if err != nil {
		t.Fatalf("a step with the float64 comparison: %v", err)
	}
	if got := out[0].Bools(); !slices.Equal(got, []bool{false, false, true}) {
		t.Errorf("x > 0 = %v", got)
	}
	if got := out[1].Bools(); !slices.Equal(got, []bool{true, true, false}) {
		t.Errorf("x32 > float32(x64) = %v", got)
	}
}
