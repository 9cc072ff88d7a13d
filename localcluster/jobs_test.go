package localcluster

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		noPS    bool
		want    Jobs
		wantErr string // a part of the error; "" for none
	}{
		{in: "ps=1,worker=2", want: Jobs{PS: 1, Worker: 2}},
		{in: " ps = 2 , worker = 3 , chief = 1 ", want: Jobs{PS: 2, Worker: 3, Chief: 1}},
		{in: "chief=1,worker=1,ps=64", want: Jobs{PS: 64, Worker: 1, Chief: 1}},
		{in: "worker=2", noPS: true, want: Jobs{Worker: 2}},
		{in: "ps=0,worker=2", noPS: true, want: Jobs{Worker: 2}},
		{in: "ps=1,worker=x", wantErr: `"ps=1,worker=x": invalid jobs: "worker=x" is not job=count (e.g. ps=1,worker=2)`},
		{in: "ps=1,worker", wantErr: `"worker" is not job=count`},
		{in: "ps=1,,worker=2", wantErr: `"" is not job=count`},
		{in: "", wantErr: `"" is not job=count`},
		{in: "=2", wantErr: `"=2" is not job=count`},
		{in: "ps=1,worker=2.5", wantErr: `"worker=2.5" is not job=count`},
		{in: "ps=1,gpu=2", wantErr: `unknown job "gpu" (want ps, worker, chief or evaluator)`},
		{in: "ps=1,worker=2,evaluator=1", want: Jobs{PS: 1, Worker: 2, Evaluator: 1}},
		{in: "ps=1,worker=2,evaluator=2", wantErr: "evaluator=2, at most one evaluator"},
		{in: "ps=1,Worker=2", wantErr: `unknown job "Worker"`},
		{in: "ps=1,worker=65", wantErr: "worker=65 is out of range (0-64 tasks)"},
		{in: "ps=-1,worker=2", wantErr: "ps=-1 is out of range"},
		{in: "ps=1,worker=1,worker=1", wantErr: `job "worker" given twice`},
		{in: "ps=1,worker=0", wantErr: "no worker"},
		{in: "ps=1,chief=1", wantErr: "no worker"},
		{in: "ps=1,worker=1,chief=2", wantErr: "chief=2, at most one chief"},
		{in: "worker=2", wantErr: `"worker=2": invalid jobs: no ps task (want ps=1 or more`},
		{in: "ps=1,worker=2", noPS: true, wantErr: "ps=1, but this cluster trains without ps tasks"},
	} {
		var opts []ParseOption
		if tc.noPS {
			opts = append(opts, WithoutPS())
		}
		got, err := Parse(tc.in, opts...)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("Parse(%q, noPS=%v): %v", tc.in, tc.noPS, err)
		case tc.wantErr == "" && got != tc.want:
			t.Errorf("Parse(%q, noPS=%v) = %+v, want %+v", tc.in, tc.noPS, got, tc.want)
		case tc.wantErr != "" && err == nil:
			t.Errorf("Parse(%q, noPS=%v) = %+v, want an error with %q", tc.in, tc.noPS, got, tc.wantErr)
		case tc.wantErr != "" && (!strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "localcluster: ")):
			t.Errorf("Parse(%q, noPS=%v): %v, want an error with %q", tc.in, tc.noPS, err, tc.wantErr)
		case tc.wantErr != "" && !errors.Is(err, ErrInvalidJobs):
			t.Errorf("Parse(%q): %v does not wrap ErrInvalidJobs", tc.in, err)
		}
	}
}

func TestJobsStringRoundTrips(t *testing.T) {
	for _, j := range []Jobs{{PS: 1, Worker: 2}, {Worker: 3, Chief: 1}, {PS: 2, Worker: 1, Chief: 1}} {
		var opts []ParseOption
		if j.PS == 0 {
			opts = append(opts, WithoutPS())
		}
		got, err := Parse(j.String(), opts...)
		if err != nil || got != j {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", j.String(), got, err, j)
		}
	}
	if s := (Jobs{}).String(); s != "worker=0" {
		t.Errorf("Jobs{}.String() = %q", s)
	}
}
