package chaos

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// EnvMarker is the environment variable that marks every process of a run
// (the launcher and, by inheritance, its tasks) with the run's id.
const EnvMarker = "DISTFLOW_CHAOS_RUN"

// proc is one marked process found in /proc.
type proc struct {
	pid   int
	state byte   // R, S, D, T (stopped), Z (zombie), ...
	start uint64 // start time in clock ticks since boot: orders restarts
	task  *Task  // nil for the launcher
	// addrs maps each task of the cluster to its address, from TF_CONFIG.
	addrs map[Task]string
}

// alive reports whether the process still runs (a zombie has exited).
func (p proc) alive() bool { return p.state != 'Z' && p.state != 'X' }

// marked lists the live processes whose environment holds EnvMarker=id.
// Processes that vanish or cannot be read while it looks are skipped.
func marked(id string) ([]proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	want := []byte(EnvMarker + "=" + id)
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		var p proc
		found := false
		for _, kv := range bytes.Split(env, []byte{0}) {
			switch {
			case bytes.Equal(kv, want):
				found = true
			case bytes.HasPrefix(kv, []byte("TF_CONFIG=")):
				p.task, p.addrs = parseTFConfig(kv[len("TF_CONFIG="):])
			}
		}
		if !found {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... field 22 is starttime; comm may hold
		// spaces and parentheses, so split after its last ')'.
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		f := strings.Fields(string(rest))
		if len(f) < 20 {
			continue
		}
		p.pid = pid
		p.state = f[0][0]
		p.start, _ = strconv.ParseUint(f[19], 10, 64)
		if p.alive() {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseTFConfig returns the task and the cluster's addresses of a TF_CONFIG.
func parseTFConfig(b []byte) (*Task, map[Task]string) {
	var c struct {
		Cluster map[string][]string `json:"cluster"`
		Task    struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
		} `json:"task"`
	}
	if json.Unmarshal(b, &c) != nil || c.Task.Type == "" {
		return nil, nil
	}
	addrs := map[Task]string{}
	for job, hosts := range c.Cluster {
		for i, h := range hosts {
			addrs[Task{Job: job, Index: i}] = h
		}
	}
	return &Task{Job: c.Task.Type, Index: c.Task.Index}, addrs
}

// signal sends sig to pid; a process already gone is not an error.
func signal(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}

func supported() error { return nil }

// The stop and resume signals of a FaultStop.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// launcherAttr makes the launcher die with the harness (its tasks die with
// it) and lead a process group of its own, which killGroup kills.
func launcherAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// stillRuns reports whether p's process is still the one found, and not a
// zombie or stopped.
func stillRuns(p proc) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 20 {
		return false
	}
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return start == p.start && f[0][0] != 'Z' && f[0][0] != 'X' && f[0][0] != 'T'
}
