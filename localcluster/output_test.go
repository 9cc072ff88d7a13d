package localcluster

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type emitted struct {
	line     string
	complete bool
}

func collect(writes ...string) []emitted {
	var got []emitted
	w := &lineWriter{emit: func(line []byte, complete bool) { got = append(got, emitted{string(line), complete}) }}
	for _, s := range writes {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			panic(fmt.Sprint(n, err))
		}
	}
	w.flush()
	return got
}

func TestLineWriter(t *testing.T) {
	long := strings.Repeat("x", maxLine)
	for _, tc := range []struct {
		name   string
		writes []string
		want   []emitted
	}{
		{"lines", []string{"a\nbc\n"}, []emitted{{"a", true}, {"bc", true}}},
		{"split across writes", []string{"a", "b\nc", "d\n"}, []emitted{{"ab", true}, {"cd", true}}},
		{"empty lines", []string{"\n\na\n"}, []emitted{{"", true}, {"", true}, {"a", true}}},
		{"unterminated end", []string{"a\nb"}, []emitted{{"a", true}, {"b", false}}},
		{"nothing", nil, nil},
		{"a line of maxLine bytes is whole", []string{long[:10], long[10:] + "\n"}, []emitted{{long, true}}},
		{"a longer line is cut", []string{long + "yz\n"}, []emitted{{long, false}, {"yz", true}}},
		{"a longer line over writes", []string{"ab", long, "\n"}, []emitted{{"ab" + long[2:], false}, {"xx", true}}},
		{"a line of twice maxLine", []string{long + long + "\n"}, []emitted{{long, false}, {long, true}}},
	} {
		if got := collect(tc.writes...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %d pieces, want %d", tc.name, len(got), len(tc.want))
			for i := range min(len(got), len(tc.want)) {
				if got[i] != tc.want[i] {
					t.Errorf("%s: piece %d: %d bytes %v, want %d bytes %v", tc.name, i, len(got[i].line), got[i].complete, len(tc.want[i].line), tc.want[i].complete)
				}
			}
		}
	}
}

func TestTailKeepsTheLastLines(t *testing.T) {
	tl := newTail(3)
	for i := range 5 {
		tl.add([]byte("line " + strconv.Itoa(i)))
	}
	tl.add(bytes.Repeat([]byte("z"), maxKept+10))
	o := &output{}
	var b strings.Builder
	o.stderr = &b
	o.dumpTail(tl, "[ps 0] ")
	want := "[ps 0] ... (3 earlier lines not kept)\n[ps 0] line 3\n[ps 0] line 4\n[ps 0] " +
		strings.Repeat("z", maxKept) + " ... (10 bytes cut)\n"
	if b.String() != want {
		t.Errorf("dumped:\n%.300s\nwant:\n%.300s", b.String(), want)
	}
}

// TestTaskEnvSharesTheCores checks that a local cluster's tasks get the
// machine's cores shared among the training tasks, that a GOMAXPROCS the
// user set (in the environment or in Config.Env) is passed on untouched,
// and that the variables Run sets per task are not inherited.
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
	cores := runtime.GOMAXPROCS(0)
	base := []string{"HOME=/h", "TF_CONFIG={}", EnvTask + "=1", EnvListenFD + "=3"}
	for _, tc := range []struct {
		jobs Jobs
		want int
	}{
		{Jobs{PS: 1, Worker: 2}, max(1, cores/2)},
		{Jobs{Worker: 1}, cores},
		{Jobs{PS: 2, Chief: 1, Worker: 2 * cores}, 1},
	} {
		env, note := taskEnv(base, nil, tc.jobs)
		if got, want := gomaxprocs(env), []string{strconv.Itoa(tc.want)}; !slices.Equal(got, want) {
			t.Errorf("%v: GOMAXPROCS %v, want %v", tc.jobs, got, want)
		}
		if !strings.Contains(note, "set GOMAXPROCS to choose") {
			t.Errorf("the share is not told: %q", note)
		}
		if !slices.Equal(env[:len(env)-1], []string{"HOME=/h"}) {
			t.Errorf("environment %q, want HOME=/h and GOMAXPROCS only", env)
		}
	}
	for _, tc := range []struct{ environ, extra []string }{
		{[]string{"GOMAXPROCS=7"}, nil},
		{nil, []string{"GOMAXPROCS=7"}},
		{[]string{"GOMAXPROCS=2"}, []string{"GOMAXPROCS=7"}},
	} {
		env, note := taskEnv(tc.environ, tc.extra, Jobs{PS: 1, Worker: 2})
		// The last value counts (os/exec keeps the last of duplicates).
		if got := gomaxprocs(env); got[len(got)-1] != "7" || note != "" {
			t.Errorf("%q %q: GOMAXPROCS %v, note %q; want 7 and no note", tc.environ, tc.extra, got, note)
		}
	}
	// An empty GOMAXPROCS is unset.
	if got := gomaxprocs(must(taskEnv([]string{"GOMAXPROCS="}, nil, Jobs{Worker: 1}))); got[len(got)-1] != strconv.Itoa(cores) {
		t.Errorf("GOMAXPROCS= set: %v, want %d last", got, cores)
	}
}

func must(env []string, _ string) []string { return env }
