package main

import (
	"strings"
	"testing"
)

// TestReadRunsRate: the bed's rate comes from the runs' rate column (local
// runs have none), in tc's units, and runs of two rates are refused.
func TestReadRunsRate(t *testing.T) {
	const head = "mode,tasks,workers,ps,rate,rtt,steps,examples_per_second\n"
	runs, rate, err := readRuns(strings.NewReader(head +
		"local,1,1,0,-,-,200,350000\nps,2,1,1,1gbit,0.5ms,200,17000\nps,2,1,1,1gbit,0.5ms,200,18000\nallreduce,2,2,0,1gbit,0.5ms,200,48000\n"))
	if err != nil || rate != 1e9 || len(runs) != 3 || runs[1].n != 2 {
		t.Errorf("runs %+v, rate %v, err %v: want 3 configurations (ps twice) at 1e9 bit/s", runs, rate, err)
	}
	for _, bad := range []string{
		"ps,2,1,1,1gbit,0.5ms,200,17000\nps,4,3,1,200mbit,0.5ms,200,9000\n",
		"ps,2,1,1,fast,0.5ms,200,17000\n",
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
