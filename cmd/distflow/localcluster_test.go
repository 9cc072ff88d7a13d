package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
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

// waitFor reads lines until one contains s.
func waitFor(t *testing.T, lines <-chan string, s string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before %q", s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q within a minute", s)
		}
	}
}

// tasksOf lists the running processes whose command line names psAddr.
func tasksOf(psAddr string) []string {
	var found []string
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), psAddr) && strings.Contains(string(b), "--job_name") {
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
		b, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a == "--job_name" && args[i+1] == "worker" && args[i+3] == "0" {
				p, _ := os.FindProcess(atoi(pid))
				killed = p.Kill() == nil
			}
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

// TestTaskEnvSharesTheCores checks that a local cluster's tasks get the
// machine's cores shared among the training tasks, and that a GOMAXPROCS
// the user set is passed on untouched.
func TestTaskEnvSharesTheCores(t *testing.T) {
	gomaxprocs := func(env []string) []string {
		var vals []string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "GOMAXPROCS="); ok {
				vals = append(vals, v)
			}
		}
		return vals
	}
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	var log strings.Builder
	for _, tc := range []struct {
		counts map[string]int
		want   int
	}{
		{map[string]int{"ps": 1, "worker": 2}, max(1, runtime.GOMAXPROCS(0)/2)},
		{map[string]int{"worker": 1}, runtime.GOMAXPROCS(0)},
		{map[string]int{"ps": 2, "chief": 1, "worker": 2 * runtime.GOMAXPROCS(0)}, 1},
	} {
		got := gomaxprocs(taskEnv(tc.counts, &log))
		if want := []string{strconv.Itoa(tc.want)}; !slices.Equal(got, want) {
			t.Errorf("%v: GOMAXPROCS %v, want %v", tc.counts, got, want)
		}
	}
	if !strings.Contains(log.String(), "set GOMAXPROCS to choose") {
		t.Errorf("the share is not logged: %q", log.String())
	}
	t.Setenv("GOMAXPROCS", "7")
	if got := gomaxprocs(taskEnv(map[string]int{"ps": 1, "worker": 2}, &log)); !slices.Equal(got, []string{"7"}) {
		t.Errorf("with GOMAXPROCS=7 set: %v, want [7]", got)
	}
}

// TestInheritedListenerDropsPendingConnections: a task taking over a
// listening socket closes the connections queued on it before it started
// (a restarted ps would otherwise serve its predecessor's requests), and
// then serves new ones.
func TestInheritedListenerDropsPendingConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.(*net.TCPListener).File()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	var stale []net.Conn
	for range 3 { // queued by the kernel: nothing accepts yet
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("a request of the task that died")); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, c)
	}
	taken, err := inheritedListenerFromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for i, c := range stale {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("queued connection %d: read %d bytes, %v; want it closed", i, n, err)
		}
	}
	fresh, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	served, err := taken.Accept()
	if err != nil {
		t.Fatalf("a connection made after the takeover: %v", err)
	}
	served.Close()
}
