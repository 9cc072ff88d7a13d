package cluster_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
)

func TestFromFlags(t *testing.T) {
	spec, self, err := cluster.FromFlags(" ps0:2222 ", "w0:2222,  w1:2223", "", "worker", 1)
	if err != nil {
		t.Fatal(err)
	}
	if self != (cluster.TaskID{Job: "worker", Index: 1}) || self.String() != "/job:worker/task:1" {
		t.Errorf("self = %v", self)
	}
	if got, want := spec.TaskNames(), []string{"/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("TaskNames = %v, want %v", got, want)
	}
	if got := spec.Jobs(); !reflect.DeepEqual(got, []string{"ps", "worker"}) {
		t.Errorf("Jobs = %v", got)
	}
	if a, err := spec.Address(self); err != nil || a != "w1:2223" {
		t.Errorf("Address(self) = %q, %v", a, err)
	}
	if spec.NumTasks("worker") != 2 || spec.NumTasks("chief") != 0 || spec.HasJob("chief") {
		t.Errorf("NumTasks/HasJob wrong: %v", spec)
	}
	if _, err := spec.Address(cluster.TaskID{Job: "ps", Index: 1}); !errors.Is(err, cluster.ErrIndexOutOfRange) {
		t.Errorf("Address(ps 1) error = %v", err)
	}
	if _, err := spec.Address(cluster.TaskID{Job: "chief"}); !errors.Is(err, cluster.ErrUnknownJob) || !strings.Contains(err.Error(), "ps, worker") {
		t.Errorf("Address(chief) error = %v", err)
	}
	// Accessors return copies.
	spec.Addresses("worker")[0] = "x:1"
	spec.JSON()["worker"][0] = "x:1"
	if spec.Addresses("worker")[0] != "w0:2222" {
		t.Error("Addresses leaked the spec's slice")
	}
	if spec.String() != "ps=[ps0:2222] worker=[w0:2222 w1:2223]" {
		t.Errorf("String = %q", spec.String())
	}
}

func TestFromTFConfig(t *testing.T) {
	spec, self, err := cluster.FromTFConfig(`{"cluster": {"chief": ["c:1"], "ps": ["p0:1", "p1:1"], "worker": ["w:1"], "evaluator": ["e:1"]},
		"task": {"type": "ps", "index": 1}, "environment": "cloud"}`)
	if err != nil {
		t.Fatal(err)
	}
	if self.String() != "/job:ps/task:1" {
		t.Errorf("self = %v", self)
	}
	want := []cluster.TaskID{{"chief", 0}, {"evaluator", 0}, {"ps", 0}, {"ps", 1}, {"worker", 0}}
	if got := spec.Tasks(); !reflect.DeepEqual(got, want) {
		t.Errorf("Tasks = %v, want %v", got, want)
	}
	// A missing index means 0.
	if _, self, err := cluster.FromTFConfig(`{"cluster": {"worker": ["w:1"]}, "task": {"type": "worker"}}`); err != nil || self.Index != 0 {
		t.Errorf("no index: %v %v", self, err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(cluster.EnvVar, "")
	if _, _, ok, err := cluster.FromEnv(); ok || err != nil {
		t.Errorf("blank TF_CONFIG: ok=%v err=%v", ok, err)
	}
	t.Setenv(cluster.EnvVar, `{"cluster": {"worker": ["[::1]:5000"]}, "task": {"type": "worker", "index": 0}}`)
	spec, self, ok, err := cluster.FromEnv()
	if !ok || err != nil || self.String() != "/job:worker/task:0" || spec.Addresses("worker")[0] != "[::1]:5000" {
		t.Errorf("FromEnv = %v %v %v %v", spec, self, ok, err)
	}
	t.Setenv(cluster.EnvVar, `{"cluster": `)
	if _, _, ok, err := cluster.FromEnv(); !ok || !errors.Is(err, cluster.ErrBadConfig) {
		t.Errorf("bad TF_CONFIG: ok=%v err=%v", ok, err)
	}
}

// TestFlagErrors checks every rejection of FromFlags: its sentinel and the
// parts of the message that say what and where.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name              string
		ps, worker, chief string
		job               string
		index             int
		want              error
		wantMsg           []string
	}{
		{"no cluster", "", " ", "", "worker", 0, cluster.ErrBadConfig, []string{"all empty"}},
		{"no job name", "p:1", "w:1", "", "", 0, cluster.ErrBadConfig, []string{"--job_name is required"}},
		{"unknown job", "p:1", "w:1", "", "evaluator", 0, cluster.ErrUnknownJob, []string{`"evaluator"`, "ps, worker, chief"}},
		{"own job empty", "p:1", "", "", "worker", 0, cluster.ErrNoAddress, []string{"/job:worker/task:0", "--worker_hosts is empty"}},
		{"index too big", "p:1", "w:1,w:2", "", "worker", 2, cluster.ErrIndexOutOfRange, []string{"--task_index 2", "--worker_hosts lists 2 task(s)"}},
		{"negative index", "p:1", "w:1", "", "ps", -1, cluster.ErrIndexOutOfRange, []string{"--task_index -1", "--ps_hosts lists 1"}},
		{"stray comma", "p:1,", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"--ps_hosts entry 2", "empty"}},
		{"missing port", "p:1", "w:1, w2", "", "worker", 0, cluster.ErrBadAddress, []string{"/job:worker/task:1", "--worker_hosts entry 2", `"w2"`, "missing port"}},
		{"port range", "p:70000", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"--ps_hosts entry 1", "out of range 1-65535"}},
		{"port zero", "p:0", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"port 0"}},
		{"port not a number", "p:http", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{`port "http" is not a number`}},
		{"empty host", ":2222", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"empty host"}},
		{"scheme", "grpc://p:1", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"without a scheme"}},
		{"too many colons", "a:b:1", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"too many colons"}},
		{"bad host", "p@x:1", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"character '@'"}},
		{"duplicate", "h:1", "w:1, H:1", "", "worker", 0, cluster.ErrDuplicateAddress, []string{`"H:1"`, "/job:ps/task:0 (--ps_hosts entry 1)", "/job:worker/task:1 (--worker_hosts entry 2)"}},
		{"two chiefs", "p:1", "w:1", "c:1,c:2", "worker", 0, cluster.ErrEmptyJob, []string{"--chief_hosts", "at most one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := cluster.FromFlags(tc.ps, tc.worker, tc.chief, tc.job, tc.index)
			checkErr(t, err, tc.want, tc.wantMsg)
		})
	}
}

// TestTFConfigErrors checks every rejection of FromTFConfig.
func TestTFConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		js      string
		want    error
		wantMsg []string
	}{
		{"empty", "  ", cluster.ErrBadConfig, []string{"empty"}},
		{"syntax", "{\"cluster\": {\"ps\": [\"a:1\",]}}", cluster.ErrBadConfig, []string{"invalid JSON at offset 26", "line 1, column 27"}},
		{"syntax line 2", "{\"cluster\": {}\n  \"task\": 1}", cluster.ErrBadConfig, []string{"line 2, column 3"}},
		{"truncated", `{"cluster": {"ps": [`, cluster.ErrBadConfig, []string{"unexpected end"}},
		{"trailing data", `{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps"}} x`, cluster.ErrBadConfig, []string{"extra data", "offset 53"}},
		{"wrong type", `{"cluster": {"ps": ["a:1", 2]}, "task": {"type": "ps"}}`, cluster.ErrBadConfig, []string{"offset 27", "column 28", "got a JSON number, want a string"}},
		{"index is a string", `{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": "0"}}`, cluster.ErrBadConfig, []string{"task.index", "want an integer"}},
		{"not an object", `[1]`, cluster.ErrBadConfig, []string{"got a JSON array, want an object"}},
		{"no cluster", `{"task": {"type": "ps"}}`, cluster.ErrBadConfig, []string{`no "cluster"`}},
		{"no jobs", `{"cluster": {}, "task": {"type": "ps"}}`, cluster.ErrBadConfig, []string{"no jobs"}},
		{"no task", `{"cluster": {"ps": ["a:1"]}}`, cluster.ErrBadConfig, []string{`no "task"`}},
		{"no type", `{"cluster": {"ps": ["a:1"]}, "task": {"index": 0}}`, cluster.ErrBadConfig, []string{`no "type"`}},
		{"unknown job", `{"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "chief"}}`, cluster.ErrUnknownJob, []string{`"chief"`, "jobs ps, worker"}},
		{"index out of range", `{"cluster": {"ps": ["a:1"], "worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 2}}`, cluster.ErrIndexOutOfRange, []string{"index 2", `job "worker" has 2 task(s)`}},
		{"negative index", `{"cluster": {"worker": ["b:1"]}, "task": {"type": "worker", "index": -1}}`, cluster.ErrIndexOutOfRange, []string{"index -1"}},
		{"own job empty", `{"cluster": {"ps": ["a:1"], "worker": []}, "task": {"type": "worker"}}`, cluster.ErrNoAddress, []string{"/job:worker/task:0", "cluster.worker is empty"}},
		{"own address empty", `{"cluster": {"worker": ["b:1", ""]}, "task": {"type": "worker", "index": 1}}`, cluster.ErrBadAddress, []string{"/job:worker/task:1 (TF_CONFIG cluster.worker[1])", "empty"}},
		{"own address null", `{"cluster": {"worker": [null]}, "task": {"type": "worker"}}`, cluster.ErrBadAddress, []string{"cluster.worker[0]"}},
		{"other job empty", `{"cluster": {"ps": [], "worker": ["b:1"]}, "task": {"type": "worker"}}`, cluster.ErrEmptyJob, []string{"TF_CONFIG cluster.ps", "no tasks"}},
		{"bad job name", `{"cluster": {"ps-0": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker"}}`, cluster.ErrBadJobName, []string{`"ps-0"`, "identifiers"}},
		{"job name digit", `{"cluster": {"1ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker"}}`, cluster.ErrBadJobName, []string{`"1ps"`}},
		{"duplicate", `{"cluster": {"ps": ["a:1"], "worker": ["b:1", "a:1"]}, "task": {"type": "worker"}}`, cluster.ErrDuplicateAddress, []string{"cluster.ps[0]", "cluster.worker[1]"}},
		{"duplicate ipv6", `{"cluster": {"ps": ["[::1]:1"], "worker": ["[0:0::1]:1"]}, "task": {"type": "worker"}}`, cluster.ErrDuplicateAddress, []string{"/job:ps/task:0", "/job:worker/task:0"}},
		{"bad ipv6", `{"cluster": {"worker": ["[::zz]:1"]}, "task": {"type": "worker"}}`, cluster.ErrBadAddress, []string{"IPv6"}},
		{"missing port", `{"cluster": {"worker": ["b"]}, "task": {"type": "worker"}}`, cluster.ErrBadAddress, []string{"missing port"}},
		{"whitespace", `{"cluster": {"worker": ["b :1"]}, "task": {"type": "worker"}}`, cluster.ErrBadAddress, []string{"whitespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := cluster.FromTFConfig(tc.js)
			checkErr(t, err, tc.want, tc.wantMsg)
		})
	}
}

func TestNewSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		jobs    map[string][]string
		want    error
		wantMsg []string
	}{
		{"nil", nil, cluster.ErrBadConfig, []string{"no jobs"}},
		{"empty job name", map[string][]string{"": {"a:1"}}, cluster.ErrBadJobName, []string{"empty"}},
		{"empty job", map[string][]string{"ps": {}}, cluster.ErrEmptyJob, []string{`job "ps"`}},
		{"bad address", map[string][]string{"evaluator": {"e"}}, cluster.ErrBadAddress, []string{"/job:evaluator/task:0", `"e"`}},
		{"duplicate", map[string][]string{"a": {"h:1"}, "b": {"h:1"}}, cluster.ErrDuplicateAddress, []string{"/job:a/task:0 and /job:b/task:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cluster.NewSpec(tc.jobs)
			checkErr(t, err, tc.want, tc.wantMsg)
		})
	}
	// Any identifier is a job; the input map is copied.
	jobs := map[string][]string{"evaluator": {"e:1"}, "_Shard2": {"s:1"}}
	spec, err := cluster.NewSpec(jobs)
	if err != nil {
		t.Fatal(err)
	}
	jobs["evaluator"][0] = "x:1"
	if spec.Addresses("evaluator")[0] != "e:1" {
		t.Error("NewSpec kept the caller's slice")
	}
}

func TestParseTaskID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want cluster.TaskID
		ok   bool
	}{
		{"/job:ps/task:0", cluster.TaskID{Job: "ps"}, true},
		{"/job:worker/task:12", cluster.TaskID{Job: "worker", Index: 12}, true},
		{"/job:ps", cluster.TaskID{}, false},
		{"/job:ps/task:-1", cluster.TaskID{}, false},
		{"/job:ps/task:01", cluster.TaskID{}, false},
		{"job:ps/task:0", cluster.TaskID{}, false},
		{"/job:p s/task:0", cluster.TaskID{}, false},
	} {
		got, err := cluster.ParseTaskID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseTaskID(%q) = %v, %v", tc.in, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseTaskID(%q) error %q does not name the input", tc.in, err)
		}
	}
}

func TestFlagsRegister(t *testing.T) {
	var f cluster.Flags
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	f.Register(fs)
	if f.Set() {
		t.Error("Set before parsing")
	}
	if err := fs.Parse([]string{"--ps-hosts=p:1", "--worker_hosts", "w:1,w:2", "--job-name=worker", "--task-index=1"}); err != nil {
		t.Fatal(err)
	}
	spec, self, err := f.Spec()
	if err != nil || self.String() != "/job:worker/task:1" || spec.NumTasks("worker") != 2 || !f.Set() {
		t.Fatalf("Spec = %v %v %v", spec, self, err)
	}
	if got := f.String(); got != "--ps_hosts=p:1 --worker_hosts=w:1,w:2 --job_name=worker --task_index=1" {
		t.Errorf("String = %q", got)
	}
}

func checkErr(t *testing.T, err, want error, msgs []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", want)
	}
	if !errors.Is(err, want) {
		t.Errorf("error %q does not wrap %v", err, want)
	}
	if !strings.HasPrefix(err.Error(), "cluster: ") {
		t.Errorf("error %q does not start with the package name", err)
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not contain %q", err, m)
		}
	}
}

func FuzzFromTFConfig(f *testing.F) {
	for _, s := range []string{
		`{"cluster": {"ps": ["a:1"], "worker": ["b:1", "c:2"]}, "task": {"type": "worker", "index": 1}}`,
		`{"cluster": {"worker": ["[::1]:1"]}, "task": {"type": "worker"}}`,
		`{"cluster": {"ps": []}, "task": {"type": "ps", "index": -3}}`,
		`{"cluster": null, "task": null}`,
		`{"cluster": {"ps": ["a:1",]}`, `[]`, `"x"`, ``, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, js string) {
		spec, self, err := cluster.FromTFConfig(js)
		if err != nil {
			if spec != nil || !strings.HasPrefix(err.Error(), "cluster: ") {
				t.Fatalf("error %q with spec %v", err, spec)
			}
			return
		}
		addr, err := spec.Address(self)
		if err != nil || addr == "" {
			t.Fatalf("accepted config whose own task %v has no address: %v", self, err)
		}
		// A valid spec is accepted again by NewSpec.
		if _, err := cluster.NewSpec(spec.JSON()); err != nil {
			t.Fatalf("NewSpec rejects an accepted spec: %v", err)
		}
	})
}
