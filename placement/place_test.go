package placement_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	_ "github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

func init() {
	// An op without any kernel, to test kernel-aware placement.
	op.Register(op.Def{
		Name:   "PlacementTestNoKernel",
		Inputs: []op.Arg{{Name: "x"}},
		Infer: func(c *op.InferContext) error {
			c.SetOutput(0, c.Inputs[0].DType, c.Inputs[0].Shape)
			return nil
		},
	})
}

var clusterDevices = []string{
	"/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0",
	"/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0",
}

// placeCase builds a graph and says where its named nodes must land, or
// which error (with which words) placement must give.
type placeCase struct {
	name   string
	build  func(s *graph.Scope)
	only   []string // nodes to place; nil means all
	opts   placement.Options
	want   map[string]string
	err    error
	msg    []string
	logged string
}

func variable(s *graph.Scope, name string, dims ...int) graph.Output {
	return s.Out("Variable", name, nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(dims...)})
}

func TestPlace(t *testing.T) {
	base := placement.Options{Devices: clusterDevices, Default: "/job:worker/task:1"}
	soft := base
	soft.SoftPlacement = true
	gpus := placement.Options{Devices: []string{"/job:worker/task:0/cpu:0", "/job:worker/task:0/gpu:0"}, Default: "/job:worker/task:0"}
	softGPUs := gpus
	softGPUs.SoftPlacement = true
	const ps0, ps1, w0, w1 = "/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0", "/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0"
	for _, tc := range []placeCase{
		{name: "default", opts: base,
			build: func(s *graph.Scope) { ops.Add(s.SubScope("a"), ops.Const(s, float32(1)), ops.Const(s, float32(2))) },
			want:  map[string]string{"a/Add": w1, "Const": w1, "Const_1": w1}},
		{name: "explicit", opts: base,
			build: func(s *graph.Scope) {
				s.WithDevice("/job:ps").AddNode("NoOp", "a", nil, nil)
				s.WithDevice("/job:ps/task:1").AddNode("NoOp", "b", nil, nil)
				s.WithDevice("/task:0").AddNode("NoOp", "c", nil, nil)
				s.WithDevice("/job:ps/replica:0/task:1/device:CPU:0").AddNode("NoOp", "d", nil, nil)
			},
			want: map[string]string{"a": ps0, "b": ps1, "c": w0, "d": ps1}},
		{name: "variable and its users colocated", opts: base,
			build: func(s *graph.Scope) {
				v := variable(s.WithDevice("/job:ps/task:1"), "v", 2)
				c := ops.Const(s, []float32{1, 2})
				ops.Assign(s, v, c)
				ops.ApplyGradientDescent(s.WithDevice("/job:ps"), v, ops.Const(s, float32(0.1)), c)
				ops.Identity(s, v)
			},
			want: map[string]string{"v": ps1, "Assign": ps1, "ApplyGradientDescent": ps1, "Const": w1, "Identity": w1}},
		{name: "group takes the first explicit request", opts: base,
			build: func(s *graph.Scope) {
				v := variable(s, "v", 2)
				ops.Assign(s.WithDevice("/job:ps/task:1"), v, ops.Const(s, []float32{1, 2}))
			},
			want: map[string]string{"v": ps1, "Assign": ps1}},
		{name: "slots join the group", opts: base,
			build: func(s *graph.Scope) {
				v := variable(s.WithDevice("/job:ps/task:1"), "v", 2)
				m := variable(s, "m", 2)
				ops.ApplyMomentum(s, v, m, ops.Const(s, float32(0.1)), ops.Const(s, []float32{1, 2}), ops.Const(s, float32(0.9)), false)
			},
			want: map[string]string{"v": ps1, "m": ps1, "ApplyMomentum": ps1}},
		{name: "variable outside the list", opts: base, only: []string{"Assign"},
			build: func(s *graph.Scope) {
				v := variable(s.WithDevice("/job:ps/task:1"), "v", 2)
				ops.Assign(s, v, ops.Const(s, []float32{1, 2}))
			},
			want: map[string]string{"Assign": ps1}},
		{name: "conflicting group", opts: soft,
			build: func(s *graph.Scope) {
				v := variable(s.WithDevice("/job:ps/task:0"), "v", 2)
				ops.Assign(s.WithDevice("/job:worker/task:0"), v, ops.Const(s, []float32{1, 2}))
			},
			err: placement.ErrColocation, msg: []string{`"Assign"`, `"/job:worker/task:0"`, `"v"`, `"/job:ps/task:0"`}},
		{name: "missing device", opts: base,
			build: func(s *graph.Scope) {
				v := variable(s.WithDevice("/job:ps/task:5"), "v", 2)
				ops.Assign(s, v, ops.Const(s, []float32{1, 2}))
			},
			err: placement.ErrNoDevice, msg: []string{`node "v" (Variable)`, "with 1 colocated nodes", `"/job:ps/task:5"`, ps0, w1}},
		{name: "missing device, soft", opts: soft,
			build: func(s *graph.Scope) {
				v := variable(s.WithDevice("/job:ps/task:5"), "v", 2)
				ops.Assign(s, v, ops.Const(s, []float32{1, 2}))
			},
			want: map[string]string{"v": w1, "Assign": w1}, logged: "node=v op=Variable requested=/job:ps/task:5 device=/job:worker/task:1/cpu:0"},
		{name: "missing device type, soft keeps the task", opts: soft,
			build: func(s *graph.Scope) { s.WithDevice("/job:ps/task:1/device:GPU:0").AddNode("NoOp", "n", nil, nil) },
			want:  map[string]string{"n": ps1}, logged: "requested=/job:ps/task:1/gpu:0 device=/job:ps/task:1/cpu:0"},
		{name: "no kernel for the device type", opts: gpus,
			build: func(s *graph.Scope) { ops.Sqrt(s.WithDevice("/gpu:0"), ops.Const(s, float32(1))) },
			err:   placement.ErrNoDevice, msg: []string{`node "Sqrt"`, "no GPU kernel", `"/gpu:0"`, "/job:worker/task:0/gpu:0]"}},
		{name: "no kernel for the device type, soft", opts: softGPUs,
			build: func(s *graph.Scope) { ops.Sqrt(s.WithDevice("/gpu:0"), ops.Const(s, float32(1))) },
			want:  map[string]string{"Sqrt": w0, "Const": w0}, logged: "device=/job:worker/task:0/cpu:0"},
		{name: "an op every GPU platform runs", opts: gpus,
			build: func(s *graph.Scope) { ops.Identity(s.WithDevice("/gpu:0"), ops.Const(s, float32(1))) },
			want:  map[string]string{"Identity": "/job:worker/task:0/gpu:0", "Const": w0}},
		{name: "no kernel anywhere", opts: soft,
			build: func(s *graph.Scope) {
				s.Out("PlacementTestNoKernel", "k", []graph.Output{ops.Const(s, float32(1))}, nil)
			},
			err: placement.ErrNoDevice, msg: []string{`node "k"`, `no CPU kernel for op "PlacementTestNoKernel"`}},
		{name: "bad node device", opts: soft,
			build: func(s *graph.Scope) { s.WithDevice("/job:ps/tusk:0").AddNode("NoOp", "n", nil, nil) },
			err:   placement.ErrBadDevice, msg: []string{`node "n"`, `"/job:ps/tusk:0"`}},
		{name: "no devices", opts: placement.Options{},
			build: func(s *graph.Scope) { s.AddNode("NoOp", "n", nil, nil) },
			err:   placement.ErrNoDevice, msg: []string{"empty"}},
		{name: "partial available device", opts: placement.Options{Devices: []string{"/job:ps"}},
			build: func(s *graph.Scope) { s.AddNode("NoOp", "n", nil, nil) },
			err:   placement.ErrBadDevice, msg: []string{`"/job:ps"`, "job and a task"}},
		{name: "default not available", opts: placement.Options{Devices: clusterDevices, Default: "/job:chief"},
			build: func(s *graph.Scope) { s.AddNode("NoOp", "n", nil, nil) },
			err:   placement.ErrNoDevice, msg: []string{`default device "/job:chief"`}},
		{name: "task-level devices", opts: placement.Options{Devices: []string{"/job:ps/task:0", "/job:worker/task:0"}, Default: "/job:worker"},
			build: func(s *graph.Scope) { s.AddNode("NoOp", "n", nil, nil) },
			want:  map[string]string{"n": w0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope()
			tc.build(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			nodes := s.Graph().Nodes()
			if tc.only != nil {
				nodes = nil
				for _, name := range tc.only {
					nodes = append(nodes, s.Graph().Node(name))
				}
			}
			var logs bytes.Buffer
			tc.opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			got, err := placement.Place(nodes, tc.opts)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error = %v, want %v", err, tc.err)
				}
				for _, m := range tc.msg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not contain %q", err, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(nodes) {
				t.Errorf("placed %d nodes, want %d", len(got), len(nodes))
			}
			for name, want := range tc.want {
				if d := got[s.Graph().Node(name)]; d != want {
					t.Errorf("%s on %q, want %q", name, d, want)
				}
			}
			if !strings.Contains(logs.String(), tc.logged) || tc.logged == "" && logs.Len() > 0 {
				t.Errorf("log %q, want %q", logs.String(), tc.logged)
			}
		})
	}
}
