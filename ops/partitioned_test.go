package ops_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

func TestPartitionedVariableShapes(t *testing.T) {
	for _, tc := range []struct {
		shape  []int
		shards int
		rows   []int
	}{
		{[]int{10, 3}, 3, []int{4, 3, 3}},
		{[]int{10, 3}, 1, []int{10}},
		{[]int{4}, 4, []int{1, 1, 1, 1}},
		{[]int{7, 2, 2}, 2, []int{4, 3}},
	} {
		t.Run(fmt.Sprint(tc.shape, tc.shards), func(t *testing.T) {
			s := graph.NewScope()
			pv, err := ops.NewPartitionedVariable(s.SubScope("layer"), "emb", tensor.Float32, tc.shape, ops.GlorotUniformInit(7), tc.shards)
			if err != nil {
				t.Fatal(err)
			}
			if pv.Name() != "layer/emb" || !reflect.DeepEqual(pv.Shape(), tc.shape) || pv.DType() != tensor.Float32 {
				t.Errorf("name %q shape %v dtype %v", pv.Name(), pv.Shape(), pv.DType())
			}
			if got := pv.Value().Shape().Dims(); !reflect.DeepEqual(got, tc.shape) {
				t.Errorf("value shape %v, want %v", got, tc.shape)
			}
			shards := pv.Shards()
			if len(shards) != tc.shards || len(pv.Initializers()) != tc.shards {
				t.Fatalf("%d shards, want %d", len(shards), tc.shards)
			}
			for i, v := range shards {
				if want := fmt.Sprintf("layer/emb/part_%d", i); v.Name() != want {
					t.Errorf("shard %d is %q, want %q", i, v.Name(), want)
				}
				if want := append([]int{tc.rows[i]}, tc.shape[1:]...); !reflect.DeepEqual(v.Shape().Dims(), want) {
					t.Errorf("shard %d shape %v, want %v", i, v.Shape(), want)
				}
			}
			if got := len(ops.TrainableVariables(s.Graph())); got != tc.shards {
				t.Errorf("%d trainable variables, want %d", got, tc.shards)
			}
		})
	}
}

func TestPartitionedVariableErrors(t *testing.T) {
	for _, tc := range []struct {
		shape  []int
		shards int
		init   ops.Initializer
		msg    string
	}{
		{[]int{4}, 0, ops.ZerosInit(), "0 shards"},
		{[]int{4}, 5, ops.ZerosInit(), "5 shards for dimension 0 of size 4"},
		{nil, 1, ops.ZerosInit(), "scalar"},
		{[]int{4, -1}, 2, ops.ZerosInit(), "not fully defined"},
		{[]int{4}, 2, nil, "no initializer"},
	} {
		s := graph.NewScope()
		pv, err := ops.NewPartitionedVariable(s, "p", tensor.Float32, tc.shape, tc.init, tc.shards)
		if pv != nil || err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), `"p"`) || s.Err() != err {
			t.Errorf("shape %v shards %d: %v, %v (scope: %v); want an error with %q", tc.shape, tc.shards, pv, err, s.Err(), tc.msg)
		}
	}
}

// TestPartitionedVariableValue checks that the value is the shards'
// concatenation, that it equals an unpartitioned variable with the same
// initializer, and that gradients reach every shard.
func TestPartitionedVariableValue(t *testing.T) {
	s := graph.NewScope()
	pv, err := ops.NewPartitionedVariable(s, "p", tensor.Float32, []int{5, 2}, ops.RandomUniformInit(-1, 1, 3), 3)
	if err != nil {
		t.Fatal(err)
	}
	plain := ops.NewVariable(s, "plain", tensor.Float32, []int{5, 2}, ops.RandomUniformInit(-1, 1, 3))
	loss := ops.Sum(s, ops.Square(s, pv.Value()), nil, false)
	var xs []graph.Output
	for _, v := range pv.Shards() {
		xs = append(xs, v.Value())
	}
	grads, err := grad.Gradients(s, []graph.Output{loss}, xs, nil)
	if err != nil {
		t.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := stateSession(t, s.Graph())
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	fetches := append([]graph.Output{pv.Value(), plain.Value()}, xs...)
	fetches = append(fetches, grads...)
	out, err := sess.Run(ctx, nil, fetches, nil)
	if err != nil {
		t.Fatal(err)
	}
	value, want := out[0].Float32s(), out[1].Float32s()
	if !reflect.DeepEqual(value, want) {
		t.Errorf("partitioned value %v, unpartitioned %v", value, want)
	}
	var concat []float32
	for _, sh := range out[2 : 2+len(xs)] {
		concat = append(concat, sh.Float32s()...)
	}
	if !reflect.DeepEqual(value, concat) {
		t.Errorf("value %v is not the concatenation %v", value, concat)
	}
	for i, g := range out[2+len(xs):] {
		sh := out[2+i].Float32s()
		if !reflect.DeepEqual(g.Shape(), out[2+i].Shape()) {
			t.Fatalf("gradient %d shape %v, shard %v", i, g.Shape(), out[2+i].Shape())
		}
		for k, d := range g.Float32s() {
			if d != 2*sh[k] {
				t.Errorf("shard %d: d loss/d x[%d] = %v, want %v", i, k, d, 2*sh[k])
			}
		}
	}
}

// TestPartitionedVariableReplicaSetter spreads shards over the ps tasks
// while the concatenation and initial value stay on the worker.
func TestPartitionedVariableReplicaSetter(t *testing.T) {
	for _, strategy := range []placement.Strategy{placement.RoundRobin, placement.GreedyBySize} {
		s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
			PSTasks: 3, WorkerDevice: "/job:worker/task:0", Strategy: strategy,
		}))
		pv, err := ops.NewPartitionedVariable(s, "emb", tensor.Float32, []int{9, 4}, ops.ZerosInit(), 3)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range pv.Shards() {
			want := fmt.Sprintf("/job:ps/task:%d", i)
			if v.Node().Device() != want || v.Initializer().Device() != want {
				t.Errorf("%v: shard %d on %q (initializer %q), want %q", strategy, i, v.Node().Device(), v.Initializer().Device(), want)
			}
		}
		if d := pv.Value().Node.Device(); d != "/job:worker/task:0" {
			t.Errorf("%v: value on %q", strategy, d)
		}
	}
}
