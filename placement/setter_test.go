package placement_test

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

// TestReplicaStrategies places variables of 100, 10, 10 and 10 floats on
// 2 ps tasks: round-robin alternates, greedy balances the bytes.
func TestReplicaStrategies(t *testing.T) {
	for _, tc := range []struct {
		strategy  placement.Strategy
		wantTasks []string
		wantBytes [2]int
	}{
		{placement.RoundRobin, []string{"/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0", "/job:ps/task:1"}, [2]int{440, 80}},
		{placement.GreedyBySize, []string{"/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:1", "/job:ps/task:1"}, [2]int{400, 120}},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
				PSTasks: 2, WorkerDevice: "/job:worker/task:1", Strategy: tc.strategy,
			}))
			var got []string
			var bytes [2]int
			for i, n := range []int{100, 10, 10, 10} {
				v := variable(s, fmt.Sprintf("v%d", i), n)
				got = append(got, v.Node.Device())
				d, err := placement.ParseDevice(v.Node.Device())
				if err != nil {
					t.Fatal(err)
				}
				bytes[d.Task] += 4 * n
			}
			if !reflect.DeepEqual(got, tc.wantTasks) || bytes != tc.wantBytes {
				t.Errorf("devices %v bytes %v, want %v %v", got, bytes, tc.wantTasks, tc.wantBytes)
			}
		})
	}
}

func TestReplicaDeviceSetter(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  placement.ReplicaConfig
		want map[string]string // node -> requested device after the setter
	}{
		{"ps and worker", placement.ReplicaConfig{PSTasks: 2, WorkerDevice: "/job:worker/task:1"}, map[string]string{
			"w": "/job:ps/task:0", "w/Assign": "/job:ps/task:0", "w/Initializer/Fill": "/job:worker/task:1",
			"b": "/job:ps/task:1", "b/Assign": "/job:ps/task:1",
			"pinned": "/job:ps/task:1", "pinned/Assign": "/job:ps/task:1",
			"local": "/job:worker/task:0", "local/Assign": "/job:worker/task:0",
			"after_pinned": "/job:ps/task:0",
			"MatMul":       "/job:worker/task:1", "cpu/Identity": "/job:worker/task:1/cpu:0",
			"other_task/Identity": "/job:worker/task:3", "on_ps/Identity": "/job:ps",
			"ApplyGradientDescent": "/job:ps/task:0",
		}},
		{"custom ps job", placement.ReplicaConfig{PSTasks: 1, PSJob: "param", WorkerDevice: "/job:worker/task:0/cpu:0"}, map[string]string{
			"w": "/job:param/task:0", "b": "/job:param/task:0", "MatMul": "/job:worker/task:0/cpu:0",
			"pinned": "/job:ps/task:1/cpu:0", "local": "/job:worker/task:0/cpu:0",
		}},
		{"no ps", placement.ReplicaConfig{WorkerDevice: "/job:worker/task:2"}, map[string]string{
			"w": "/job:worker/task:2", "w/Assign": "/job:worker/task:2", "MatMul": "/job:worker/task:2",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(tc.cfg))
			w := ops.NewVariable(s, "w", tensor.Float32, []int{3, 2}, ops.ZerosInit())
			ops.NewVariable(s, "b", tensor.Float32, []int{2}, ops.ZerosInit())
			ops.NewVariable(s.WithDevice("/job:ps/task:1"), "pinned", tensor.Float32, []int{2}, ops.ZerosInit())
			ops.NewVariable(s.WithDevice("/job:worker/task:0"), "local", tensor.Float32, []int{2}, ops.ZerosInit())
			ops.NewVariable(s, "after_pinned", tensor.Float32, []int{2}, ops.ZerosInit())
			x := ops.Const(s, mustTensor(t, []float32{1, 2, 3}, 1, 3))
			ops.MatMul(s, x, w.Value(), false, false)
			ops.Identity(s.SubScope("cpu").WithDevice("/cpu:0"), x)
			ops.Identity(s.SubScope("other_task").WithDevice("/task:3"), x)
			ops.Identity(s.SubScope("on_ps").WithDevice("/job:ps"), x)
			ops.ApplyGradientDescent(s.WithDevice("/job:worker/task:0"), w.Value(), ops.Const(s, float32(0.1)), ops.Const(s, mustTensor(t, []float32{1, 1, 1, 1, 1, 1}, 3, 2)))
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				n := s.Graph().Node(name)
				if n == nil {
					t.Errorf("no node %q", name)
					continue
				}
				if n.Device() != want {
					t.Errorf("%s: device %q, want %q", name, n.Device(), want)
				}
			}
			// The placer accepts what the setter chose (every group agrees).
			opts := placement.Options{Devices: clusterDevices, Default: "/job:worker/task:0", SoftPlacement: true}
			if _, err := placement.Place(s.Graph().Nodes(), opts); err != nil {
				t.Errorf("Place: %v", err)
			}
		})
	}
}

// TestReplicaDeviceSetterConcurrent builds variables from several
// goroutines; the strategy's state is shared safely and every task gets
// its share.
func TestReplicaDeviceSetterConcurrent(t *testing.T) {
	f := placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 4, Strategy: placement.RoundRobin})
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				d := f(&graph.NodeSpec{Op: "Variable", Attrs: map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(4)}})
				mu.Lock()
				count[d]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for k := 0; k < 4; k++ {
		if n := count[fmt.Sprintf("/job:ps/task:%d", k)]; n != 200 {
			t.Errorf("ps task %d got %d variables, want 200 (%v)", k, n, count)
		}
	}
}

func mustTensor(t *testing.T, data any, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.FromSlice(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
