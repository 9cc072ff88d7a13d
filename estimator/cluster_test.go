package estimator_test

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/estimator/strategytest"
)

// loopbackTasks listens on a free loopback port for each task and returns
// the cluster of those addresses with the listeners.
func loopbackTasks(t *testing.T, tasks ...cluster.TaskID) (*cluster.Spec, map[cluster.TaskID]net.Listener) {
	t.Helper()
	addrs := map[string][]string{}
	lis := map[cluster.TaskID]net.Listener{}
	for _, task := range tasks {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[task.Job] = append(addrs[task.Job], l.Addr().String())
		lis[task] = l
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	return spec, lis
}

// runCluster trains the linear model with strategy on a cluster of the
// given jobs whose tasks are goroutines of this test, each with its own
// estimator and server on a loopback listener, and returns the chief's
// estimator and every task's result.
func runCluster(t *testing.T, jobs map[string]int, strategy estimator.Strategy, steps int64) (*estimator.Estimator, []*estimator.Result) {
	t.Helper()
	return runClusterModel(t, linearModel, jobs, strategy, steps)
}

// runClusterModel is runCluster with another model function.
func runClusterModel(t *testing.T, model estimator.ModelFn, jobs map[string]int, strategy estimator.Strategy, steps int64) (*estimator.Estimator, []*estimator.Result) {
	t.Helper()
	return strategytest.Cluster{Model: model, Input: linearInput(1000, true), Jobs: jobs, Strategy: strategy, Steps: steps}.Run(t)
}

// TestEveryStrategyTrainsOnACluster trains the same model with each
// strategy on 1 ps + 2 workers (2 workers without ps for the collective
// strategies) and checks that it reaches what one process reaches.
func TestEveryStrategyTrainsOnACluster(t *testing.T) {
	ps := map[string]int{"ps": 1, "worker": 2}
	ring := map[string]int{"worker": 2}
	for _, tc := range []struct {
		strategy estimator.Strategy
		jobs     map[string]int
	}{
		{estimator.Async{}, ps},
		{estimator.Sync{}, ps},
		{estimator.Sync{ReplicasToAggregate: 1}, ps},
		{estimator.Staleness{Bound: 2}, ps},
		{estimator.InGraph{}, ps},
		{estimator.AllReduce{}, ring},
		{estimator.Averaging{Every: 4}, ring},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			est, results := runCluster(t, tc.jobs, tc.strategy, 400)
			m, err := est.Evaluate(context.Background(), linearInput(200, false))
			if err != nil {
				t.Fatal(err)
			}
			if m["mae"] > 0.1 {
				t.Errorf("mean absolute error %.4f after training; want < 0.1", m["mae"])
			}
			w, err := est.VariableValue("w")
			if err != nil || math.Abs(w.Float64At(0)-2) > 0.05 {
				t.Errorf("w = %v (%v); want about 2", w, err)
			}
			served := 0
			for _, r := range results {
				if r.Served {
					served++
				}
			}
			if want := tc.jobs["ps"]; tc.strategy.String() == "in-graph" {
				want++ // the other worker only serves
				if served != want {
					t.Errorf("%d tasks served; want %d", served, want)
				}
			} else if served != want {
				t.Errorf("%d tasks served; want %d", served, want)
			}
		})
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	spec, err := cluster.NewSpec(map[string][]string{"ps": {"127.0.0.1:1"}, "worker": {"127.0.0.1:2", "127.0.0.1:3"}})
	if err != nil {
		t.Fatal(err)
	}
	worker := cluster.TaskID{Job: "worker"}
	for _, tc := range []struct {
		cfg  estimator.RunConfig
		want string
	}{
		{estimator.RunConfig{Strategy: estimator.Sync{}}, "coordinates the workers of a cluster"},
		{estimator.RunConfig{Cluster: spec, Task: worker, Strategy: estimator.Averaging{Every: 2}}, "without parameter servers"},
		{estimator.RunConfig{Cluster: spec, Task: worker, Strategy: estimator.Sync{ReplicasToAggregate: 3}}, "ReplicasToAggregate 3"},
		{estimator.RunConfig{Cluster: spec, Task: worker, Strategy: estimator.Staleness{Bound: -1}}, "Staleness.Bound -1"},
		{estimator.RunConfig{StepTimeout: -time.Second}, "StepTimeout"},
		{estimator.RunConfig{SaveCheckpointsSteps: -1}, "SaveCheckpointsSteps"},
		{estimator.RunConfig{Towers: -1}, "Towers -1"},
		{estimator.RunConfig{Towers: 2, Devices: make([]device.Device, 1)}, "Towers 2 with 1 Devices"},
		{estimator.RunConfig{Cluster: spec, Task: cluster.TaskID{Job: "worker", Index: 5}}, "not in the cluster"},
	} {
		_, err := estimator.New(linearModel, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v; want one naming %q", tc.cfg, err, tc.want)
		}
	}
	est, err := estimator.New(linearModel, estimator.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, stop := range []estimator.Stop{{}, {MaxSteps: -1}, {Epochs: math.NaN(), ExamplesPerEpoch: 10}, {Epochs: 1}} {
		if _, err := est.Train(context.Background(), linearInput(10, true), stop); err == nil {
			t.Errorf("Stop %+v: no error", stop)
		}
	}
}

func TestParseStrategy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want estimator.Strategy
	}{
		{"async", estimator.Async{}},
		{"sync", estimator.Sync{}},
		{"sync:2", estimator.Sync{ReplicasToAggregate: 2}},
		{"staleness:3", estimator.Staleness{Bound: 3}},
		{"ingraph", estimator.InGraph{}},
		{"in-graph", estimator.InGraph{}},
		{"allreduce", estimator.AllReduce{}},
		{"averaging", estimator.Averaging{}},
		{"averaging:10", estimator.Averaging{Every: 10}},
	} {
		if got, err := estimator.ParseStrategy(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseStrategy(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "asink", "staleness", "sync:x", "sync:-1", "async:2", "allreduce:1"} {
		if got, err := estimator.ParseStrategy(in); err == nil {
			t.Errorf("ParseStrategy(%q) = %v; want an error", in, got)
		}
	}
}

func TestLaunchLocalClusterChecksTheStrategyFirst(t *testing.T) {
	for _, tc := range []struct {
		jobs     string
		strategy estimator.Strategy
		want     string
	}{
		{"ps=1,worker=2", estimator.Averaging{Every: 2}, "without parameter servers"},
		{"worker=2", estimator.Sync{}, "no ps task"},
		{"ps=1,worker=2", estimator.Sync{ReplicasToAggregate: 3}, "ReplicasToAggregate 3"},
		{"ps=1,worker=x", estimator.Async{}, "worker=x"},
	} {
		err := estimator.LaunchLocalCluster(context.Background(), tc.jobs, tc.strategy, "local-cluster")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s with %v: %v; want an error naming %q", tc.jobs, tc.strategy, err, tc.want)
		}
	}
}
