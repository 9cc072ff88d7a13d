package cluster_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/distflow/distflow/cluster"
)

// The types Kubeflow's v1 training operator marshals into TF_CONFIG
// (github.com/kubeflow/training-operator v1.8.1,
// pkg/controller.v1/tensorflow/tensorflow.go: TFConfig, TaskSpec,
// ClusterSpec; genClusterSpec names each replica
// "JOB-TYPE-INDEX.NAMESPACE.svc" with the port of the container port named
// "tfjob-port", default 2222, and lower-cases the replica type).
type operatorTaskSpec struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

type operatorTFConfig struct {
	Cluster     map[string][]string `json:"cluster"`
	Task        operatorTaskSpec    `json:"task"`
	Environment string              `json:"environment"`
}

// operatorTFConfigFor is what the operator writes for one replica of the
// TFJob "mnist" in namespace "ml" with the given replicas.
func operatorTFConfigFor(replicas map[string]int, typ string, index int) string {
	c := operatorTFConfig{Cluster: map[string][]string{}, Task: operatorTaskSpec{typ, index}, Environment: "cloud"}
	for rt, n := range replicas {
		for i := range n {
			c.Cluster[rt] = append(c.Cluster[rt], fmt.Sprintf("mnist-%s-%d.ml.svc:2222", rt, i))
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestKubeflowTFConfig parses TF_CONFIG as the v1 TFJob operator sets it on
// every replica, with no warnings ("environment" is TensorFlow's and
// ignored on purpose).
func TestKubeflowTFConfig(t *testing.T) {
	// Verbatim, as the operator writes it (json.Marshal sorts the keys of
	// the cluster map).
	golden := `{"cluster":{"chief":["mnist-chief-0.ml.svc:2222"],"ps":["mnist-ps-0.ml.svc:2222"],"worker":["mnist-worker-0.ml.svc:2222","mnist-worker-1.ml.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}`
	replicas := map[string]int{"chief": 1, "worker": 2, "ps": 1}
	if got := operatorTFConfigFor(replicas, "worker", 1); got != golden {
		t.Fatalf("the operator's form changed:\n got %s\nwant %s", got, golden)
	}
	for typ, n := range replicas {
		for i := range n {
			js := operatorTFConfigFor(replicas, typ, i)
			spec, self, err := cluster.FromTFConfig(js)
			if err != nil {
				t.Fatalf("%s %d: %v\n%s", typ, i, err, js)
			}
			if self != (cluster.TaskID{Job: typ, Index: i}) {
				t.Errorf("task = %v, want %s/%d", self, typ, i)
			}
			if got, want := spec.NumTasks("worker"), 2; got != want {
				t.Errorf("%d workers, want %d", got, want)
			}
			addr, err := spec.Address(self)
			if want := fmt.Sprintf("mnist-%s-%d.ml.svc:2222", typ, i); err != nil || addr != want {
				t.Errorf("address of %v = %q, %v; want %q", self, addr, err, want)
			}
			if ws := cluster.TFConfigWarnings(js); len(ws) != 0 {
				t.Errorf("warnings for the operator's TF_CONFIG: %q", ws)
			}
		}
	}
}

// TestKubeflowSparseTFConfig: with enableDynamicWorker the operator writes a
// sparse cluster (worker as an index -> address object), which distflow does
// not read; the error says where.
func TestKubeflowSparseTFConfig(t *testing.T) {
	js := `{"cluster":{"worker":{"1":"mnist-worker-1.ml.svc:2222"},"ps":["mnist-ps-0.ml.svc:2222"]},"task":{"type":"worker","index":1}}`
	_, _, err := cluster.FromTFConfig(js)
	if err == nil {
		t.Fatal("a sparse TF_CONFIG was accepted")
	}
	if !strings.Contains(err.Error(), "TF_CONFIG") {
		t.Errorf("error %q does not name TF_CONFIG", err)
	}
	t.Log(err)
}
