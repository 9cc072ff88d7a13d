package main

import (
	"fmt"
	"strings"
	"testing"
)

const head = "strategy,tasks,workers,ps,rate,rtt,steps,examples_per_second\n"

// TestReadRunsRate: the bed's rate comes from the runs' rate column (local
// runs have none), in tc's units, and runs of two rates are refused.
func TestReadRunsRate(t *testing.T) {
	runs, rate, err := readRuns(strings.NewReader(head +
		"local,1,1,0,-,-,200,350000\nsync,2,1,1,1gbit,0.5ms,200,17000\nsync,2,1,1,1gbit,0.5ms,200,18000\nallreduce,2,2,0,1gbit,0.5ms,200,48000\n"))
	if err != nil || rate != 1e9 || len(runs) != 3 || runs[1].n != 2 {
		t.Errorf("runs %+v, rate %v, err %v: want 3 configurations (sync twice) at 1e9 bit/s", runs, rate, err)
	}
	for _, bad := range []string{
		"sync,2,1,1,1gbit,0.5ms,200,17000\nsync,4,3,1,200mbit,0.5ms,200,9000\n",
		"sync,2,1,1,fast,0.5ms,200,17000\n",
	} {
		if _, _, err := readRuns(strings.NewReader(head + bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for s, want := range map[string]float64{"1gbit": 1e9, "200mbit": 2e8, "10Gbit": 1e10, "512kbit": 512e3} {
		if got, err := tcRate(s); err != nil || got != want {
			t.Errorf("tcRate(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
}

// TestReadRunsStrategy: the first column is the strategy as distflow train
// --strategy spells it; allreduce round the ring and through the ps tasks
// are two configurations of one strategy, told apart by the ps column.
func TestReadRunsStrategy(t *testing.T) {
	runs, _, err := readRuns(strings.NewReader(head +
		"local,1,1,0,-,-,200,350000\nallreduce,4,4,0,1gbit,0.5ms,200,42000\nallreduce,4,2,2,1gbit,0.5ms,200,32000\n" +
		"allreduce,4,2,2,1gbit,0.5ms,200,33000\nsync:3,4,3,1,1gbit,0.5ms,200,21000\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		c := r.pt.Cluster
		got = append(got, fmt.Sprintf("%s/%d/%d/%d", c.Strategy, c.Workers, c.PS, r.n))
	}
	if want := "/0/0/1 allreduce/4/0/1 allreduce/2/2/2 sync:3/3/1/1"; strings.Join(got, " ") != want || !runs[0].local {
		t.Errorf("configurations (strategy/workers/ps/runs) %q, local %v; want %q, the first local", got, runs[0].local, want)
	}
	for _, tc := range []struct{ in, want string }{
		// The model's modes before it took the strategies' names.
		{"mode,tasks,workers,ps,rate,rtt,steps,examples_per_second\nps,2,1,1,1gbit,0.5ms,200,17000\n", "header strategy,tasks"},
		{head + "ps,2,1,1,1gbit,0.5ms,200,17000\n", `"ps": write sync`},
		{head + "sum,4,2,2,1gbit,0.5ms,200,32000\n", `"sum": write allreduce`},
		// Strategies the model does not cover, or a cluster that a
		// strategy cannot train on.
		{head + "async,2,1,1,1gbit,0.5ms,200,17000\n", "line 2: scaling: the model covers"},
		{head + "sync:1,4,3,1,1gbit,0.5ms,200,17000\n", "no backup workers"},
		{head + "sync,2,2,0,1gbit,0.5ms,200,17000\n", "0 ps tasks"},
	} {
		if _, _, err := readRuns(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one that says %q", tc.in, err, tc.want)
		}
	}
}
