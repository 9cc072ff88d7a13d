package kubernetes

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
)

// TestManifestFlags checks that every flag the manifests give `distflow
// train` is one the binary built from this tree has (the manifests must
// not outlive a renamed flag).
func TestManifestFlags(t *testing.T) {
	var args [][]string
	for _, d := range readDocs(t, "indexed-jobs.yaml") {
		if d.meta.Kind == "Job" {
			j := new(batchv1.Job)
			decodeStrict(t, d, j)
			args = append(args, container(t, j.Name, j.Spec.Template.Spec, "distflow").Args)
		}
	}
	tf := new(kubeflowv1.TFJob)
	decodeStrict(t, readDocs(t, "tfjob.yaml")[0], tf)
	for rt, s := range tf.Spec.TFReplicaSpecs {
		args = append(args, container(t, string(rt), s.Template.Spec, kubeflowv1.TFJobDefaultContainerName).Args)
	}
	bin := distflowBinary(t)
	help, err := exec.Command(bin, "train", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("distflow train --help: %v\n%s", err, help)
	}
	have := map[string]bool{}
	for _, m := range regexp.MustCompile(`--([a-z0-9_-]+)`).FindAllStringSubmatch(string(help), -1) {
		have[m[1]] = true
	}
	for _, a := range args {
		if a[0] != "train" {
			t.Errorf("args %q: want the train command", a)
			continue
		}
		for _, f := range a[1:] {
			name, _, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			if !strings.HasPrefix(f, "--") || !have[name] {
				t.Errorf("distflow train has no flag %q (manifest args %q)", f, a)
			}
		}
	}
}

var built struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// distflowBinary builds distflow from this tree once per test run (a
// static build, as the Dockerfile makes it) and returns its path.
func distflowBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "distflow-deploy-test")
		if built.err != nil {
			return
		}
		build := exec.Command("go", "build", "-tags", "nocuda", "-o", filepath.Join(built.dir, "distflow"), "./cmd/distflow")
		build.Dir = "../.."
		build.Env = append(build.Environ(), "CGO_ENABLED=0")
		built.out, built.err = build.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("building distflow: %v\n%s", built.err, built.out)
	}
	return filepath.Join(built.dir, "distflow")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
