package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChaosRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--strategy", "ring"}, `unknown strategy "ring": want one of async, sync`},
		{[]string{"--strategy", "sync", "--plan", "kill:worker1"}, "want kill:TASK@AT"},
		{[]string{"--window-fraction", "2"}, "--window-fraction 2"},
		{[]string{"--runs", "-1"}, "must not be negative"},
		{[]string{"--slow-slack", "-1s"}, "--slow-slack -1s must not be negative"},
		{[]string{"--from-json", "/nonexistent/chaos.json"}, "no such file"},
	} {
		_, stderr, err := run(t, append([]string{"chaos"}, tc.args...)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("distflow chaos %v: err %v, stderr %q; want an error saying %q", tc.args, err, stderr, tc.want)
		}
	}
}

// TestChaosFromJSON prints the tables of a saved --json output without
// running anything.
func TestChaosFromJSON(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chaos.json")
	js := `{"results": [
 {"strategy":"sync","seed":1,"finished":true,"accuracy":0.85,"global_step":800,"faults":[],"checkpoints":5,"wall":9000000000},
 {"strategy":"sync","seed":1,"finished":false,"exit_error":"exit status 1","global_step":201,"clean_accuracy":0.85,
  "faults":[{"at":6500000000,"kind":"kill","target":{"job":"ps","index":0},"applied":true,"noticed":true,"notice_after":300000000}],
  "checkpoints":2,"left_behind":["ps 0 (pid 9, state S)"],"wall":6600000000},
 {"strategy":"sync","seed":2,"finished":true,"accuracy":0.85,"global_step":800,"clean_accuracy":0.85,
  "faults":[{"at":2000000000,"kind":"kill","target":{"job":"worker","index":1},"applied":true,"noticed":true,"notice_after":100000000}],
  "checkpoints":5,"wall":70000000000,"clean_wall":9000000000,"wall_limit":37000000000,"slow":true}]}`
	if err := os.WriteFile(file, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, "chaos", "--from-json", file)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"clean run", "failed", "kill ps0@6.5s (0.3s)", "summary (fault runs):", "0.8500 (1: 0.8500-0.8500)",
		"slow", "70.0s (limit 37.0s)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}
