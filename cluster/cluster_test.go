package cluster_test

import (
	"errors"
	"fmt"
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
	want := []cluster.TaskID{{"chief", 0}, {"ps", 0}, {"ps", 1}, {"worker", 0}} // no evaluator: it is not a member
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
		{"unknown job", "p:1", "w:1", "", "trainer", 0, cluster.ErrUnknownJob, []string{`"trainer"`, "ps, worker, chief"}},
		{"own job empty", "p:1", "", "", "worker", 0, cluster.ErrNoAddress, []string{"/job:worker/task:0", "--worker_hosts is empty"}},
		{"index too big", "p:1", "w:1,w:2", "", "worker", 2, cluster.ErrIndexOutOfRange, []string{"--task_index 2", "--worker_hosts lists 2 task(s)"}},
		{"negative index", "p:1", "w:1", "", "ps", -1, cluster.ErrIndexOutOfRange, []string{"--task_index -1", "--ps_hosts lists 1"}},
		{"spaces for commas", "p:1", "w:1 w:2", "", "worker", 0, cluster.ErrBadAddress, []string{"--worker_hosts entry 1", `"w:1 w:2"`, "separate entries with commas"}},
		{"stray comma", "p:1,", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"--ps_hosts entry 2", "empty"}},
		{"missing port", "p:1", "w:1, w2", "", "worker", 0, cluster.ErrBadAddress, []string{"/job:worker/task:1", "--worker_hosts entry 2", `"w2"`, "missing port"}},
		{"port range", "p:70000", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"--ps_hosts entry 1", "out of range 1-65535"}},
		{"port zero", "p:0", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"port 0"}},
		{"port not a number", "p:http", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{`port "http" is not a number`}},
		{"empty host", ":2222", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"empty host"}},
		{"scheme", "grpc://p:1", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"without a scheme"}},
		{"too many colons", "a:b:1", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"too many colons"}},
		{"bad host", "p@x:1", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"character '@'"}},
		{"duplicate", "h:1", "w:1, H:1", "", "worker", 0, cluster.ErrDuplicateAddress, []string{"/job:ps/task:0 (--ps_hosts entry 1) and /job:worker/task:1 (--worker_hosts entry 2) have the same address h:1", `written "h:1" and "H:1"`}},
		{"duplicate same spelling", "127.0.0.1:2222", "127.0.0.1:2222", "", "worker", 0, cluster.ErrDuplicateAddress, []string{"/job:ps/task:0 (--ps_hosts entry 1) and /job:worker/task:0 (--worker_hosts entry 1) have the same address 127.0.0.1:2222"}},
		{"duplicate in one job", "p:1", "w:1,w:2,w:1", "", "worker", 0, cluster.ErrDuplicateAddress, []string{"/job:worker/task:0 (--worker_hosts entry 1) and /job:worker/task:2 (--worker_hosts entry 3)"}},
		{"duplicate localhost", "localhost:2222", "127.0.0.1:2222", "", "worker", 0, cluster.ErrDuplicateAddress, []string{"same address 127.0.0.1:2222", "localhost is both 127.0.0.1 and ::1"}},
		{"duplicate localhost v6", "[::1]:2222", "LocalHost:2222", "", "worker", 0, cluster.ErrDuplicateAddress, []string{"same address [::1]:2222", `"[::1]:2222" and "LocalHost:2222"`}},
		{"duplicate leading zero", "p:02222", "p:2222", "", "worker", 0, cluster.ErrDuplicateAddress, []string{"same address p:2222"}},
		{"duplicate mapped v4", "[::ffff:10.0.0.1]:1", "10.0.0.1:1", "", "worker", 0, cluster.ErrDuplicateAddress, []string{"same address 10.0.0.1:1"}},
		{"duplicate chief", "p:1", "w:1", "W:1", "worker", 0, cluster.ErrDuplicateAddress, []string{"--chief_hosts entry 1", "--worker_hosts entry 1"}},
		{"port sign", "p:+1", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{`port "+1" is not a number`}},
		{"port huge", "p:0000100000", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"out of range"}},
		{"port too many digits", "p:99999999999999999999999", "w:1", "", "worker", 0, cluster.ErrBadAddress, []string{"out of range"}},
		{"job typo", "p:1", "w:1", "", "wroker", 0, cluster.ErrUnknownJob, []string{`"wroker"`, `did you mean "worker"?`}},
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
		{"wrong type", `{"cluster": {"ps": ["a:1", 2]}, "task": {"type": "ps"}}`, cluster.ErrBadConfig, []string{"offset 27", "column 28", "cluster.ps: got a JSON number, want a string"}},
		{"job is a string", `{"cluster": {"ps": ["a:1"], "worker": "b:1,c:1"}, "task": {"type": "ps"}}`, cluster.ErrBadConfig, []string{"cluster.worker: got a JSON string, want a list"}},
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
		{"no task, typo", `{"cluster": {"ps": ["a:1"]}, "tsk": {"type": "ps"}}`, cluster.ErrBadConfig, []string{`no "task"`, `there is a field "tsk": did you mean "task"?`}},
		{"no cluster, typo", `{"clutser": {"ps": ["a:1"]}, "task": {"type": "ps"}}`, cluster.ErrBadConfig, []string{`no "cluster"`, `did you mean "cluster"?`}},
		{"no type, typo", `{"cluster": {"ps": ["a:1"]}, "task": {"tpye": "ps"}}`, cluster.ErrBadConfig, []string{`no "type"`, `there is a field "tpye"`}},
		{"unknown job typo", `{"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "wroker"}}`, cluster.ErrUnknownJob, []string{`"wroker"`, `did you mean "worker"?`}},
		{"duplicate localhost", `{"cluster": {"ps": ["localhost:5"], "worker": ["[::1]:5"]}, "task": {"type": "worker"}}`, cluster.ErrDuplicateAddress, []string{"/job:ps/task:0 (TF_CONFIG cluster.ps[0]) and /job:worker/task:0 (TF_CONFIG cluster.worker[0]) have the same address [::1]:5"}},
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

// TestNotDuplicates lists addresses that look alike but are different
// endpoints, so a cluster may list them all.
func TestNotDuplicates(t *testing.T) {
	for _, addrs := range [][]string{
		{"127.0.0.1:2222", "127.0.0.2:2222", "[::1]:2222"}, // distinct loopback addresses
		{"localhost:2222", "localhost:2223"},
		{"h:1", "h.example.com:1"},       // not resolved
		{"host:1", "host.:1"},            // a search-domain name and a root one
		{"10.0.0.1:1", "[::10.0.0.1]:1"}, // IPv4-compatible is not IPv4-mapped
	} {
		if _, err := cluster.NewSpec(map[string][]string{"worker": addrs}); err != nil {
			t.Errorf("%v: %v", addrs, err)
		}
	}
}

func TestCheckAddress(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		wantMsg string // "" for a good address
	}{
		{"h:1", ""},
		{"127.0.0.1:65535", ""},
		{"[::1]:2222", ""},
		{"[fe80::1%eth0]:2222", ""},
		{"Host-1.example.COM:02222", ""},
		{"h", "missing port"},
		{"[::1]", "missing port"},
		{"::1", "too many colons"},
		{"h:", "missing port"},
		{":1", "empty host"},
		{"h:65536", "out of range"},
		{"h:-1", "not a number"},
		{"h:1 ", "whitespace"},
		{"http://h:1", "scheme"},
		{"h/x:1", "character '/'"},
		{"", "empty"},
	} {
		err := cluster.CheckAddress(tc.addr)
		if tc.wantMsg == "" {
			if err != nil {
				t.Errorf("CheckAddress(%q) = %v", tc.addr, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("CheckAddress(%q) accepted it", tc.addr)
			continue
		}
		checkErr(t, err, cluster.ErrBadAddress, []string{fmt.Sprintf("%q", tc.addr), tc.wantMsg})
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in          string
		defaultPort int
		want        string // the address, or a part of the error
		ok          bool
	}{
		{"h", 2222, "h:2222", true},
		{"h:1", 2222, "h:1", true},
		{"127.0.0.1", 2222, "127.0.0.1:2222", true},
		{"[::1]", 2222, "[::1]:2222", true},
		{"[::1]:5", 2222, "[::1]:5", true},
		{"h", 0, "missing port", false},
		{"[::1]", 0, "missing port", false},
		{"::1", 2222, "an IPv6 address needs brackets: [::1] or [::1]:2222", false},
		{"fe80::1:2222", 2222, "needs brackets", false},
		{"a:b:c", 2222, "too many colons", false},
		{"[::1", 2222, "missing ']'", false},
		{"[h]", 2222, "", true}, // net.SplitHostPort accepts brackets around a name
		{"h:", 2222, "missing port", false},
		{"", 2222, "empty", false},
		{"h@x", 2222, "character '@'", false},
		{"h:x", 2222, `port "x" is not a number`, false},
		{"grpc://h:1", 2222, "scheme", false},
	} {
		got, err := cluster.ParseAddress(tc.in, tc.defaultPort)
		if !tc.ok {
			if err == nil {
				t.Errorf("ParseAddress(%q, %d) = %q, want an error", tc.in, tc.defaultPort, got)
				continue
			}
			checkErr(t, err, cluster.ErrBadAddress, []string{fmt.Sprintf("%q", tc.in), tc.want})
			continue
		}
		if err != nil || tc.want != "" && got != tc.want {
			t.Errorf("ParseAddress(%q, %d) = %q, %v, want %q", tc.in, tc.defaultPort, got, err, tc.want)
		}
	}
}

func TestTFConfigWarnings(t *testing.T) {
	const good = `"cluster": {"ps": ["a:1"], "worker": ["b:1"]}`
	for _, tc := range []struct {
		name string
		js   string
		want []string
	}{
		{"none", `{` + good + `, "task": {"type": "ps", "index": 0}}`, nil},
		{"TensorFlow's quiet keys", `{` + good + `, "task": {"type": "ps", "trial": "3"}, "environment": "cloud", "rpc_layer": "grpc"}`, nil},
		{"not JSON", `{"tsk": `, nil},
		{"not an object", `[{"tsk": 1}]`, nil},
		{"empty", ``, nil},
		{"typo", `{` + good + `, "tsk": {"type": "ps"}}`, []string{
			`TF_CONFIG: unknown field "tsk" (did you mean "task"?); distflow reads "cluster" and "task"`}},
		{"unknown, nothing close", `{` + good + `, "task": {"type": "ps"}, "foo": 1}`, []string{
			`TF_CONFIG: unknown field "foo"; distflow reads "cluster" and "task"`}},
		{"task keys", `{` + good + `, "task": {"type": "ps", "indx": 0, "idx": 1, "zzz": 2, "Trial": 3}}`, []string{
			`TF_CONFIG: unknown field "task.indx" (did you mean "task.index"?); distflow reads "task.type" and "task.index"`,
			`TF_CONFIG: unknown field "task.idx" (did you mean "task.index"?); distflow reads "task.type" and "task.index"`,
			`TF_CONFIG: unknown field "task.zzz"; distflow reads "task.type" and "task.index"`,
			`TF_CONFIG: unknown field "task.Trial" (did you mean "task.trial"?); distflow reads "task.type" and "task.index"`}},
		{"capitals", `{"Cluster": {"ps": ["a:1"]}, "task": {"TYPE": "ps"}}`, []string{
			`TF_CONFIG: field "Cluster" is read as "cluster", but TensorFlow would not read it: write "cluster"`,
			`TF_CONFIG: field "task.TYPE" is read as "task.type", but TensorFlow would not read it: write "task.type"`}},
		{"twice", `{` + good + `, "task": {"type": "ps"}, "task": {"type": "worker", "index": 0, "index": 0}}`, []string{
			`TF_CONFIG: field "task" appears more than once; the last one is used`,
			`TF_CONFIG: field "task.index" appears more than once; the last one is used`}},
		{"estimator keys", `{` + good + `, "task": {"type": "ps"}, "model_dir": "/tmp/m", "session_master": ""}`, []string{
			`TF_CONFIG: field "model_dir" is TensorFlow Estimator's; distflow ignores it`,
			`TF_CONFIG: field "session_master" is TensorFlow Estimator's; distflow ignores it`}},
		{"job typo", `{"cluster": {"ps": ["a:1"], "wroker": ["b:1"], "evaluater": ["c:1"], "shard": ["d:1"]}, "task": {"type": "ps"}}`, []string{
			`TF_CONFIG: job "wroker" in "cluster" is not one of TensorFlow's (chief, worker, ps, evaluator, master): did you mean "worker"?`,
			`TF_CONFIG: job "evaluater" in "cluster" is not one of TensorFlow's (chief, worker, ps, evaluator, master): did you mean "evaluator"?`}},
		{"task not an object", `{` + good + `, "task": "ps"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cluster.TFConfigWarnings(tc.js); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("TFConfigWarnings =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestFromEnvWarn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      string
		ok       bool
		wantErr  error
		warnings int
	}{
		{"unset", "", false, nil, 0},
		{"good", `{"cluster": {"worker": ["w:1"]}, "task": {"type": "worker"}}`, true, nil, 0},
		{"good with a warning", `{"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "indx": 0}}`, true, nil, 1},
		{"error with a warning", `{"cluster": {"worker": ["w:1"]}, "tsk": {"type": "worker"}}`, true, cluster.ErrBadConfig, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(cluster.EnvVar, tc.env)
			spec, self, ok, ws, err := cluster.FromEnvWarn()
			if ok != tc.ok || !errors.Is(err, tc.wantErr) || len(ws) != tc.warnings {
				t.Fatalf("FromEnvWarn = %v %v ok=%v warnings=%q err=%v", spec, self, ok, ws, err)
			}
			if tc.ok && err == nil && (spec == nil || self.String() != "/job:worker/task:0") {
				t.Errorf("FromEnvWarn = %v %v", spec, self)
			}
		})
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

// FuzzFromTFConfig feeds hostile TF_CONFIG documents to FromTFConfig and
// TFConfigWarnings: neither may panic, errors must name the package, and an
// accepted cluster must be whole. Seeds beyond these are in
// testdata/fuzz/FuzzFromTFConfig.
func FuzzFromTFConfig(f *testing.F) {
	for _, s := range []string{
		`{"cluster": {"ps": ["a:1"], "worker": ["b:1", "c:2"]}, "task": {"type": "worker", "index": 1}}`,
		`{"cluster": {"worker": ["[::1]:1"]}, "task": {"type": "worker"}}`,
		`{"cluster": {"ps": []}, "task": {"type": "ps", "index": -3}}`,
		`{"cluster": null, "task": null}`,
		`{"cluster": {"ps": ["a:1",]}`, `[]`, `"x"`, ``, `{}`,
		`{"Cluster": {"wroker": ["localhost:1"], "ps": ["127.0.0.1:1"]}, "tsk": {"tpye": "ps"}, "task": {"type": "ps"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, js string) {
		for _, w := range cluster.TFConfigWarnings(js) {
			if !strings.HasPrefix(w, "TF_CONFIG: ") {
				t.Fatalf("warning %q does not start with TF_CONFIG", w)
			}
		}
		spec, self, err := cluster.FromTFConfig(js)
		checkFuzzResult(t, spec, self, err)
	})
}

// FuzzFromFlags does the same for the flag values of FromFlags. Seeds
// beyond these are in testdata/fuzz/FuzzFromFlags.
func FuzzFromFlags(f *testing.F) {
	for _, s := range []struct {
		ps, worker, chief, job string
		index                  int
	}{
		{"ps0:2222", "w0:2222, w1:2222", "", "worker", 1},
		{"localhost:1", "127.0.0.1:1", "", "ps", 0},
		{"[::1]:1", "[::ffff:127.0.0.1]:1,[::1]:2", "c:1", "chief", 0},
		{",", " , ", "c:1,c:2", "chief", -1},
		{"p:00001", "w:99999999999999999999", "", "worker", 1 << 40},
	} {
		f.Add(s.ps, s.worker, s.chief, s.job, s.index)
	}
	f.Fuzz(func(t *testing.T, ps, worker, chief, job string, index int) {
		spec, self, err := cluster.FromFlags(ps, worker, chief, job, index)
		checkFuzzResult(t, spec, self, err)
	})
}

// checkFuzzResult checks what any cluster constructor promises.
func checkFuzzResult(t *testing.T, spec *cluster.Spec, self cluster.TaskID, err error) {
	t.Helper()
	if err != nil {
		if spec != nil || !strings.HasPrefix(err.Error(), "cluster: ") {
			t.Fatalf("error %q with spec %v", err, spec)
		}
		return
	}
	addr, err := spec.Address(self)
	if err != nil || addr == "" {
		t.Fatalf("accepted a cluster whose own task %v has no address: %v", self, err)
	}
	for _, job := range spec.Jobs() {
		for _, a := range spec.Addresses(job) {
			if err := cluster.CheckAddress(a); err != nil {
				t.Fatalf("accepted a bad address: %v", err)
			}
		}
	}
	// A valid spec is accepted again by NewSpec.
	if _, err := cluster.NewSpec(spec.JSON()); err != nil {
		t.Fatalf("NewSpec rejects an accepted spec: %v", err)
	}
}

// TestEvaluatorTask: an evaluator is a task outside the cluster, whether
// the operator lists it in "cluster" (older TFJob controllers) or not
// (TensorFlow's convention); no other task sees it in the cluster either.
func TestEvaluatorTask(t *testing.T) {
	for _, c := range []struct{ name, js, wantTask string }{
		{"outside the cluster", `{"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]}, "task": {"type": "evaluator", "index": 0}}`, "/job:evaluator/task:0"},
		{"listed by the operator", `{"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}}`, "/job:evaluator/task:0"},
		{"a worker of a cluster that lists it", `{"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"], "evaluator": ["e:1"]}, "task": {"type": "worker", "index": 0}}`, "/job:worker/task:0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec, self, err := cluster.FromTFConfig(c.js)
			if err != nil {
				t.Fatal(err)
			}
			if self.String() != c.wantTask {
				t.Errorf("task %s, want %s", self, c.wantTask)
			}
			if got := strings.Join(spec.Jobs(), ","); spec.HasJob(cluster.EvaluatorJob) || spec.NumTasks("worker") != 1 || spec.NumTasks("ps") != 1 || spec.NumTasks("chief") != 1 {
				t.Errorf("cluster jobs %s, want chief, ps and worker", got)
			}
		})
	}
	spec, self, err := cluster.FromFlags("p:1", "w:1", "", "evaluator", 0)
	if err != nil || self.Job != cluster.EvaluatorJob || spec.HasJob(cluster.EvaluatorJob) || spec.Contains(self) {
		t.Errorf("--job_name evaluator: %v, task %s, cluster %s", err, self, spec)
	}
	for _, c := range []struct {
		js   string
		want error
	}{
		{`{"cluster": {"evaluator": ["e:1"]}, "task": {"type": "evaluator"}}`, cluster.ErrBadConfig},
		{`{"cluster": {"worker": ["w:1"]}, "task": {"type": "evaluator", "index": -1}}`, cluster.ErrIndexOutOfRange},
	} {
		if _, _, err := cluster.FromTFConfig(c.js); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.js, err, c.want)
		}
	}
	if _, _, err := cluster.FromFlags("p:1", "w:1", "", "evaluator", -1); !errors.Is(err, cluster.ErrIndexOutOfRange) {
		t.Errorf("--job_name evaluator --task_index -1: %v", err)
	}
}
