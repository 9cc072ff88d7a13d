package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// localTask is one process of a --local-cluster run.
type localTask struct {
	job   string
	index int
	cmd   *exec.Cmd
	// result is the last JSON line the task printed (its --json result).
	result []byte
	err    error
	done   chan struct{}
}

func (t *localTask) name() string { return t.job + " " + strconv.Itoa(t.index) }

// parseLocalCluster parses "ps=1,worker=2" (jobs ps, worker, chief); a
// cluster without ps tasks is allowed for all-reduce training.
func parseLocalCluster(s string, allReduce bool) (map[string]int, error) {
	counts := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		job, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, err := strconv.Atoi(strings.TrimSpace(n))
		job = strings.TrimSpace(job)
		if !ok || err != nil || k < 0 || k > 64 {
			return nil, fmt.Errorf("--local-cluster %q: %q is not job=count (e.g. ps=1,worker=2)", s, part)
		}
		if job != "ps" && job != "worker" && job != "chief" {
			return nil, fmt.Errorf("--local-cluster %q: unknown job %q (want ps, worker or chief)", s, job)
		}
		counts[job] += k
	}
	switch {
	case counts["ps"] == 0 && !allReduce:
		return nil, fmt.Errorf("--local-cluster %q: needs at least one ps task (or --allreduce)", s)
	case counts["ps"] > 0 && allReduce:
		return nil, fmt.Errorf("--local-cluster %q: --allreduce trains without ps tasks", s)
	case counts["worker"]+counts["chief"] == 0:
		return nil, fmt.Errorf("--local-cluster %q: needs at least one worker", s)
	case counts["chief"] > 1:
		return nil, fmt.Errorf("--local-cluster %q: at most one chief", s)
	}
	return counts, nil
}

// childArgs are the train flags every task of a local cluster gets.
func (f trainFlags) childArgs() []string {
	a := []string{"train", "--model", f.model, "--batch", strconv.Itoa(f.batch),
		"--lr", strconv.FormatFloat(f.lr, 'g', -1, 64), "--optimizer", f.optimizer,
		"--seed", strconv.Itoa(f.seed), "--log-every", strconv.Itoa(f.logEvery),
		"--ps-strategy", f.psStrategy, "--step-timeout", f.stepTimeout.String(),
		"--wait-timeout", f.waitTimeout.String(), "--json"}
	if f.steps > 0 {
		a = append(a, "--steps", strconv.Itoa(f.steps))
	} else {
		a = append(a, "--epochs", strconv.FormatFloat(f.epochs, 'g', -1, 64))
	}
	if f.dataDir != "" {
		a = append(a, "--data", f.dataDir)
	}
	if f.inGraph {
		a = append(a, "--in-graph")
	}
	if f.logdir != "" {
		a = append(a, "--logdir", f.logdir)
	}
	if f.ckptDir != "" {
		a = append(a, "--checkpoint-dir", f.ckptDir)
	}
	if f.sync {
		a = append(a, "--sync", "--replicas-to-aggregate", strconv.Itoa(f.replicasToAggregate))
	}
	if f.staleness >= 0 {
		a = append(a, "--staleness", strconv.Itoa(f.staleness))
	}
	if f.allReduce {
		a = append(a, "--allreduce", "--average-every", strconv.Itoa(f.averageEvery))
	}
	a = append(a, "--save-checkpoint-steps", strconv.Itoa(f.saveSteps), "--save-checkpoint-secs", strconv.Itoa(f.saveSecs),
		"--keep-checkpoints", strconv.Itoa(f.keepCkpts))
	return a
}

// taskEnv is the environment of a local cluster's tasks: this process's,
// with GOMAXPROCS set, unless it is set already, to the cores this process
// may use shared among the training tasks (as torchrun sets
// OMP_NUM_THREADS=1). Each task's kernels would otherwise split across
// every core, and their pools' idle workers, which poll for the next
// kernel before they sleep, would take turns with the other tasks' work
// on the same cores.
func taskEnv(counts map[string]int, stderr io.Writer) []string {
	env := os.Environ()
	if os.Getenv("GOMAXPROCS") != "" {
		return env
	}
	// GOMAXPROCS(0): the cores this process may use, CPU quotas included.
	cores := runtime.GOMAXPROCS(0)
	procs := max(1, cores/(counts["worker"]+counts["chief"]))
	fmt.Fprintf(stderr, "local cluster: each task uses %d of %d cores (set GOMAXPROCS to choose)\n", procs, cores)
	return append(env, "GOMAXPROCS="+strconv.Itoa(procs))
}

// maxPSRestarts bounds how often a local cluster restarts each ps task.
const maxPSRestarts = 3

// runLocalCluster starts every task of a cluster as a process of this binary
// on free loopback ports, interleaves their logs with a task prefix, and
// reports the chief's result. Listening sockets are created here and passed
// to the tasks, so no port can be taken between choosing and using it. No
// process outlives the run: tasks die with this process (Pdeathsig), are
// stopped on Ctrl-C, and all are stopped when one fails, except that, as a
// supervisor would, it restarts a ps task that dies (on the same socket, a
// few times at most) when the workers can recover from it (see
// recoverable), and an asynchronous run goes on without a non-chief worker.
func runLocalCluster(ctx context.Context, f trainFlags, stdout, stderr io.Writer) error {
	counts, err := parseLocalCluster(f.localCluster, f.allReduce)
	if err != nil {
		return err
	}
	if f.psHosts != "" || f.workerHosts != "" || f.chiefHosts != "" || f.jobName != "" {
		return errors.New("--local-cluster chooses the cluster itself: drop --ps_hosts/--worker_hosts/--chief_hosts/--job_name")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	jobs := []string{"chief", "ps", "worker"}
	hosts := map[string][]string{}
	listeners := map[string][]*os.File{}
	defer func() {
		for _, fs := range listeners {
			for _, lf := range fs {
				lf.Close()
			}
		}
	}()
	for _, job := range jobs {
		for i := 0; i < counts[job]; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return fmt.Errorf("--local-cluster: listening on loopback: %w", err)
			}
			lf, err := l.(*net.TCPListener).File()
			addr := l.Addr().String()
			l.Close() // lf is a duplicate that keeps the socket open
			if err != nil {
				return err
			}
			hosts[job] = append(hosts[job], addr)
			listeners[job] = append(listeners[job], lf)
		}
	}
	clusterArgs := []string{"--ps_hosts", strings.Join(hosts["ps"], ","),
		"--worker_hosts", strings.Join(hosts["worker"], ","), "--chief_hosts", strings.Join(hosts["chief"], ",")}
	fmt.Fprintf(stderr, "local cluster: ps %v, worker %v, chief %v\n", hosts["ps"], hosts["worker"], hosts["chief"])
	env := taskEnv(counts, stderr)

	var out sync.Mutex // serialises the interleaved log lines
	var tasks []*localTask
	for _, job := range []string{"ps", "chief", "worker"} {
		for i := 0; i < counts[job]; i++ {
			t := &localTask{job: job, index: i, done: make(chan struct{})}
			args := append(f.childArgs(), clusterArgs...)
			args = append(args, "--job_name", job, "--task_index", strconv.Itoa(i), "--listen-fd", "3")
			t.cmd = exec.Command(exe, args...)
			t.cmd.Env = env
			t.cmd.ExtraFiles = []*os.File{listeners[job][i]}
			t.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := startTask(t, stderr, &out); err != nil {
				stopTasks(tasks)
				return err
			}
			tasks = append(tasks, t)
		}
	}
	// The children hold the sockets now; the ps tasks' stay open here when
	// a ps that dies is to be restarted on them.
	supervise := recoverable(f)
	for job, fs := range listeners {
		if job == "ps" && supervise {
			continue
		}
		for _, lf := range fs {
			lf.Close()
		}
		delete(listeners, job)
	}

	// Wait for the training tasks; the chief stops the ps tasks at the end.
	var trainers, servers []*localTask
	for _, t := range tasks {
		if t.job == "ps" {
			servers = append(servers, t)
		} else {
			trainers = append(trainers, t)
		}
	}
	failed := make(chan *localTask, len(tasks)+maxPSRestarts*len(servers))
	watch := func(t *localTask) {
		<-t.done
		if t.err != nil {
			failed <- t
		}
	}
	for _, t := range tasks {
		go watch(t)
	}
	allTrained := make(chan struct{})
	go func() {
		for _, t := range trainers {
			<-t.done
		}
		close(allTrained)
	}()
	restarts := map[int]int{} // by ps index
	for trained := false; !trained; {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stderr, "local cluster: interrupted; stopping every task")
			stopTasks(tasks)
			return ctx.Err()
		case t := <-failed:
			switch {
			case t.job == "ps" && supervise && restarts[t.index] < maxPSRestarts:
				restarts[t.index]++
				fmt.Fprintf(stderr, "local cluster: %s died (%v); restarting it on its address (%d of %d)\n",
					t.name(), t.err, restarts[t.index], maxPSRestarts)
				nt := &localTask{job: t.job, index: t.index, done: make(chan struct{})}
				nt.cmd = exec.Command(exe, t.cmd.Args[1:]...)
				nt.cmd.Env = t.cmd.Env
				nt.cmd.ExtraFiles = t.cmd.ExtraFiles
				nt.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := startTask(nt, stderr, &out); err != nil {
					stopTasks(tasks)
					return err
				}
				tasks[slices.Index(tasks, t)], servers[slices.Index(servers, t)] = nt, nt
				go watch(nt)
			case t.job == "worker" && t.index > 0 || t.job == "worker" && counts["chief"] > 0:
				// An asynchronous run survives the loss of a non-chief worker.
				fmt.Fprintf(stderr, "local cluster: %s failed (%v); the others go on\n", t.name(), t.err)
			default:
				stopTasks(tasks)
				return fmt.Errorf("local cluster: %s failed: %v", t.name(), t.err)
			}
		case <-allTrained:
			trained = true
		}
	}
	// The ps tasks exit when the chief tells them; give them a moment.
	deadline := time.After(10 * time.Second)
	for _, t := range servers {
		select {
		case <-t.done:
		case <-deadline:
			fmt.Fprintf(stderr, "local cluster: %s did not exit; stopping it\n", t.name())
			stopTasks(servers)
		}
	}
	chief := trainers[0]
	if chief.err != nil {
		return fmt.Errorf("local cluster: %s failed: %v", chief.name(), chief.err)
	}
	var res result
	if err := json.Unmarshal(chief.result, &res); err != nil {
		return fmt.Errorf("local cluster: no result from %s: %v", chief.name(), err)
	}
	return report(stdout, res, f.jsonOut)
}

// startTask starts t, copying its output lines to w with a task prefix and
// keeping its last JSON line. t.done closes when the process has exited.
func startTask(t *localTask, w io.Writer, mu *sync.Mutex) error {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := t.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := t.cmd.Start(); err != nil {
		return fmt.Errorf("local cluster: starting %s: %w", t.name(), err)
	}
	mu.Lock()
	fmt.Fprintf(w, "local cluster: started %s (pid %d)\n", t.name(), t.cmd.Process.Pid)
	mu.Unlock()
	prefix := fmt.Sprintf("[%s] ", t.name())
	var wg sync.WaitGroup
	copyLines := func(r io.Reader, keepJSON bool) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if keepJSON && len(line) > 0 && line[0] == '{' {
				t.result = append([]byte(nil), line...)
				continue
			}
			mu.Lock()
			fmt.Fprintf(w, "%s%s\n", prefix, line)
			mu.Unlock()
		}
	}
	wg.Add(2)
	go copyLines(stdout, true)
	go copyLines(stderr, false)
	go func() {
		wg.Wait() // read all output before Wait closes the pipes
		t.err = t.cmd.Wait()
		close(t.done)
	}()
	return nil
}

// stopTasks sends SIGTERM to the running tasks, then SIGKILL to those still
// running after a few seconds, and waits for all of them.
func stopTasks(tasks []*localTask) {
	for _, t := range tasks {
		if t.cmd.Process != nil {
			_ = t.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(5 * time.Second)
	for _, t := range tasks {
		select {
		case <-t.done:
		case <-deadline:
			for _, k := range tasks {
				_ = k.cmd.Process.Kill()
			}
			<-t.done
		}
	}
}
