package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startStreaming starts cmd, killed at the end of the test, and returns its
// standard error line by line; the channel closes when cmd closes it. Lines
// that find the channel's buffer (10,000) full are dropped rather than
// blocking cmd.
func startStreaming(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 10000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	return lines
}

// startLauncher starts `distflow train --local-cluster ...` and returns it
// with the ps address it printed (which every task has on its command line).
func startLauncher(t *testing.T, args ...string) (*exec.Cmd, string, <-chan string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	lines := startStreaming(t, cmd)
	re := regexp.MustCompile(`local cluster: ps \[([^\]\s]+)`)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the launcher exited before printing the cluster")
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return cmd, m[1], lines
			}
		case <-deadline:
			t.Fatal("the launcher did not print the cluster")
		}
	}
}

// waitFor reads lines until one contains s, and returns it.
func waitFor(t *testing.T, lines <-chan string, s string) string {
	t.Helper()
	return waitForEach(t, lines, "", s)
}

// waitForEach reads lines until each of want has been seen, in any order,
// failing on a line that holds bad first (bad "": none does); it returns
// the line that held the last of want.
func waitForEach(t *testing.T, lines <-chan string, bad string, want ...string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	left := slices.Clone(want)
	// The last lines read, for the failure's message: what the run did
	// instead.
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before %q; its last lines:\n%s", left, strings.Join(seen, "\n"))
			}
			if bad != "" && strings.Contains(l, bad) {
				t.Fatalf("%q before %q: %s; the lines before it:\n%s", bad, left, l, strings.Join(seen, "\n"))
			}
			if left = slices.DeleteFunc(left, func(w string) bool { return strings.Contains(l, w) }); len(left) == 0 {
				return l
			}
			if seen = append(seen, l); len(seen) > 40 {
				seen = seen[1:]
			}
		case <-deadline:
			t.Fatalf("no %q within a minute; the last lines:\n%s", left, strings.Join(seen, "\n"))
		}
	}
}

// tasksOf lists the running processes whose command line names psAddr.
func tasksOf(psAddr string) []string {
	var found []string
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		// A task has the cluster in its TF_CONFIG (a hand-started one, on
		// its command line).
		b, err := os.ReadFile(p)
		env, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		task := strings.Contains(string(b), psAddr) && strings.Contains(string(b), "--job_name") ||
			strings.Contains(string(env), "TF_CONFIG=") && strings.Contains(string(env), psAddr)
		if err == nil && task {
			stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
			if !strings.Contains(string(stat), ") Z ") { // zombies are already dead
				found = append(found, filepath.Base(filepath.Dir(p)))
			}
		}
	}
	return found
}

// noTasksLeft waits until no task of the cluster runs (the kernel takes a
// moment to deliver Pdeathsig and reap), failing after a deadline.
func noTasksLeft(t *testing.T, psAddr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := tasksOf(psAddr)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks still running after the launcher ended: pids %v", left)
		}
		time.Sleep(50 * time.Millisecond) // polling the process table, not synchronising
	}
}

func TestLocalClusterCtrlCLeavesNoProcess(t *testing.T) {
	cmd, ps, lines := startLauncher(t, "train", "--model", "linreg", "--steps", "100000000", "--local-cluster", "ps=1,worker=2")
	waitFor(t, lines, "local_step")
	if len(tasksOf(ps)) != 3 {
		t.Fatalf("want 3 tasks running, found %v", tasksOf(ps))
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd); err == nil {
		t.Error("an interrupted run exited 0")
	}
	noTasksLeft(t, ps)
}

func TestLocalClusterCrashedChiefStopsEverything(t *testing.T) {
	cmd, ps, lines := startLauncher(t, "train", "--model", "linreg", "--steps", "100000000", "--local-cluster", "ps=1,worker=2")
	waitFor(t, lines, "local_step")
	// Kill the chief (worker 0): the launcher must stop the rest and fail.
	killed := false
	for _, pid := range tasksOf(ps) {
		env, _ := os.ReadFile("/proc/" + pid + "/environ")
		if strings.Contains(string(env), `"task":{"type":"worker","index":0}`) {
			p, _ := os.FindProcess(atoi(pid))
			killed = p.Kill() == nil
		}
	}
	if !killed {
		t.Fatalf("found no chief among the tasks %v", tasksOf(ps))
	}
	if err := waitExit(t, cmd); err == nil {
		t.Error("the launcher exited 0 after its chief crashed")
	}
	noTasksLeft(t, ps)
}

// waitExit waits for the launcher to exit, at most 30 seconds.
func waitExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the launcher did not exit within 30 s")
		return nil
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
