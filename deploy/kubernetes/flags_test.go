package kubernetes

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
	bin := filepath.Join(t.TempDir(), "distflow")
	build := exec.Command("go", "build", "-o", bin, "./cmd/distflow")
	build.Dir = "../.."
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building distflow: %v\n%s", err, out)
	}
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
