package scaling

import (
	"errors"
	"math"
	"testing"
)

var (
	mlp = Workload{Batch: 100, ParamBytes: 318040, Compute: 2.5e-3}
	gig = Network{Bandwidth: 125e6, RTT: 0.5e-3}
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12+1e-9*math.Abs(b) }

func TestStepTime(t *testing.T) {
	const S, B, rtt, tc = 318040.0, 125e6, 0.5e-3, 2.5e-3
	p := Params{PSOverhead: 1e-3, RingOverhead: 1e-3, CPUPerByte: 1e-9, CPUPerMessage: 1e-4, PSMessages: 8, Cores: 1}
	for _, tc := range []struct {
		c                      Cluster
		transfer, latency, cpu float64
	}{
		// One ps link carries 4 workers' pulls, then the last worker's
		// push (the others' pushes went while it pulled); the ps host
		// handles all of them.
		{Cluster{Strategy: "sync", Workers: 4, PS: 1}, (4*S + S) / B, 3 * rtt, math.Max(tc+1e-9*2*S+8e-4, 1e-9*2*4*S+4*8e-4)},
		// More ps tasks than workers: the worker's link is the bottleneck.
		{Cluster{Strategy: "sync", Workers: 2, PS: 4}, 2 * S / B, 3 * rtt, tc + 1e-9*2*S + 8e-4},
		// The ring: 2(N-1)/N of the model each way, 2(N-1) one-way hops,
		// 2(N-1) chunks sent and received.
		{Cluster{Strategy: "allreduce", Workers: 4}, 2 * 3.0 / 4 * S / B, 3 * rtt, tc + 1e-9*4*3.0/4*S + 1e-4*12},
		{Cluster{Strategy: "allreduce", Workers: 1}, 0, 0, tc},
		// Through the ps tasks, as many as workers: each link carries
		// the model once each way, pushes and sums overlapping, plus a
		// chunk; one round trip; a worker's 3 chunks to each ps and
		// their sums back.
		{Cluster{Strategy: "allreduce", Workers: 2, PS: 2}, (S + sumChunk) / B, rtt, tc + 1e-9*2*S + 1e-4*2*3*2},
		// Fewer ps than workers: the ps link carries N/P models.
		{Cluster{Strategy: "allreduce", Workers: 4, PS: 1}, (4*S + sumChunk) / B, rtt, math.Max(tc+1e-9*2*S+1e-4*2*5, 1e-9*2*4*S+1e-4*4*2*5)},
		{Cluster{Strategy: "allreduce", Workers: 1, PS: 1}, 0, 0, tc},
		// Eight workers sharing the machine: everybody's work on its cores.
		{Cluster{Strategy: "allreduce", Workers: 8, SharedCores: 1}, 2 * 7.0 / 8 * S / B, 7 * rtt, 8*tc + 1e-9*8*2*7.0/8*S + 1e-4*8*14},
	} {
		b, err := StepTime(mlp, gig, tc.c, p)
		if err != nil {
			t.Fatal(err)
		}
		if !near(b.Transfer, tc.transfer) || !near(b.Latency, tc.latency) || !near(b.CPU, tc.cpu) ||
			!near(b.Step, b.CPU+b.Transfer+b.Latency+b.Overhead) {
			t.Errorf("%+v: %+v, want transfer %g latency %g cpu %g", tc.c, b, tc.transfer, tc.latency, tc.cpu)
		}
	}
	for _, bad := range []Cluster{{Strategy: "sync", Workers: 2}, {Strategy: "allreduce"}, {Strategy: "gossip", Workers: 2}} {
		if _, err := StepTime(mlp, gig, bad, p); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestValidate: a cluster's strategy is spelt as distflow train --strategy
// spells it; the model takes sync on ps tasks and allreduce with or
// without them, and says which strategies it does not cover.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c          Cluster
		proto      protocol // 0: refused
		notCovered bool     // refused with ErrStrategy
	}{
		{Cluster{Strategy: "sync", Workers: 3, PS: 1}, syncPS, false},
		{Cluster{Strategy: "sync:3", Workers: 3, PS: 1}, syncPS, false},
		{Cluster{Strategy: "allreduce", Workers: 4}, ring, false},
		{Cluster{Strategy: "allreduce", Workers: 2, PS: 2}, sumPS, false},
		{Cluster{Strategy: "sync", Workers: 3}, 0, false},
		{Cluster{Strategy: "allreduce", Workers: 0}, 0, false},
		{Cluster{Strategy: "allreduce", Workers: 2, PS: -1}, 0, false},
		// Backup workers, and strategies the model has no formulas for.
		{Cluster{Strategy: "sync:2", Workers: 3, PS: 1}, 0, true},
		{Cluster{Strategy: "async", Workers: 3, PS: 1}, 0, true},
		{Cluster{Strategy: "averaging:4", Workers: 4}, 0, true},
		{Cluster{Strategy: "in-graph", Workers: 3, PS: 1}, 0, true},
		// The model's names before it took the strategies'.
		{Cluster{Strategy: "ps", Workers: 3, PS: 1}, 0, true},
		{Cluster{Strategy: "sum", Workers: 2, PS: 2}, 0, true},
		{Cluster{Workers: 2}, 0, true},
	} {
		got, err := tc.c.protocol()
		if got != tc.proto || (err == nil) != (tc.proto != 0) || errors.Is(err, ErrStrategy) != tc.notCovered {
			t.Errorf("%+v: protocol %d, %v; want %d (not covered: %v)", tc.c, got, err, tc.proto, tc.notCovered)
		}
		if err := tc.c.Validate(); (err == nil) != (tc.proto != 0) {
			t.Errorf("%+v: Validate() = %v", tc.c, err)
		}
	}
}

// TestStepTimeBurst: a token-bucket link sends a phase's first Burst bytes
// at once when the step leaves it idle long enough to refill, and the step
// is the fixed point of that.
func TestStepTimeBurst(t *testing.T) {
	const S, B = 318040.0, 125e6
	p := Params{PSOverhead: 10e-3, Cores: 1}
	c := Cluster{Strategy: "sync", Workers: 1, PS: 1}
	// A 10 ms overhead refills a 2 ms bucket: each phase sends S-Burst at
	// the rate.
	bursty := gig
	bursty.Burst = 2e-3 * B
	b, err := StepTime(mlp, bursty, c, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (S - bursty.Burst) / B; !near(b.Transfer, want) {
		t.Errorf("transfer %g, want %g (each phase less the bucket)", b.Transfer, want)
	}
	// A bucket larger than the bytes, with little else in the step: the
	// idle time, not the bucket, bounds the credit.
	p.PSOverhead = 0
	b, err = StepTime(Workload{Batch: 100, ParamBytes: S}, Network{Bandwidth: B, Burst: 10 * S}, c, p)
	if err != nil {
		t.Fatal(err)
	}
	if b.Transfer <= 0 || b.Transfer >= 2*S/B || !near(b.Step, b.CPU+b.Transfer+b.Latency+b.Overhead) {
		t.Errorf("%+v: want a transfer between 0 and the unshaped %g", b, 2*S/B)
	}
	// The fixed point: each phase's idle time is the rest of the step.
	idle := b.Step - S/B
	if want := 2 * math.Max(0, S-math.Min(10*S, B*idle)) / B; math.Abs(b.Transfer-want) > 1e-9 {
		t.Errorf("transfer %g, want %g at the fixed point", b.Transfer, want)
	}
}

// TestFitRecovers: points made by known parameters are fitted back, and
// the fit predicts a configuration it did not see.
func TestFitRecovers(t *testing.T) {
	// Like the bed: the shared machine's processors set the step.
	truth := Params{PSOverhead: 2e-3, RingOverhead: 1e-3, CPUPerByte: 5e-9, CPUPerMessage: 1e-3, PSMessages: 10, Cores: 1}
	var pts []Point
	for _, c := range []Cluster{
		{Strategy: "sync", Workers: 1, PS: 1, SharedCores: 1}, {Strategy: "sync", Workers: 3, PS: 1, SharedCores: 1},
		{Strategy: "allreduce", Workers: 2, SharedCores: 1}, {Strategy: "allreduce", Workers: 4, SharedCores: 1},
	} {
		x, err := Throughput(mlp, gig, c, truth)
		if err != nil {
			t.Fatal(err)
		}
		pts = append(pts, Point{Cluster: c, Network: gig, Workload: mlp, ExamplesPerSecond: x})
	}
	got, err := Fit(pts, Params{Cores: 1, CPUPerByte: truth.CPUPerByte})
	if err != nil {
		t.Fatal(err)
	}
	for _, eight := range []Cluster{{Strategy: "allreduce", Workers: 8, SharedCores: 1}, {Strategy: "sync", Workers: 7, PS: 1, SharedCores: 1}} {
		want, _ := Throughput(mlp, gig, eight, truth)
		pred, _ := Throughput(mlp, gig, eight, got)
		t.Logf("fitted %+v (truth %+v); %+v: %.0f, truth %.0f", got, truth, eight, pred, want)
		if math.Abs(pred/want-1) > 0.05 {
			t.Errorf("%+v: predicted %.0f, want %.0f", eight, pred, want)
		}
	}
	if _, err := Fit(nil, Params{}); err == nil {
		t.Error("no points: no error")
	}
	if _, err := Fit([]Point{{Cluster: Cluster{Strategy: "allreduce", Workers: 2}, Network: gig, Workload: mlp}}, Params{}); err == nil {
		t.Error("a point without a measurement: no error")
	}
}
