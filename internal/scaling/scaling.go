// Package scaling is an analytic model of data-parallel training
// throughput: N workers with P parameter servers (the sync strategy), a
// ring all-reduce, or an all-reduce through P summation servers, on links
// of a given bandwidth and round-trip time. Its free parameters are fitted
// to runs measured on the shaped-network test bed (scripts/netbed.sh);
// docs/SCALING.md has the model's assumptions, the fit and its
// predictions.
//
//	p, err := scaling.Fit(runs, scaling.Params{})        // runs: measured Points
//	x := scaling.Throughput(w, net, scaling.Cluster{Strategy: "sync", Workers: 64, PS: 16}, p)
package scaling

import (
	"errors"
	"fmt"
	"math"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/estimator"
)

// protocol is how the workers of a Cluster combine their gradients: its
// strategy and whether it has ps tasks.
type protocol int

const (
	// syncPS is the sync strategy: each step every worker pulls the
	// parameters from the ps tasks and pushes its gradients to them; the
	// ps tasks aggregate the N gradients and apply one update.
	syncPS protocol = iota + 1
	// ring is the allreduce strategy without ps tasks: the workers average
	// their gradients with a ring all-reduce (reduce-scatter then
	// all-gather) and each applies it.
	ring
	// sumPS is the allreduce strategy with ps tasks, which are summation
	// servers (BytePS's design): each worker streams a slice of its
	// gradients to each ps, which sums the workers' chunks and streams the
	// sums back, in pipelined chunks; each worker applies the update.
	sumPS
)

// The chunks the protocols send as messages, as distflow cuts them; the
// summation servers' pipeline fills with one.
const (
	ringChunk = allreduce.DefaultChunkBytes
	sumChunk  = allreduce.DefaultServerChunkBytes
)

// Workload is what one worker does in one step.
type Workload struct {
	// Batch is the examples one worker processes per step.
	Batch int
	// ParamBytes is the model's size: the gradients pushed, and the
	// parameters pulled, by each worker every step.
	ParamBytes float64
	// Compute is one worker's forward and backward pass on a host of its
	// own, in seconds.
	Compute float64
}

// Network is every host's link: full duplex, to a non-blocking switch.
type Network struct {
	// Bandwidth is a host link's rate in each direction, bytes/s.
	Bandwidth float64
	// RTT is the round-trip time between two hosts, seconds.
	RTT float64
	// Burst is how many bytes the link sends at once, above Bandwidth,
	// after it has been idle: the bucket of a token-bucket shaper (the
	// bed's tc tbf holds 2 ms at its rate), refilled at Bandwidth while
	// idle. Zero for a link that never exceeds its rate.
	Burst float64
}

// sendTime is how long the link takes to send bytes after idling for idle
// seconds: the bytes the bucket holds go at once, the rest at Bandwidth.
func (n Network) sendTime(bytes, idle float64) float64 {
	credit := math.Min(n.Burst, n.Bandwidth*math.Max(idle, 0))
	return math.Max(0, bytes-credit) / n.Bandwidth
}

// Cluster is a configuration to predict.
type Cluster struct {
	// Strategy is the training strategy, spelt as estimator.ParseStrategy
	// and distflow train --strategy spell it. The model covers "sync"
	// (every worker's gradients in each update: "sync:K" only with K the
	// number of workers) and "allreduce": a ring without ps tasks, through
	// the ps tasks (summation servers) with them, as on the command line.
	Strategy string
	Workers  int
	// PS is the number of ps tasks (at least 1 for sync), each on a host
	// of its own; the model's bytes are spread evenly over them.
	PS int
	// SharedCores, when positive, is the number of cores every task of
	// the cluster shares (the test bed: one machine); zero means each
	// task has a host of its own.
	SharedCores float64
}

// Params are the model's fitted constants.
type Params struct {
	// PSOverhead, RingOverhead and SumOverhead are the fixed software
	// cost of one step on its critical path (RPC set-up, graph
	// execution, the coordination of a synchronous step), seconds, of
	// sync on ps tasks, of allreduce round a ring and of allreduce
	// through summation ps tasks.
	PSOverhead, RingOverhead, SumOverhead float64
	// CPUPerByte is the processor time spent per byte moved between
	// tasks (serialisation, TLS, copies; both ends), seconds. Fit keeps
	// it: it is measured apart (docs/BENCHMARKS.md, 64 MiB transfers).
	CPUPerByte float64
	// CPUPerMessage is the processor time spent per message (an RPC or a
	// ring chunk: system calls, wake-ups, scheduling), seconds.
	CPUPerMessage float64
	// PSMessages is the number of messages one worker exchanges with the
	// ps tasks per sync step (a ring exchanges 2(N-1) per worker).
	PSMessages float64
	// Cores is the number of cores that carry the CPU work: per host for
	// a cluster of hosts (default 1), or of the one machine when
	// Cluster.SharedCores is set (which then takes precedence).
	Cores float64
}

// The round trips a step waits for in series, fixed by the protocols
// rather than fitted: a sync step pulls the parameters, pushes the
// gradients and takes a token from the sync queue; a ring step passes
// 2(N-1) chunks, each one hop (half a round trip) after the previous.
const (
	psRounds      = 3
	ringHopRounds = 0.5
)

// ErrStrategy is returned, wrapped, for a strategy that the model does not
// cover.
var ErrStrategy = errors.New("scaling: the model covers the strategies sync and allreduce")

// Validate checks that the model covers the cluster: a strategy that
// estimator.ParseStrategy takes and the model covers (errors.Is
// ErrStrategy otherwise), at least one worker, and ps tasks where the
// strategy needs them.
func (c Cluster) Validate() error {
	_, err := c.protocol()
	return err
}

// protocol returns the cluster's protocol, or why the model does not
// cover the cluster.
func (c Cluster) protocol() (protocol, error) {
	if c.Workers < 1 {
		return 0, fmt.Errorf("scaling: %d workers: want at least 1", c.Workers)
	}
	if c.PS < 0 {
		return 0, fmt.Errorf("scaling: %d ps tasks: want none or more", c.PS)
	}
	s, err := estimator.ParseStrategy(c.Strategy)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrStrategy, err)
	}
	switch s := s.(type) {
	case estimator.Sync:
		if k := s.ReplicasToAggregate; k != 0 && k != c.Workers {
			return 0, fmt.Errorf("%w: strategy %q aggregates %d of %d workers' gradients: the model has no backup workers (want sync)", ErrStrategy, c.Strategy, k, c.Workers)
		}
		if c.PS < 1 {
			return 0, fmt.Errorf("scaling: strategy %q with %d ps tasks: want at least 1", c.Strategy, c.PS)
		}
		return syncPS, nil
	case estimator.AllReduce:
		if c.PS > 0 {
			return sumPS, nil
		}
		return ring, nil
	}
	return 0, fmt.Errorf("%w: strategy %q", ErrStrategy, c.Strategy)
}

// Breakdown is a step's predicted time by part, in seconds. The parts do
// not overlap: Step = CPU + Transfer + Latency + Overhead (a synchronous
// step computes, then communicates, then waits; the model has no
// pipelining of the two, which distflow does not do today).
type Breakdown struct {
	// CPU is the busiest processor's work: Compute plus the processor
	// time of moving bytes and messages.
	CPU, Compute                      float64
	Transfer, Latency, Overhead, Step float64
}

// StepTime returns the predicted time of one synchronous step.
//
// Compute is one worker's compute. Transfer is the bytes on the
// busiest link at Bandwidth. Sync: the pull moves ParamBytes*Workers/PS
// out of each ps link (or ParamBytes into a worker's, if more), and the
// pushes go the other way: a ps link serves the pulls one after another,
// so each worker pushes while the later ones still pull, and only the
// last worker's push (ParamBytes, on its own link) follows the pull
// phase. Allreduce round the ring: each worker sends and receives
// 2*(N-1)/N*ParamBytes. Allreduce through summation ps tasks: the pushes
// and the returned sums overlap, on the two directions of every link, so
// the busiest link carries max(ParamBytes, ParamBytes*Workers/PS) each way
// once, and a chunk more while the pipeline fills; one round trip (a push
// hop and a return hop). Each
// of these phases finds its direction of the link idle since its previous
// step's phase, so with a Burst its first bytes go at once: the step is
// then the fixed point of Step = CPU + Transfer(Step) + Latency + Overhead.
// Latency is the round trips waited for in series.
//
// CPU: on a cluster of hosts, the busiest host's work (a worker's compute
// plus its bytes and messages over Params.Cores; a ps task's share of all
// workers' bytes and messages over Params.Cores); on one shared machine
// (SharedCores), all the tasks' work, compute included, over Params.Cores.
func StepTime(w Workload, n Network, c Cluster, p Params) (Breakdown, error) {
	proto, err := c.protocol()
	if err != nil {
		return Breakdown{}, err
	}
	if w.Batch < 1 || w.ParamBytes < 0 || w.Compute < 0 || n.Bandwidth <= 0 || n.RTT < 0 {
		return Breakdown{}, errors.New("scaling: workload and network want a positive batch and bandwidth and no negative size, compute or RTT")
	}
	var b Breakdown
	b.Compute = w.Compute
	nw := float64(c.Workers)
	var bytes, msgs float64                  // the whole cluster's, per step
	var hostBytes, hostMsgs, psShare float64 // the busiest host's
	var phases []float64                     // the busiest link's bytes per phase, each in series
	switch proto {
	case syncPS:
		perPS := w.ParamBytes * nw / float64(c.PS)
		phases = []float64{math.Max(perPS, w.ParamBytes), w.ParamBytes}
		b.Latency = psRounds * n.RTT
		b.Overhead = p.PSOverhead
		bytes, msgs = 2*nw*w.ParamBytes, nw*p.PSMessages
		hostBytes, hostMsgs = 2*w.ParamBytes, p.PSMessages
		psShare = (p.CPUPerByte*bytes + p.CPUPerMessage*msgs) / float64(c.PS)
	case ring:
		if c.Workers > 1 {
			phases = []float64{2 * (nw - 1) / nw * w.ParamBytes}
			b.Latency = ringHopRounds * 2 * (nw - 1) * n.RTT
			b.Overhead = p.RingOverhead
			// 2(N-1) segments each way, in chunks of ringChunk.
			hostBytes = 2 * 2 * (nw - 1) / nw * w.ParamBytes
			hostMsgs = 2 * 2 * (nw - 1) * math.Ceil(w.ParamBytes/nw/ringChunk)
			bytes, msgs = nw*hostBytes/2, nw*hostMsgs/2
		}
	case sumPS:
		if c.Workers > 1 {
			np := float64(c.PS)
			phases = []float64{math.Max(w.ParamBytes, w.ParamBytes*nw/np) + sumChunk}
			b.Latency = n.RTT
			b.Overhead = p.SumOverhead
			// A worker's chunks out and sums in.
			hostBytes = 2 * w.ParamBytes
			hostMsgs = 2 * math.Ceil(w.ParamBytes/np/sumChunk) * np
			bytes, msgs = 2*nw*w.ParamBytes, nw*hostMsgs
			psShare = (p.CPUPerByte*bytes + p.CPUPerMessage*msgs) / np
		}
	}
	cores := p.Cores
	if cores <= 0 {
		cores = 1
	}
	if c.SharedCores > 0 {
		b.CPU = (nw*w.Compute + p.CPUPerByte*bytes + p.CPUPerMessage*msgs) / cores
	} else {
		// The compute is measured per worker as it runs; the cores
		// share the communication work.
		worker := w.Compute + (p.CPUPerByte*hostBytes+p.CPUPerMessage*hostMsgs)/cores
		b.CPU = math.Max(worker, psShare/cores)
	}
	rest := b.CPU + b.Latency + b.Overhead
	b.Transfer = transferTime(n, phases, rest)
	b.Step = rest + b.Transfer
	return b, nil
}

// transferTime is the time the phases take in a step whose other parts
// take rest: each phase's direction idles for the rest of the step. The
// time falls as the step grows (longer idle, fuller bucket), so the fixed
// point is found by bisection.
func transferTime(n Network, phases []float64, rest float64) float64 {
	at := func(step float64) float64 {
		var d float64
		for _, bytes := range phases {
			d += n.sendTime(bytes, step-bytes/n.Bandwidth)
		}
		return d
	}
	lo, hi := rest, rest+at(rest) // g(lo) <= 0 <= g(hi) for g(s) = s - rest - at(s)
	if n.Burst <= 0 || hi == lo {
		return hi - rest
	}
	for range 100 {
		mid := (lo + hi) / 2
		if mid-rest-at(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi - rest
}

// Throughput returns the predicted examples per second of the whole
// cluster: Workers*Batch examples per step.
func Throughput(w Workload, n Network, c Cluster, p Params) (float64, error) {
	b, err := StepTime(w, n, c, p)
	if err != nil {
		return 0, err
	}
	return float64(c.Workers*w.Batch) / b.Step, nil
}

// Point is one measured run.
type Point struct {
	Cluster  Cluster
	Network  Network
	Workload Workload
	// ExamplesPerSecond is the measured throughput of the cluster.
	ExamplesPerSecond float64
}

// Fit returns the Params that minimise the squared relative error (in
// logarithms) of the predicted throughput over the points, starting from
// init (zero fields start from defaults). It fits PSOverhead,
// RingOverhead, SumOverhead, CPUPerMessage and PSMessages, which stay
// positive, and keeps init's CPUPerByte and Cores. (An overhead of a
// protocol without points stays where it starts.)
func Fit(points []Point, init Params) (Params, error) {
	if len(points) == 0 {
		return Params{}, errors.New("scaling: no points to fit")
	}
	for i, pt := range points {
		if err := pt.Cluster.Validate(); err != nil {
			return Params{}, fmt.Errorf("point %d: %w", i, err)
		}
		if !(pt.ExamplesPerSecond > 0) {
			return Params{}, fmt.Errorf("scaling: point %d: throughput %v: want a positive measurement", i, pt.ExamplesPerSecond)
		}
	}
	def := func(v, d float64) float64 {
		if v > 0 {
			return v
		}
		return d
	}
	x0 := []float64{
		math.Log(def(init.PSOverhead, 1e-3)), math.Log(def(init.RingOverhead, 1e-3)),
		math.Log(def(init.CPUPerMessage, 1e-4)), math.Log(def(init.PSMessages, 8)), math.Log(def(init.SumOverhead, 1e-3)),
	}
	toParams := func(x []float64) Params {
		return Params{PSOverhead: math.Exp(x[0]), RingOverhead: math.Exp(x[1]), CPUPerMessage: math.Exp(x[2]),
			PSMessages: math.Exp(x[3]), SumOverhead: math.Exp(x[4]), CPUPerByte: init.CPUPerByte, Cores: init.Cores}
	}
	loss := func(x []float64) float64 {
		p := toParams(x)
		var s float64
		for _, pt := range points {
			got, err := Throughput(pt.Workload, pt.Network, pt.Cluster, p)
			if err != nil {
				return math.Inf(1)
			}
			d := math.Log(got / pt.ExamplesPerSecond)
			s += d * d
		}
		return s
	}
	// Restarts from the best point so far, in case one simplex stalls.
	x := x0
	for range 5 {
		x = nelderMead(loss, x, 4000)
	}
	return toParams(x), nil
}

// nelderMead minimises f from x0 (the downhill simplex method).
func nelderMead(f func([]float64) float64, x0 []float64, iters int) []float64 {
	n := len(x0)
	simplex := make([][]float64, n+1)
	vals := make([]float64, n+1)
	for i := range simplex {
		simplex[i] = append([]float64(nil), x0...)
		if i > 0 {
			simplex[i][i-1] += 0.5
		}
		vals[i] = f(simplex[i])
	}
	point := func(c []float64, x []float64, t float64) []float64 {
		out := make([]float64, n)
		for j := range out {
			out[j] = c[j] + t*(x[j]-c[j])
		}
		return out
	}
	for range iters {
		// Order: best first.
		for i := 1; i <= n; i++ {
			for j := i; j > 0 && vals[j] < vals[j-1]; j-- {
				simplex[j], simplex[j-1] = simplex[j-1], simplex[j]
				vals[j], vals[j-1] = vals[j-1], vals[j]
			}
		}
		if vals[n]-vals[0] < 1e-12 {
			break
		}
		c := make([]float64, n)
		for i := 0; i < n; i++ {
			for j := range c {
				c[j] += simplex[i][j] / float64(n)
			}
		}
		xr := point(c, simplex[n], -1)
		fr := f(xr)
		switch {
		case fr < vals[0]:
			xe := point(c, simplex[n], -2)
			if fe := f(xe); fe < fr {
				simplex[n], vals[n] = xe, fe
			} else {
				simplex[n], vals[n] = xr, fr
			}
		case fr < vals[n-1]:
			simplex[n], vals[n] = xr, fr
		default:
			xc := point(c, simplex[n], 0.5)
			if fc := f(xc); fc < vals[n] {
				simplex[n], vals[n] = xc, fc
				continue
			}
			for i := 1; i <= n; i++ {
				simplex[i] = point(simplex[0], simplex[i], 0.5)
				vals[i] = f(simplex[i])
			}
		}
	}
	best := 0
	for i := range vals {
		if vals[i] < vals[best] {
			best = i
		}
	}
	return simplex[best]
}
