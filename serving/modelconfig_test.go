package serving

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestParseModelConfig reads model config files as tensorflow_model_server's
// users write them, and refuses what distflow would not serve as asked.
func TestParseModelConfig(t *testing.T) {
	got, err := parseModelConfig([]byte(`
# two models
model_config_list {
  config {
    name: 'mnist'
    base_path: "/models/mnist"
    model_platform: "tensorflow"
    model_version_policy { latest { num_versions: 1 } }
  }
  config: { name: "cnn", base_path: "/models/cnn" }
}`))
	want := []ModelSpec{{"mnist", "/models/mnist"}, {"cnn", "/models/cnn"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	for body, says := range map[string]string{
		``:                     "no model",
		`model_config_list {}`: "no model",
		`model_config_list { config { base_path: "/m" } }`:                                                               "config 1: no name",
		`model_config_list { config { name: "a" } }`:                                                                     `config 1 ("a"): no base_path`,
		`model_config_list { config { name: "a/b" base_path: "/m" } }`:                                                   "may not contain",
		`model_config_list { config { name: "a" base_path: "/m" } config { name: "a" base_path: "/n" } }`:                "given to two models",
		`model_config_list { config { name: "a" base_path: "/m" model_platform: "onnx" } }`:                              `model_platform "onnx"`,
		`model_config_list { config { name: "a" base_path: "/m" model_version_policy { all {} } } }`:                     "newest version",
		`model_config_list { config { name: "a" base_path: "/m" model_version_policy { specific { versions: 3 } } } }`:   "newest version",
		`model_config_list { config { name: "a" base_path: "/m" model_version_policy { latest { num_versions: 2 } } } }`: "num_versions: 2",
		`model_config_list { config { name: "a" base_path: "/m" version_labels { key: "stable" value: 1 } } }`:           "version_labels",
		`model_config_list { config { name: "a" base_path: "/m" }`:                                                       "distflow reads",
	} {
		if _, err := parseModelConfig([]byte(body)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: error %v, want one saying %q", body, err, says)
		}
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxModelConfigBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadModelConfigFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversized file: %v", err)
	}
	if _, err := ReadModelConfigFile(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing file was read")
	}
}

// FuzzParseModelConfig: any file parses or fails with an error, never a
// panic, and what parses names models that can be served.
func FuzzParseModelConfig(f *testing.F) {
	f.Add([]byte(`model_config_list { config { name: "a" base_path: "/m" model_version_policy { latest { num_versions: 1 } } } }`))
	f.Fuzz(func(t *testing.T, b []byte) {
		specs, err := parseModelConfig(b)
		if err != nil {
			return
		}
		for _, s := range specs {
			if s.Name == "" || s.BasePath == "" || strings.ContainsAny(s.Name, "/:") {
				t.Fatalf("parsed an unservable model %+v from %q", s, b)
			}
		}
	})
}
