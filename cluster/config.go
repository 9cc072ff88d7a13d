package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// EnvVar is the environment variable FromEnv reads.
const EnvVar = "TF_CONFIG"

// flagJobs maps the job-list flags to their jobs, in the order messages list them.
var flagJobs = []struct{ job, flag string }{
	{"ps", "--ps_hosts"}, {"worker", "--worker_hosts"}, {"chief", "--chief_hosts"},
}

// FromFlags builds the cluster from comma-separated host:port lists, the
// values of --ps_hosts, --worker_hosts and --chief_hosts (whitespace around
// entries is ignored; an empty list leaves its job out), and returns the task
// this process runs: jobName/taskIndex (--job_name, --task_index), which may
// be EvaluatorJob, a task outside the cluster. Errors name the flag and
// entry at fault.
func FromFlags(ps, worker, chief string, jobName string, taskIndex int) (*Spec, TaskID, error) {
	values := []string{ps, worker, chief}
	jobs := map[string][]string{}
	flagOf := map[string]string{}
	for i, fj := range flagJobs {
		flagOf[fj.job] = fj.flag
		if strings.TrimSpace(values[i]) == "" {
			continue
		}
		entries := strings.Split(values[i], ",")
		for k, e := range entries {
			e = strings.TrimSpace(e)
			if e == "" {
				return nil, TaskID{}, fmt.Errorf("cluster: %s entry %d: %w: the entry is empty (stray comma?)", fj.flag, k+1, ErrBadAddress)
			}
			if strings.ContainsAny(e, " \t\r\n") {
				return nil, TaskID{}, fmt.Errorf("cluster: %s entry %d: %w %q: the entry contains whitespace (separate entries with commas)", fj.flag, k+1, ErrBadAddress, e)
			}
			entries[k] = e
		}
		jobs[fj.job] = entries
	}
	self := TaskID{Job: jobName, Index: taskIndex}
	if len(jobs) == 0 {
		return nil, TaskID{}, fmt.Errorf("cluster: %w: no cluster: --ps_hosts, --worker_hosts and --chief_hosts are all empty", ErrBadConfig)
	}
	switch flag, known := flagOf[jobName]; {
	case jobName == "":
		return nil, TaskID{}, fmt.Errorf("cluster: %w: --job_name is required (one of ps, worker, chief)", ErrBadConfig)
	case jobName == EvaluatorJob && taskIndex < 0:
		return nil, TaskID{}, fmt.Errorf("cluster: --task_index %d: %w: an evaluator's index is 0 or more", taskIndex, ErrIndexOutOfRange)
	case jobName == EvaluatorJob: // outside the cluster: no address of its own
	case !known:
		return nil, TaskID{}, fmt.Errorf("cluster: --job_name: %w %q: the flags describe jobs ps, worker, chief%s", ErrUnknownJob, jobName, didYouMean(jobName, []string{"ps", "worker", "chief"}))
	case len(jobs[jobName]) == 0:
		return nil, TaskID{}, fmt.Errorf("cluster: task %s: %w: %s is empty", self, ErrNoAddress, flag)
	case taskIndex < 0 || taskIndex >= len(jobs[jobName]):
		n := len(jobs[jobName])
		return nil, TaskID{}, fmt.Errorf("cluster: --task_index %d: %w: %s lists %d task(s) (indices 0-%d)", taskIndex, ErrIndexOutOfRange, flag, n, n-1)
	}
	spec, err := newSpec(jobs,
		func(t TaskID) string { return fmt.Sprintf("%s (%s entry %d)", t, flagOf[t.Job], t.Index+1) },
		func(job string) string { return flagOf[job] })
	if err != nil {
		return nil, TaskID{}, err
	}
	return spec, self, nil
}

// tfConfig is the part of TF_CONFIG distflow reads; TFConfigWarnings
// reports the other keys.
type tfConfig struct {
	Cluster map[string][]string `json:"cluster"`
	Task    *struct {
		Type  string `json:"type"`
		Index *int   `json:"index"`
	} `json:"task"`
}

// FromTFConfig builds the cluster and this process's task from a TF_CONFIG
// JSON document:
//
//	{"cluster": {"ps": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]},
//	 "task": {"type": "worker", "index": 0}}
//
// A missing task index means 0. The task may be an "evaluator"
// (EvaluatorJob), which is not a member of the returned Spec: a job
// "evaluator" in "cluster" is left out, for every task. Errors give the
// byte offset, line and column of a JSON error, or the job, task and
// address at fault. It never panics.
func FromTFConfig(js string) (*Spec, TaskID, error) {
	if strings.TrimSpace(js) == "" {
		return nil, TaskID{}, fmt.Errorf("cluster: TF_CONFIG: %w: the document is empty", ErrBadConfig)
	}
	var cfg tfConfig
	dec := json.NewDecoder(strings.NewReader(js))
	if err := dec.Decode(&cfg); err != nil {
		return nil, TaskID{}, jsonError(js, err)
	}
	if off := dec.InputOffset(); strings.TrimSpace(js[off:]) != "" {
		rest := int64(len(js[off:]) - len(strings.TrimLeft(js[off:], " \t\r\n")))
		o, line, col := position(js, off+rest)
		return nil, TaskID{}, fmt.Errorf("cluster: TF_CONFIG: %w: invalid JSON at offset %d (line %d, column %d): extra data after the object", ErrBadConfig, o, line, col)
	}
	if cfg.Cluster == nil {
		return nil, TaskID{}, fmt.Errorf(`cluster: TF_CONFIG: %w: no "cluster" object %s`, ErrBadConfig,
			misspelling(js, "", "cluster", `(want {"cluster": {"worker": ["host:port", ...]}, "task": {...}})`))
	}
	if len(cfg.Cluster) == 0 {
		return nil, TaskID{}, fmt.Errorf(`cluster: TF_CONFIG: %w: "cluster" has no jobs`, ErrBadConfig)
	}
	if cfg.Task == nil {
		return nil, TaskID{}, fmt.Errorf(`cluster: TF_CONFIG: %w: no "task" object %s`, ErrBadConfig,
			misspelling(js, "", "task", `(want "task": {"type": "worker", "index": 0})`))
	}
	if cfg.Task.Type == "" {
		return nil, TaskID{}, fmt.Errorf(`cluster: TF_CONFIG: %w: "task" has no "type" %s`, ErrBadConfig,
			misspelling(js, "task", "type", `(want "task": {"type": "worker", "index": 0})`))
	}
	self := TaskID{Job: cfg.Task.Type}
	if cfg.Task.Index != nil {
		self.Index = *cfg.Task.Index
	}
	// The evaluator is not a member of the training cluster: TensorFlow
	// leaves it out of the cluster spec, and an operator that lists it
	// (older TFJob controllers do) must not make the trainers wait for it.
	delete(cfg.Cluster, EvaluatorJob)
	if len(cfg.Cluster) == 0 {
		return nil, TaskID{}, fmt.Errorf(`cluster: TF_CONFIG: %w: "cluster" has no jobs but %q`, ErrBadConfig, EvaluatorJob)
	}
	addrs, known := cfg.Cluster[self.Job]
	switch {
	case self.Job == EvaluatorJob && self.Index < 0:
		return nil, TaskID{}, fmt.Errorf("cluster: TF_CONFIG task index %d: %w: an evaluator's index is 0 or more", self.Index, ErrIndexOutOfRange)
	case self.Job == EvaluatorJob:
	case !known:
		jobs := sortedKeys(cfg.Cluster)
		return nil, TaskID{}, fmt.Errorf("cluster: TF_CONFIG task: %w %q: the cluster has jobs %s%s", ErrUnknownJob, self.Job, strings.Join(jobs, ", "), didYouMean(self.Job, jobs))
	case len(addrs) == 0:
		return nil, TaskID{}, fmt.Errorf("cluster: TF_CONFIG task %s: %w: cluster.%s is empty", self, ErrNoAddress, self.Job)
	case self.Index < 0 || self.Index >= len(addrs):
		return nil, TaskID{}, fmt.Errorf("cluster: TF_CONFIG task index %d: %w: job %q has %d task(s) (indices 0-%d)", self.Index, ErrIndexOutOfRange, self.Job, len(addrs), len(addrs)-1)
	}
	spec, err := newSpec(cfg.Cluster,
		func(t TaskID) string { return fmt.Sprintf("%s (TF_CONFIG cluster.%s[%d])", t, t.Job, t.Index) },
		func(job string) string { return fmt.Sprintf("TF_CONFIG cluster.%s", job) })
	if err != nil {
		return nil, TaskID{}, err
	}
	return spec, self, nil
}

// FromEnv reads the cluster from the TF_CONFIG environment variable. ok is
// false (and the error nil) when the variable is unset or blank.
func FromEnv() (spec *Spec, self TaskID, ok bool, err error) {
	js, set := os.LookupEnv(EnvVar)
	if !set || strings.TrimSpace(js) == "" {
		return nil, TaskID{}, false, nil
	}
	spec, self, err = FromTFConfig(js)
	return spec, self, true, err
}

// FromEnvWarn is FromEnv that also returns TFConfigWarnings of the
// variable, for the caller to print: they come with an error too, which they
// may explain (a misspelt "task" is both a warning and a missing task).
func FromEnvWarn() (spec *Spec, self TaskID, ok bool, warnings []string, err error) {
	js, set := os.LookupEnv(EnvVar)
	if !set || strings.TrimSpace(js) == "" {
		return nil, TaskID{}, false, nil, nil
	}
	spec, self, err = FromTFConfig(js)
	return spec, self, true, TFConfigWarnings(js), err
}

// jsonError turns a decoding error into one that says where in the
// document it happened.
func jsonError(js string, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off, line, col := position(js, syn.Offset-1)
		return fmt.Errorf("cluster: TF_CONFIG: %w: invalid JSON at offset %d (line %d, column %d): %v", ErrBadConfig, off, line, col, syn)
	case errors.As(err, &typ):
		off, line, col := position(js, typ.Offset-1)
		field := typ.Field
		switch field {
		case "":
			field = "the document"
		case "cluster":
			field += jobOfTypeError(js)
		}
		return fmt.Errorf("cluster: TF_CONFIG: %w: at offset %d (line %d, column %d): %s: got a JSON %s, want %s", ErrBadConfig, off, line, col, field, typ.Value, jsonKind(typ.Type))
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("cluster: TF_CONFIG: %w: invalid JSON: unexpected end of the document", ErrBadConfig)
	}
	return fmt.Errorf("cluster: TF_CONFIG: %w: invalid JSON: %v", ErrBadConfig, err)
}

// jobOfTypeError returns ".job" for the first job of the "cluster" object
// of js whose value is not a list of strings (encoding/json names the map,
// not its key), or "".
func jobOfTypeError(js string) string {
	top, _ := objectFields([]byte(js))
	cl, ok := lastField(top, "cluster")
	if !ok {
		return ""
	}
	jobs, _ := objectFields(cl)
	for _, j := range jobs {
		var addrs []string
		if json.Unmarshal(j.value, &addrs) != nil {
			return "." + j.name
		}
	}
	return ""
}

// jsonKind names a Go target type the way a TF_CONFIG author thinks of it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	case reflect.Slice:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Int:
		return "an integer"
	}
	return t.String()
}

// position clamps a 0-based byte offset into s and converts it into a
// 1-based line and column.
func position(s string, off int64) (clamped int64, line, col int) {
	off = max(0, min(off, int64(len(s))))
	prefix := s[:off]
	line = 1 + strings.Count(prefix, "\n")
	col = int(off) - (strings.LastIndexByte(prefix, '\n') + 1) + 1
	return off, line, col
}

func sortedKeys(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Flags holds the cluster flags of TensorFlow 1.x programs. Register adds
// them to a flag set under both spellings (--ps_hosts and --ps-hosts).
type Flags struct {
	PSHosts, WorkerHosts, ChiefHosts string
	JobName                          string
	TaskIndex                        int
}

// Register adds --ps_hosts, --worker_hosts, --chief_hosts, --job_name and
// --task_index to fs, with hidden dashed aliases (--ps-hosts, ...) bound to
// the same fields.
func (f *Flags) Register(fs *pflag.FlagSet) {
	str := func(p *string, name, usage string) {
		fs.StringVar(p, name, *p, usage)
		alias := strings.ReplaceAll(name, "_", "-")
		fs.StringVar(p, alias, *p, usage)
		_ = fs.MarkHidden(alias)
	}
	str(&f.PSHosts, "ps_hosts", "comma-separated host:port list of the ps job")
	str(&f.WorkerHosts, "worker_hosts", "comma-separated host:port list of the worker job")
	str(&f.ChiefHosts, "chief_hosts", "comma-separated host:port list of the chief job (at most one)")
	str(&f.JobName, "job_name", "this task's job: ps, worker or chief")
	fs.IntVar(&f.TaskIndex, "task_index", f.TaskIndex, "this task's index within its job")
	fs.IntVar(&f.TaskIndex, "task-index", f.TaskIndex, "this task's index within its job")
	_ = fs.MarkHidden("task-index")
}

// Set reports whether any host list was given.
func (f *Flags) Set() bool {
	return strings.TrimSpace(f.PSHosts+f.WorkerHosts+f.ChiefHosts) != ""
}

// Spec is FromFlags on the flag values.
func (f *Flags) Spec() (*Spec, TaskID, error) {
	return FromFlags(f.PSHosts, f.WorkerHosts, f.ChiefHosts, f.JobName, f.TaskIndex)
}

// String returns the flags as a command line fragment, for logs and for
// starting child processes.
func (f *Flags) String() string {
	var b bytes.Buffer
	for _, kv := range [][2]string{{"ps_hosts", f.PSHosts}, {"worker_hosts", f.WorkerHosts}, {"chief_hosts", f.ChiefHosts}, {"job_name", f.JobName}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "--%s=%s ", kv[0], kv[1])
		}
	}
	b.WriteString("--task_index=" + strconv.Itoa(f.TaskIndex))
	return b.String()
}
