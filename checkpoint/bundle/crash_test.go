//go:build unix

package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/tensor"
)

// crashEnv, in the environment of this test binary, makes TestCrashChild
// save a checkpoint and SIGKILL itself at the n-th crash point: "dir n".
const crashEnv = "DISTFLOW_BUNDLE_CRASH"

func crashVars(v float32) map[string]*tensor.Tensor {
	return map[string]*tensor.Tensor{
		"a": tensor.MustFromSlice([]float32{v, v + 1, v + 2}, 3),
		"b": tensor.Scalar(v * 10),
	}
}

// saveStep is one whole save as the Saver does it across tasks: two shards
// (the ps tasks), the index (the chief), then retention keeping 1.
func saveStep(dir string, step int64, v float32) error {
	prefix := Prefix("model.ckpt", step)
	vars := crashVars(v)
	s0, err := WriteShard(dir, prefix, 0, 2, map[string]*tensor.Tensor{"a": vars["a"]})
	if err != nil {
		return err
	}
	s1, err := WriteShard(dir, prefix, 1, 2, map[string]*tensor.Tensor{"b": vars["b"]})
	if err != nil {
		return err
	}
	if err := WriteIndex(dir, prefix, step, []ShardInfo{s0, s1}); err != nil {
		return err
	}
	return RetainLog(dir, 1, slog.New(slog.DiscardHandler))
}

// TestCrashChild is not a test on its own: TestKillDuringSave runs this
// binary with crashEnv set, and this saves step 200 and kills itself at the
// chosen point. Without crashEnv it does nothing.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("run by TestKillDuringSave")
	}
	dir, nStr, _ := strings.Cut(spec, " ")
	n, _ := strconv.Atoi(nStr)
	seen := 0
	crashPoint = func(point string) {
		seen++
		if seen == n {
			fmt.Fprintf(os.Stderr, "CRASH AT %s\n", point)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	if err := saveStep(dir, 200, 2); err != nil {
		t.Fatal(err)
	}
}

// TestKillDuringSave kills a real process (SIGKILL) at each point of a save
// of step 200 over a directory holding a valid step 100: before and after
// each temporary file is written, synced and renamed, between the index and
// the state file, and during retention's deletions. After each crash the
// newest valid checkpoint must restore (200 once its index is in place,
// else 100, with the values saved), and the next save must succeed and
// clear the debris.
func TestKillDuringSave(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per crash point")
	}
	template := t.TempDir()
	if err := saveStep(template, 100, 1); err != nil {
		t.Fatal(err)
	}
	points := 0
	for n := 1; n < 100; n++ {
		dir := t.TempDir()
		copyDir(t, template, dir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", crashEnv, dir, n))
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			if points == 0 {
				t.Fatalf("the save ran to its end without reaching a crash point:\n%s", out)
			}
			break // n is past the last point: every point was tried
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("crash point %d: the child did not die of SIGKILL: %v\n%s", n, err, out)
		}
		points++
		point := strings.TrimSpace(string(out[strings.Index(string(out), "CRASH AT ")+len("CRASH AT "):]))
		point, _, _ = strings.Cut(point, "\n")
		t.Run(fmt.Sprintf("%02d %s", n, filepath.Base(strings.ReplaceAll(point, dir+"/", ""))), func(t *testing.T) {
			indexIn := n >= indexRenamedAt(t, template)
			prefix, step, err := FindLatest(dir, "", slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("after a crash at %q: FindLatest: %v", point, err)
			}
			wantStep, wantV := int64(100), float32(1)
			if indexIn {
				wantStep, wantV = 200, 2
			}
			if step != wantStep {
				t.Fatalf("after a crash at %q: latest is %s, want step %d", point, prefix, wantStep)
			}
			got, err := Read(dir, prefix)
			if err != nil {
				t.Fatalf("after a crash at %q: Read(%s): %v", point, prefix, err)
			}
			for name, want := range crashVars(wantV) {
				if !tensor.Equal(got[name], want) {
					t.Errorf("after a crash at %q: %s = %v, want %v", point, name, got[name], want)
				}
			}
			// The supervisor restarts the job: the next save cleans up.
			if err := saveStep(dir, 300, 3); err != nil {
				t.Fatalf("the save after a crash at %q: %v", point, err)
			}
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			want := "[checkpoint model.ckpt-300.data-00000-of-00002 model.ckpt-300.data-00001-of-00002 model.ckpt-300.index]"
			if fmt.Sprint(names) != want {
				t.Errorf("after a crash at %q and a new save, files are\n %v\nwant\n %s", point, names, want)
			}
		})
	}
	if points < 15 {
		t.Errorf("only %d crash points were tried; a save has more", points)
	}
}

// indexRenamedAt returns the number of the crash point at which the index
// of step 200 is in place, counting the points of a save without crashing.
func indexRenamedAt(t *testing.T, template string) int {
	t.Helper()
	dir := t.TempDir()
	copyDir(t, template, dir)
	n, at := 0, 0
	crashPoint = func(point string) {
		n++
		if point == "renamed model.ckpt-200.index" {
			at = n
		}
	}
	defer func() { crashPoint = nil }()
	if err := saveStep(dir, 200, 2); err != nil {
		t.Fatal(err)
	}
	if at == 0 {
		t.Fatal("no crash point names the renamed index")
	}
	return at
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
