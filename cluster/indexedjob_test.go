package cluster_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/distflow/distflow/cluster"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestIndexedJobsTFConfig builds each pod's TF_CONFIG from an Indexed Job's
// environment and parses it back.
func TestIndexedJobsTFConfig(t *testing.T) {
	for _, tc := range []struct {
		ns, task, index, want string
	}{
		{"", "worker", "1", "mnist-worker-1.mnist:2222"},
		{"ml", "ps", "0", "mnist-ps-0.mnist.ml.svc.cluster.local:2222"},
		{"ml", "chief", "0", "mnist-chief-0.mnist.ml.svc.cluster.local:2222"},
	} {
		env := map[string]string{
			cluster.EnvK8sReplicas: "chief=1, worker=2,ps=1,evaluator=0", cluster.EnvK8sName: "mnist",
			cluster.EnvK8sTask: tc.task, cluster.EnvJobCompletionIndex: tc.index, cluster.EnvK8sNamespace: tc.ns,
		}
		j, ok, err := cluster.IndexedJobsFromEnv(envOf(env))
		if err != nil || !ok {
			t.Fatalf("%v: %v, ok=%v", env, err, ok)
		}
		js, err := j.TFConfig()
		if err != nil {
			t.Fatal(err)
		}
		spec, self, err := cluster.FromTFConfig(js)
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if got, _ := spec.Address(self); got != tc.want {
			t.Errorf("%s/%s: address %q, want %q (TF_CONFIG %s)", tc.task, tc.index, got, tc.want, js)
		}
		if spec.NumTasks("worker") != 2 || spec.NumTasks("ps") != 1 || spec.HasJob("evaluator") {
			t.Errorf("cluster %v, want chief=1,worker=2,ps=1", spec.JSON())
		}
		if !strings.Contains(js, `"environment":"cloud"`) {
			t.Errorf("TF_CONFIG %s lacks the operator's environment key", js)
		}
	}
}

// TestIndexedJobsEvaluator: a Job of evaluators beside the cluster's gets
// an evaluator task, and no task sees it in the training cluster.
func TestIndexedJobsEvaluator(t *testing.T) {
	for _, task := range []string{"evaluator", "worker"} {
		j, ok, err := cluster.IndexedJobsFromEnv(envOf(map[string]string{
			cluster.EnvK8sReplicas: "chief=1,worker=2,ps=1,evaluator=1", cluster.EnvK8sName: "mnist",
			cluster.EnvK8sTask: task, cluster.EnvJobCompletionIndex: "0"}))
		if err != nil || !ok {
			t.Fatalf("%s: %v, ok=%v", task, err, ok)
		}
		js, err := j.TFConfig()
		if err != nil {
			t.Fatal(err)
		}
		spec, self, err := cluster.FromTFConfig(js)
		if err != nil || self.Job != task || spec.HasJob(cluster.EvaluatorJob) || spec.NumTasks("worker") != 2 {
			t.Errorf("%s: task %s, cluster %v, %v (TF_CONFIG %s)", task, self, spec, err, js)
		}
	}
}

func TestIndexedJobsFromEnvErrors(t *testing.T) {
	base := map[string]string{cluster.EnvK8sReplicas: "worker=2,ps=1", cluster.EnvK8sName: "mnist",
		cluster.EnvK8sTask: "worker", cluster.EnvJobCompletionIndex: "0"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		if v == "<unset>" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	if _, ok, err := cluster.IndexedJobsFromEnv(envOf(with(cluster.EnvK8sReplicas, "<unset>"))); ok || err != nil {
		t.Errorf("without %s: ok=%v err=%v, want neither", cluster.EnvK8sReplicas, ok, err)
	}
	for _, tc := range []struct {
		k, v, wantMsg string
		sentinel      error
	}{
		{cluster.EnvK8sReplicas, "worker:2", "JOB=COUNT", cluster.ErrBadConfig},
		{cluster.EnvK8sReplicas, "worker=2,worker=1", "given twice", cluster.ErrBadConfig},
		{cluster.EnvJobCompletionIndex, "<unset>", "Indexed", cluster.ErrBadConfig},
		{cluster.EnvJobCompletionIndex, "2", "has 2 task(s)", cluster.ErrIndexOutOfRange},
		{cluster.EnvK8sTask, "wroker", "lists jobs ps, worker", cluster.ErrUnknownJob},
		{cluster.EnvK8sTask, "<unset>", "this pod's job", cluster.ErrBadConfig},
		{cluster.EnvK8sName, "MNIST", "DNS label", cluster.ErrBadConfig},
		{cluster.EnvK8sName, strings.Repeat("m", 60), "at most 63", cluster.ErrBadConfig},
		{cluster.EnvK8sPort, "http", "port number", cluster.ErrBadConfig},
		{cluster.EnvK8sPort, "70000", "1-65535", cluster.ErrBadConfig},
	} {
		_, _, err := cluster.IndexedJobsFromEnv(envOf(with(tc.k, tc.v)))
		if err == nil || !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("%s=%q: error %v, want %v containing %q", tc.k, tc.v, err, tc.sentinel, tc.wantMsg)
		}
	}
}
