package executor

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// StepTrace receives the timeline of one traced step (RunTraced): every
// node the step executed, when, and on which lane. A lane is one of the
// step's workers, a goroutine at a time: lane 0 is the caller of
// RunTraced, the others are numbered in the order they first ran a node
// (pool workers, and the goroutines of kernels that may block). The nodes
// of one lane never overlap in time. Use a StepTrace for one step only; it
// is safe to read once RunTraced has returned.
type StepTrace struct {
	mu    sync.Mutex
	nodes []NodeTrace
	lanes int32
}

// NodeTrace is one node's execution in a traced step.
type NodeTrace struct {
	Node *graph.Node
	// Start and End are wall-clock times (Unix nanoseconds) around the
	// kernel's Compute.
	Start, End int64
	Lane       int32
	// InBytes and OutBytes are the sizes of the node's input and output
	// tensors (ref inputs not counted).
	InBytes, OutBytes int64
	// Failed is set when the kernel returned an error.
	Failed bool
	// Shapes are the output shapes, "[100,10] []", when the kernel
	// succeeded.
	Shapes string
}

// Nodes returns the nodes the step executed, in the order they ended. The
// slice belongs to the trace.
func (t *StepTrace) Nodes() []NodeTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nodes
}

// Lanes returns the number of lanes the step used.
func (t *StepTrace) Lanes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int(t.lanes)
}

// RunTraced is RunStep recording every node's execution into tr. Without
// a trace (RunStep), the executor records nothing and pays one branch per
// node.
func (e *Executor) RunTraced(ctx context.Context, step *kernel.Step, feedValues []*tensor.Tensor, tr *StepTrace) ([]*tensor.Tensor, error) {
	return e.RunStepWith(ctx, step, feedValues, StepOptions{Trace: tr})
}

// record notes node en's execution on worker w, from start to now. The
// node's inputs and outputs are still in c.
func (t *StepTrace) record(w *worker, en *execNode, c *kernel.Context, start int64, failed bool) {
	end := time.Now().UnixNano()
	nt := NodeTrace{Node: en.node, Start: start, End: end, Failed: failed}
	for _, in := range c.Inputs {
		nt.InBytes += tensorBytes(in)
	}
	if !failed {
		var shapes []byte
		for i, out := range c.Outputs {
			nt.OutBytes += tensorBytes(out)
			if i > 0 {
				shapes = append(shapes, ' ')
			}
			shapes = appendShape(shapes, out)
		}
		nt.Shapes = string(shapes)
	}
	t.mu.Lock()
	if w.traced != t {
		// The worker's first node of this step: a new lane, except for
		// the caller's worker, which is lane 0.
		w.traced = t
		if w.caller {
			w.lane = 0
		} else {
			t.lanes++
			w.lane = t.lanes
		}
	}
	nt.Lane = w.lane
	t.nodes = append(t.nodes, nt)
	t.mu.Unlock()
}

func tensorBytes(t *tensor.Tensor) int64 {
	if t == nil {
		return 0
	}
	return int64(t.NumElements()) * int64(t.DType().Size())
}

// appendShape appends t's shape as "[d0,d1]".
func appendShape(dst []byte, t *tensor.Tensor) []byte {
	dst = append(dst, '[')
	if t != nil {
		for i, d := range t.Shape() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(d), 10)
		}
	}
	return append(dst, ']')
}
