// Command scalingfit fits the scaling model (internal/scaling) to test-bed
// runs and prints, as Markdown, the fitted parameters, its predictions next
// to every measured configuration, and a table for larger clusters.
//
//	sudo scripts/netbed_scaling.sh > runs.csv
//	go run ./cmd/scalingfit --bandwidth 780 --rtt 650us --fit-tasks 2,4 < runs.csv
//
// The input is netbed_scaling.sh's CSV: strategy,tasks,workers,ps,rate,
// rtt,steps,examples_per_second. The strategy is spelt as distflow train
// --strategy spells it, sync or allreduce (through the ps tasks when the ps
// column has some), or is local for the runs of one process without a
// cluster. A configuration is its strategy, workers and ps; its repeated
// runs are averaged.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/distflow/distflow/internal/scaling"
)

func main() {
	compute := flag.Duration("compute", 0, "one worker's compute per step (default: from the input's local runs, distflow train without a cluster)")
	batch := flag.Int("batch", 100, "examples per worker per step")
	params := flag.Float64("param-bytes", 318040, "model bytes pushed and pulled per step (mlp 784-100-10: 79510 float32)")
	bw := flag.Float64("bandwidth", 1000, "the bed's link bandwidth in Mbit/s as measured (netbed.sh iperf)")
	rtt := flag.Duration("rtt", 500*time.Microsecond, "the bed's round trip as measured (netbed.sh rtt)")
	burst := flag.Float64("burst", -1, "the bytes a bed link sends at once after idling; 0 for none (default: netbed.sh's tc tbf bucket, 2 ms at the runs' rate column and at least 32 KiB: 250000 at 1gbit)")
	cores := flag.Float64("cores", 2, "the bed machine's cores")
	hostCores := flag.Float64("host-cores", 4, "cores per host that carry a task's work in the large-cluster table")
	perByte := flag.Float64("cpu-per-byte", 1.4e-9, "CPU seconds per byte moved, both ends (docs/BENCHMARKS.md: 94 ms of CPU per 64 MiB over TLS)")
	fitTasks := flag.String("fit-tasks", "2,4", "the task counts fitted; the others are predicted")
	flag.Parse()
	fitSet := map[int]bool{}
	for _, s := range strings.Split(*fitTasks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fail(fmt.Errorf("--fit-tasks %q: want numbers separated by commas", *fitTasks))
		}
		fitSet[n] = true
	}
	all, rateBits, err := readRuns(os.Stdin)
	fail(err)
	if *burst < 0 { // as netbed.sh sets it
		*burst = max(rateBits*2e-3/8, 32<<10)
	}
	bed := scaling.Network{Bandwidth: *bw * 1e6 / 8, RTT: rtt.Seconds(), Burst: *burst}
	// The local runs give the compute of one step, unless --compute does.
	var runs []run
	tc := compute.Seconds()
	for _, r := range all {
		if r.local {
			if tc <= 0 {
				tc = float64(*batch) / r.pt.ExamplesPerSecond
				fmt.Printf("Compute per step: %.2f ms (%d local runs, %.0f examples/s).\n\n", tc*1e3, r.n, r.pt.ExamplesPerSecond)
			}
			continue
		}
		runs = append(runs, r)
	}
	if tc <= 0 {
		fail(fmt.Errorf("no local runs and no --compute: want the compute time of one step (e.g. --compute 2.6ms)"))
	}
	w := scaling.Workload{Batch: *batch, ParamBytes: *params, Compute: tc}
	var fit []scaling.Point
	for _, r := range runs {
		r.pt.Workload, r.pt.Network, r.pt.Cluster.SharedCores = w, bed, *cores
		if fitSet[r.tasks] {
			fit = append(fit, r.pt)
		}
	}
	p, err := scaling.Fit(fit, scaling.Params{Cores: *cores, CPUPerByte: *perByte})
	fail(err)
	fmt.Printf("Fitted on %d configurations (tasks %s), with %.0f cores and %.2f ns of CPU per byte: overhead %.2f ms/step (sync), %.2f ms/step (allreduce, ring), %.2f ms/step (allreduce through ps), CPU %.0f us/message, %.1f messages per worker per sync step.\n\n",
		len(fit), *fitTasks, p.Cores, p.CPUPerByte*1e9, p.PSOverhead*1e3, p.RingOverhead*1e3, p.SumOverhead*1e3, p.CPUPerMessage*1e6, p.PSMessages)
	fmt.Println("| strategy | tasks | workers | ps | measured ex/s | predicted ex/s | error | predicted step ms = CPU + transfer + latency + overhead | fitted on |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	var worst float64
	for _, r := range runs {
		c := r.pt.Cluster
		c.SharedCores = *cores
		b, err := scaling.StepTime(w, bed, c, p)
		fail(err)
		x := float64(c.Workers*w.Batch) / b.Step
		e := x/r.pt.ExamplesPerSecond - 1
		used := "yes"
		if !fitSet[r.tasks] {
			used = "no"
			worst = math.Max(worst, math.Abs(e))
		}
		fmt.Printf("| %s | %d | %d | %d | %.0f (%d runs) | %.0f | %+.1f%% | %.1f = %.1f + %.1f + %.1f + %.1f | %s |\n", c.Strategy, r.tasks, c.Workers, c.PS,
			r.pt.ExamplesPerSecond, r.n, x, 100*e, b.Step*1e3, b.CPU*1e3, b.Transfer*1e3, b.Latency*1e3, b.Overhead*1e3, used)
	}
	fmt.Printf("\nLargest error on configurations not fitted: %.1f%%.\n\n", 100*worst)

	// Larger clusters: each task on a host of its own (no shared cores),
	// whose work --host-cores cores carry.
	p.Cores = *hostCores
	fmt.Printf("Each task on a host of its own with %.0f cores, links with a 50 us round trip, the software costs fitted above:\n\n", *hostCores)
	type wl struct {
		name string
		w    scaling.Workload
	}
	loads := []wl{
		{"mlp (318 KB, measured compute)", w},
		{"100 MB model, 250 ms compute (ResNet-50-sized, assumed)", scaling.Workload{Batch: 32, ParamBytes: 102e6, Compute: 0.25}},
	}
	fmt.Println("| workload | link | RTT | strategy | workers | ps | step ms = CPU (of which compute) + transfer + latency + overhead | ex/s | speed-up over 1 worker |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, l := range loads {
		for _, gbit := range []float64{10, 100} {
			net := scaling.Network{Bandwidth: gbit * 1e9 / 8, RTT: 50e-6}
			one, _ := scaling.Throughput(l.w, net, scaling.Cluster{Strategy: "allreduce", Workers: 1}, p)
			for _, c := range []scaling.Cluster{{Strategy: "sync", Workers: 64, PS: 16}, {Strategy: "allreduce", Workers: 64},
				{Strategy: "allreduce", Workers: 64, PS: 16}, {Strategy: "allreduce", Workers: 64, PS: 64}} {
				b, err := scaling.StepTime(l.w, net, c, p)
				fail(err)
				x := float64(c.Workers*l.w.Batch) / b.Step
				fmt.Printf("| %s | %.0f Gbit/s | 50 us | %s | %d | %d | %.2f = %.2f (%.2f) + %.2f + %.2f + %.2f | %.0f | %.1fx |\n",
					l.name, gbit, c.Strategy, c.Workers, c.PS, b.Step*1e3, b.CPU*1e3, b.Compute*1e3, b.Transfer*1e3, b.Latency*1e3, b.Overhead*1e3, x, x/one)
			}
		}
	}
}

// run is a configuration's runs: their geometric mean.
type run struct {
	tasks int
	n     int
	// local: runs of one process without a cluster, whose Cluster is
	// unset.
	local bool
	pt    scaling.Point
}

// The CSV's header, and the one it had when its first column named the
// scaling model's modes rather than the strategies.
const (
	header    = "strategy,tasks,workers,ps,rate,rtt,steps,examples_per_second"
	oldHeader = "mode,tasks,workers,ps,rate,rtt,steps,examples_per_second"
)

// renamed are the strategies that the CSV's old modes name: "sum" was
// allreduce through the row's ps tasks.
var renamed = map[string]string{"ps": "sync", "sum": "allreduce"}

// readRuns reads netbed_scaling.sh's CSV and averages the repeats of each
// configuration, in the order first seen, and the bed's configured rate in
// bit/s (its rate column: one rate for every run on the bed).
func readRuns(r io.Reader) ([]run, float64, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the runs: %w", err)
	}
	if len(rows) > 0 && strings.Join(rows[0], ",") == oldHeader {
		return nil, 0, fmt.Errorf("header %s: the first column is the strategy now, as distflow train --strategy spells it: "+
			"header %s, ps rows as sync, sum rows as allreduce (their ps column says that they sum through the ps tasks)", oldHeader, header)
	}
	if len(rows) < 2 || strings.Join(rows[0], ",") != header {
		return nil, 0, fmt.Errorf("want netbed_scaling.sh's CSV with its header (%s) and at least one run", header)
	}
	var rate float64
	for i, row := range rows[1:] {
		if row[4] == "-" { // a local run
			continue
		}
		bits, err := tcRate(row[4])
		if err != nil || (rate != 0 && bits != rate) {
			return nil, 0, fmt.Errorf("line %d: rate %q: want one tc rate (1gbit, 100mbit) for every run", i+2, row[4])
		}
		rate = bits
	}
	byKey := map[string]*run{}
	var order []string
	for i, row := range rows[1:] {
		tasks, e1 := strconv.Atoi(row[1])
		workers, e2 := strconv.Atoi(row[2])
		ps, e3 := strconv.Atoi(row[3])
		x, e4 := strconv.ParseFloat(row[7], 64)
		if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
			return nil, 0, fmt.Errorf("line %d: %q: want numbers in tasks, workers, ps and examples_per_second", i+2, row)
		}
		local := row[0] == "local"
		c := scaling.Cluster{Strategy: row[0], Workers: workers, PS: ps}
		if s, old := renamed[row[0]]; old {
			return nil, 0, fmt.Errorf("line %d: strategy %q: write %s, as distflow train --strategy spells it (the ps column says whether allreduce sums through ps tasks)", i+2, row[0], s)
		}
		if err := c.Validate(); err != nil && !local {
			return nil, 0, fmt.Errorf("line %d: %w", i+2, err)
		}
		if math.IsNaN(x) || x <= 0 {
			fmt.Fprintf(os.Stderr, "scalingfit: line %d: a failed run, left out\n", i+2)
			continue
		}
		// The ring and the summation servers are told apart by their ps
		// tasks, as on the command line.
		key := fmt.Sprintf("%s/%d/%d", row[0], workers, ps)
		rn, ok := byKey[key]
		if !ok {
			rn = &run{tasks: tasks, local: local}
			if !local {
				rn.pt.Cluster = c
			}
			byKey[key] = rn
			order = append(order, key)
		}
		// The geometric mean, as the fit compares logarithms.
		rn.pt.ExamplesPerSecond = math.Exp((math.Log(math.Max(rn.pt.ExamplesPerSecond, 1))*float64(rn.n) + math.Log(x)) / float64(rn.n+1))
		rn.n++
	}
	sort.SliceStable(order, func(i, j int) bool { return byKey[order[i]].tasks < byKey[order[j]].tasks })
	out := make([]run, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, rate, nil
}

// tcRate parses a tc rate as netbed.sh takes it (100mbit, 1gbit) into
// bit/s.
func tcRate(s string) (float64, error) {
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if num, ok := strings.CutSuffix(strings.ToLower(s), u.suffix); ok {
			n, err := strconv.ParseFloat(num, 64)
			if err != nil || !(n > 0) {
				break
			}
			return n * u.scale, nil
		}
	}
	return 0, fmt.Errorf("rate %q: want e.g. 100mbit or 1gbit", s)
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalingfit:", err)
		os.Exit(1)
	}
}
