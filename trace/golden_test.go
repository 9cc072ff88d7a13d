package trace_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/trace"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the Builder's output")

// TestBuilderGolden keeps the file of a small two-task step in
// testdata/step.json, indented, as the readable reference of the format:
// go test ./trace -run TestBuilderGolden -update rewrites it.
func TestBuilderGolden(t *testing.T) {
	var b trace.Builder
	b.Add(step())
	got, err := json.MarshalIndent(b.File(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "step.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the Builder's file differs from %s (run with -update if the change is meant):\n%s", path, got)
	}
	if err := trace.Validate(want); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}
