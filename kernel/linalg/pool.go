package linalg

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Parallel loops run on persistent goroutines, one per processor but the
// caller's, started on first use and added when GOMAXPROCS grows (see
// ensureWorkers). On the 2-vCPU reference VM, starting a
// goroutine on an idle processor took 50-200 us before it ran (the
// processor's thread sleeps in the kernel), longer than a whole MLP layer.
// A worker that has just finished a part therefore keeps polling for the
// next one for spinFor before it sleeps, so that the back-to-back kernels
// of a training step find it awake, as OpenMP's and OpenBLAS's pools do.

// Ranger runs part [lo, hi) of a parallel loop.
type Ranger interface {
	Range(lo, hi int)
}

// RangeFunc adapts a function to Ranger.
type RangeFunc func(lo, hi int)

// Range calls f.
func (f RangeFunc) Range(lo, hi int) { f(lo, hi) }

// job is one Parallel call. Its parts are claimed, not assigned: the caller
// and every worker it woke take the next unclaimed part until none is
// left, so a worker slow to wake (its thread descheduled on a busy machine)
// costs nothing but its share, which the caller runs instead. Jobs are
// pooled; state carries a generation so that a worker woken for a finished
// call claims nothing from the job's next use.
type job struct {
	state atomic.Uint64 // gen<<40 | parts<<20 | next claimed part
	done  atomic.Int32  // parts finished
	r     Ranger        // read only after a successful claim
	n     int
}

const partBits = 20 // parts and next fit in 20 bits each

func (j *job) claim(gen uint64) int {
	for {
		v := j.state.Load()
		if v>>(2*partBits) != gen {
			return -1
		}
		parts, next := int(v>>partBits)&(1<<partBits-1), int(v)&(1<<partBits-1)
		if next >= parts {
			return -1
		}
		if j.state.CompareAndSwap(v, v+1) {
			return next
		}
	}
}

// work runs parts of j until none is left.
func (j *job) work(gen uint64) {
	for {
		i := j.claim(gen)
		if i < 0 {
			return
		}
		parts := int(j.state.Load()>>partBits) & (1<<partBits - 1)
		j.r.Range(j.n*i/parts, j.n*(i+1)/parts)
		j.done.Add(1)
	}
}

type part struct {
	j   *job
	gen uint64
}

// spinFor is how long an idle worker polls for work before it sleeps: about
// what waking it costs, so that polling never wastes more than twice the
// better choice's time. At 30 us the worker slept through the serial ops
// between the MLP step's two parallel products and woke late for the
// second; the step took 460-510 us on two cores, more than on one
// (420-440), and 260-290 us at 100 us and more (models'
// BenchmarkTrainStep/mlp). Polling takes a core that another process on
// the machine could use; a local cluster therefore gives its tasks a
// share of the cores each (see taskEnv in cmd/distflow).
const spinFor = 250 * time.Microsecond

// maxWorkers bounds the pool: the capacity of its channel, which every
// worker's part must fit in so that a send after a successful reserve
// never blocks.
const maxWorkers = 1023

var pool struct {
	once  sync.Once
	mu    sync.Mutex   // serialises growth
	parts chan part    // buffered: a send after a successful reserve never blocks
	idle  atomic.Int32 // workers not reserved
	n     atomic.Int32 // workers started
}

// ensureWorkers starts workers until the pool has procs-1 (at most
// maxWorkers). The pool follows GOMAXPROCS up, not only its value at the
// first parallel call: a program that raises it later (a benchmark's -cpu
// list, runtime.GOMAXPROCS, the runtime's own update when the container's
// CPU limit grows) would otherwise run every part on the caller. Workers
// are never stopped; when GOMAXPROCS falls, Parallel wakes no more of them
// than it allows.
func ensureWorkers(procs int) {
	want := int32(min(procs-1, maxWorkers))
	if pool.n.Load() >= want {
		return
	}
	pool.once.Do(func() { pool.parts = make(chan part, maxWorkers) })
	pool.mu.Lock()
	defer pool.mu.Unlock()
	for pool.n.Load() < want {
		pool.n.Add(1)
		pool.idle.Add(1)
		go poolWorker()
	}
}

func poolWorker() {
	for {
		var p part
		select {
		case p = <-pool.parts:
		default:
			p = poolWait()
		}
		p.j.work(p.gen)
		pool.idle.Add(1)
	}
}

// poolWait polls for a part for spinFor, yielding the processor between
// polls, then blocks.
func poolWait() part {
	start := time.Now()
	for time.Since(start) < spinFor {
		runtime.Gosched()
		select {
		case p := <-pool.parts:
			return p
		default:
		}
	}
	return <-pool.parts
}

func reserve() bool {
	if pool.idle.Add(-1) >= 0 {
		return true
	}
	pool.idle.Add(1)
	return false
}

var jobs = sync.Pool{New: func() any { return new(job) }}

// Parallel splits [0, n) into parts contiguous ranges and runs r on them,
// on the calling goroutine and the pool's idle workers (none in a nested
// call while all are busy). It returns when every range is done. r must be
// safe for concurrent use on disjoint ranges.
func Parallel(n, parts int, r Ranger) {
	parts = min(parts, n, 1<<partBits-1)
	if parts <= 1 {
		if n > 0 {
			r.Range(0, n)
		}
		return
	}
	procs := runtime.GOMAXPROCS(0)
	ensureWorkers(procs)
	j := jobs.Get().(*job)
	gen := j.state.Load()>>(2*partBits) + 1
	j.r, j.n = r, n
	j.done.Store(0)
	j.state.Store(gen<<(2*partBits) | uint64(parts)<<partBits)
	for k := 1; k < min(parts, procs) && reserve(); k++ {
		pool.parts <- part{j, gen}
	}
	j.work(gen)
	// The parts claimed by workers are running: wait for them awake.
	for j.done.Load() != int32(parts) {
		runtime.Gosched()
	}
	j.r = nil
	jobs.Put(j)
}
