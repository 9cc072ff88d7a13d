package scaling

import (
	"math"
	"testing"
)

var (
	mlp = Workload{Batch: 100, ParamBytes: 318040, Compute: 2.5e-3}
	gig = Network{Bandwidth: 125e6, RTT: 0.5e-3}
)

func TestStepTime(t *testing.T) {
	p := Params{Overhead: 1e-3, PSRounds: 4, RingRounds: 2, Cores: 2}
	for _, tc := range []struct {
		c                      Cluster
		transfer, latency, cmp float64
	}{
		// One ps link carries 4 workers' bytes, pulled then pushed.
		{Cluster{Mode: SyncPS, Workers: 4, PS: 1}, 2 * 4 * 318040 / 125e6, 4 * 0.5e-3, 2.5e-3},
		// More ps tasks than workers: the worker's link is the bottleneck.
		{Cluster{Mode: SyncPS, Workers: 2, PS: 4}, 2 * 318040 / 125e6, 4 * 0.5e-3, 2.5e-3},
		// The ring: 2(N-1)/N of the model each way, 2(N-1) hops.
		{Cluster{Mode: AllReduce, Workers: 4}, 2 * 3.0 / 4 * 318040 / 125e6, 2 * 3 * 0.5e-3, 2.5e-3},
		{Cluster{Mode: AllReduce, Workers: 1}, 0, 0, 2.5e-3},
		// Eight workers on two shared cores compute four times slower.
		{Cluster{Mode: AllReduce, Workers: 8, SharedCores: 2}, 2 * 7.0 / 8 * 318040 / 125e6, 2 * 7 * 0.5e-3, 4 * 2.5e-3},
	} {
		b, err := StepTime(mlp, gig, tc.c, p)
		if err != nil {
			t.Fatal(err)
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12+1e-9*math.Abs(b) }
		if !near(b.Transfer, tc.transfer) || !near(b.Latency, tc.latency) || !near(b.Compute, tc.cmp) ||
			!near(b.Step, b.Compute+b.Transfer+b.Latency+p.Overhead) {
			t.Errorf("%+v: %+v, want transfer %g latency %g compute %g", tc.c, b, tc.transfer, tc.latency, tc.cmp)
		}
	}
	for _, bad := range []Cluster{{Mode: SyncPS, Workers: 2}, {Mode: AllReduce}, {Mode: "gossip", Workers: 2}} {
		if _, err := StepTime(mlp, gig, bad, p); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestFitRecovers: points made by known parameters are fitted back to
// them, and the fit predicts a configuration it did not see.
func TestFitRecovers(t *testing.T) {
	truth := Params{Overhead: 2e-3, PSRounds: 6, RingRounds: 1.5, Cores: 1.6}
	var pts []Point
	for _, c := range []Cluster{
		{Mode: SyncPS, Workers: 1, PS: 1, SharedCores: 2}, {Mode: SyncPS, Workers: 3, PS: 1, SharedCores: 2},
		{Mode: AllReduce, Workers: 2, SharedCores: 2}, {Mode: AllReduce, Workers: 4, SharedCores: 2},
		{Mode: SyncPS, Workers: 2, PS: 2, SharedCores: 2},
	} {
		x, err := Throughput(mlp, gig, c, truth)
		if err != nil {
			t.Fatal(err)
		}
		pts = append(pts, Point{Cluster: c, Network: gig, Workload: mlp, ExamplesPerSecond: x})
	}
	got, err := Fit(pts, Params{})
	if err != nil {
		t.Fatal(err)
	}
	eight := Cluster{Mode: AllReduce, Workers: 8, SharedCores: 2}
	want, _ := Throughput(mlp, gig, eight, truth)
	pred, _ := Throughput(mlp, gig, eight, got)
	t.Logf("fitted %+v (truth %+v); 8-worker ring: %.0f, truth %.0f", got, truth, pred, want)
	if math.Abs(pred/want-1) > 0.02 {
		t.Errorf("8-worker prediction %.0f, want %.0f", pred, want)
	}
	if _, err := Fit(nil, Params{}); err == nil {
		t.Error("no points: no error")
	}
	if _, err := Fit([]Point{{Cluster: eight, Network: gig, Workload: mlp}}, Params{}); err == nil {
		t.Error("a point without a measurement: no error")
	}
}
