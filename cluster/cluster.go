package cluster

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Sentinel errors. Every validation error wraps exactly one of them, so
// callers can test the kind with errors.Is while users read a message that
// names the job, task, address or offset involved.
var (
	// ErrBadConfig: the description as a whole is malformed (invalid JSON,
	// a missing "cluster" or "task", no jobs, no --job_name).
	ErrBadConfig = errors.New("bad cluster description")
	// ErrUnknownJob: a task's job is not in the cluster.
	ErrUnknownJob = errors.New("unknown job")
	// ErrIndexOutOfRange: a task index is negative or not below its job's size.
	ErrIndexOutOfRange = errors.New("task index out of range")
	// ErrDuplicateAddress: two tasks share one address.
	ErrDuplicateAddress = errors.New("duplicate address")
	// ErrBadAddress: an address is not host:port (empty, no port, port out
	// of range, empty host, a scheme, whitespace).
	ErrBadAddress = errors.New("bad address")
	// ErrBadJobName: a job name is not an identifier.
	ErrBadJobName = errors.New("bad job name")
	// ErrEmptyJob: a job lists no tasks, or the chief job lists more than one.
	ErrEmptyJob = errors.New("bad job size")
	// ErrNoAddress: the task this process is to run has no address.
	ErrNoAddress = errors.New("task has no address")
)

// EvaluatorJob is the job of TensorFlow's evaluator task, which follows
// training from the outside: it reads the chief's checkpoints as they
// appear and evaluates them. It is never a member of a Spec; FromTFConfig
// and FromFlags return it as the task of a process that is one.
const EvaluatorJob = "evaluator"

// TaskID names one task of a cluster: a job and an index within it.
type TaskID struct {
	Job   string
	Index int
}

// String returns the task's canonical name, "/job:worker/task:1".
func (t TaskID) String() string { return "/job:" + t.Job + "/task:" + strconv.Itoa(t.Index) }

// ParseTaskID parses a task name "/job:<job>/task:<index>".
func ParseTaskID(s string) (TaskID, error) {
	d, err := ParseDevice(s)
	if err != nil || d.Job == "" || d.Task < 0 || d.Type != "" || d.Index >= 0 || d.TaskName() != s {
		return TaskID{}, fmt.Errorf("cluster: bad task name %q: want /job:<job>/task:<index>", s)
	}
	if err := checkJobName(d.Job); err != nil {
		return TaskID{}, fmt.Errorf("cluster: bad task name %q: %w", s, err)
	}
	return TaskID{Job: d.Job, Index: d.Task}, nil
}

// Spec is a validated cluster description: job name -> ordered task
// addresses. It is immutable and safe for concurrent use; accessors return
// copies the caller owns.
type Spec struct {
	jobs  map[string][]string
	names []string // sorted job names
}

// NewSpec validates jobs and returns the cluster they describe. Job names
// must be identifiers; every job needs at least one task (the chief job at
// most one); every address must pass CheckAddress; no two tasks may share an
// address, however written: host names compare without case, ports by
// value, IP addresses in canonical form, and localhost:P is the same as
// 127.0.0.1:P and [::1]:P (no other name is resolved). jobs is copied.
func NewSpec(jobs map[string][]string) (*Spec, error) {
	return newSpec(jobs, func(t TaskID) string { return t.String() }, func(job string) string { return fmt.Sprintf("job %q", job) })
}

// newSpec is NewSpec with callbacks that say where a task or job came from
// ("/job:ps/task:0 (--ps_hosts entry 1)"), so errors point at the user's input.
func newSpec(jobs map[string][]string, where func(TaskID) string, jobWhere func(string) string) (*Spec, error) {
	if len(jobs) == 0 {
		return nil, fmt.Errorf("cluster: %w: no jobs", ErrBadConfig)
	}
	s := &Spec{jobs: make(map[string][]string, len(jobs))}
	for job := range jobs {
		s.names = append(s.names, job)
	}
	sort.Strings(s.names)
	type use struct {
		t    TaskID
		addr string
	}
	owner := map[string]use{} // endpoint (see endpoints) -> first task using it
	for _, job := range s.names {
		addrs := jobs[job]
		if err := checkJobName(job); err != nil {
			return nil, fmt.Errorf("cluster: %s: %w %q: %v", jobWhere(job), ErrBadJobName, job, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("cluster: %s: %w: the job lists no tasks", jobWhere(job), ErrEmptyJob)
		}
		if job == "chief" && len(addrs) > 1 {
			return nil, fmt.Errorf("cluster: %s: %w: the chief job has %d tasks, at most one is allowed", jobWhere(job), ErrEmptyJob, len(addrs))
		}
		for i, a := range addrs {
			t := TaskID{job, i}
			eps, err := endpoints(a)
			if err != nil {
				return nil, fmt.Errorf("cluster: %s: %w %q: %v", where(t), ErrBadAddress, a, err)
			}
			for _, ep := range eps {
				if prev, dup := owner[ep]; dup {
					return nil, fmt.Errorf("cluster: %w: %s and %s have the same address %s", ErrDuplicateAddress, where(prev.t), where(t), sameAddress(prev.addr, a, ep))
				}
			}
			for _, ep := range eps {
				owner[ep] = use{t, a}
			}
		}
		s.jobs[job] = append([]string(nil), addrs...)
	}
	return s, nil
}

// checkJobName accepts identifiers: a letter or underscore, then letters,
// digits or underscores.
func checkJobName(name string) error {
	if name == "" {
		return errors.New("the name is empty")
	}
	for i, r := range name {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return fmt.Errorf("character %q at %d: job names are identifiers (a letter or underscore, then letters, digits or underscores)", r, i)
		}
	}
	return nil
}

// Jobs returns the job names, sorted.
func (s *Spec) Jobs() []string { return append([]string(nil), s.names...) }

// HasJob reports whether the cluster has the job.
func (s *Spec) HasJob(job string) bool { _, ok := s.jobs[job]; return ok }

// Addresses returns the job's task addresses in task order (nil for an
// unknown job).
func (s *Spec) Addresses(job string) []string { return append([]string(nil), s.jobs[job]...) }

// NumTasks returns the number of tasks of job (0 for an unknown job).
func (s *Spec) NumTasks(job string) int { return len(s.jobs[job]) }

// Address returns the address of task t. The error wraps ErrUnknownJob or
// ErrIndexOutOfRange.
func (s *Spec) Address(t TaskID) (string, error) {
	if err := s.check(t); err != nil {
		return "", err
	}
	return s.jobs[t.Job][t.Index], nil
}

// check reports whether t is a task of the cluster.
func (s *Spec) check(t TaskID) error {
	addrs, ok := s.jobs[t.Job]
	if !ok {
		return fmt.Errorf("cluster: task %s: %w %q: the cluster has jobs %s", t, ErrUnknownJob, t.Job, strings.Join(s.names, ", "))
	}
	if t.Index < 0 || t.Index >= len(addrs) {
		return fmt.Errorf("cluster: task %s: %w: job %q has %d task(s) (indices 0-%d)", t, ErrIndexOutOfRange, t.Job, len(addrs), len(addrs)-1)
	}
	return nil
}

// Contains reports whether t is a task of the cluster.
func (s *Spec) Contains(t TaskID) bool { return s.check(t) == nil }

// Tasks returns every task, sorted by job name, then index.
func (s *Spec) Tasks() []TaskID {
	var ts []TaskID
	for _, job := range s.names {
		for i := range s.jobs[job] {
			ts = append(ts, TaskID{job, i})
		}
	}
	return ts
}

// TaskNames returns the names of Tasks ("/job:ps/task:0", ...), in the same
// order.
func (s *Spec) TaskNames() []string {
	ts := s.Tasks()
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return names
}

// JSON returns a copy of the job -> addresses map, the "cluster" object of
// TF_CONFIG.
func (s *Spec) JSON() map[string][]string {
	m := make(map[string][]string, len(s.jobs))
	for job, addrs := range s.jobs {
		m[job] = append([]string(nil), addrs...)
	}
	return m
}

// String returns the cluster in a compact, sorted form:
// "ps=[h0:2222] worker=[h1:2222 h2:2222]".
func (s *Spec) String() string {
	parts := make([]string, len(s.names))
	for i, job := range s.names {
		parts[i] = job + "=[" + strings.Join(s.jobs[job], " ") + "]"
	}
	return strings.Join(parts, " ")
}
