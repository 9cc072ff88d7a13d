package estimator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/distflow/distflow/graph"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/trace"
	"github.com/distflow/distflow/train"
)

// TraceHook records Steps training steps of its replica as one Chrome
// trace file (package trace): every task's kernels on their executor
// lanes, each Send and Recv with its bytes, the RPCs of the step. It asks
// the session to trace a step in BeforeRun (session.TraceNextRun), and
// writes the file once it has Steps of them, or at End with those it has.
//
// The file is File, or Dir/trace-<global step>.json (trace.FileName, the
// global step of the first traced step), so that the newest trace of a
// directory is the one with the highest step (trace.Newest).
//
// Under every strategy it traces the session runs of the replica's steps:
// with parameter servers (async, sync, staleness) and in-graph
// replication they span every task; under the collective strategies
// (AllReduce, Averaging) the traced run is the rank's own forward and
// backward pass, before its gradients go round the ring.
type TraceHook struct {
	BaseHook
	// Steps is how many steps to trace; required (> 0).
	Steps int
	// Start is the first local step to trace; 0 means 2, since the first
	// step of a replica also builds and registers its plan.
	Start int64
	// File is where to write the trace; when empty, Dir receives it.
	File string
	Dir  string
	// Logger receives the path written; nil means slog.Default().
	Logger *slog.Logger

	mu     sync.Mutex
	b      trace.Builder
	first  int64 // the global step of the first traced step
	path   string
	failed int // traced steps that failed
}

// Path returns the file written, or "" before then.
func (h *TraceHook) Path() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.path
}

func (h *TraceHook) check() error {
	if h.Steps <= 0 {
		return fmt.Errorf("estimator: TraceHook.Steps is %d: say how many steps to trace (> 0)", h.Steps)
	}
	if h.File == "" && h.Dir == "" {
		return errors.New("estimator: TraceHook needs a File or a Dir to write the trace to")
	}
	return nil
}

// Begin checks the configuration.
func (h *TraceHook) Begin(*graph.Scope) error { return h.check() }

// BeforeRun asks the session to trace the coming step while steps remain.
func (h *TraceHook) BeforeRun(ctx context.Context, step *train.StepContext) ([]graph.Output, error) {
	start := h.Start
	if start <= 0 {
		start = 2
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if step.LocalStep < start || h.path != "" || h.b.Len() >= h.Steps || h.failed > h.Steps {
		return nil, nil
	}
	step.Session.TraceNextRun(ctx, func(st *pb.StepStats, err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil {
			h.failed++ // the step failed; the next one is traced instead
			return
		}
		h.b.Add(st)
	})
	return nil, nil
}

// AfterRun notes the global step of the first traced step and writes the
// file once Steps steps are traced.
func (h *TraceHook) AfterRun(ctx context.Context, step *train.StepContext, _ []*tensor.Tensor) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b.Len() == 1 && h.first == 0 {
		h.first = max(step.GlobalStep, 1)
	}
	if h.b.Len() >= h.Steps && h.path == "" {
		return h.writeLocked()
	}
	return nil
}

// End writes the steps traced so far if training ended before Steps.
func (h *TraceHook) End(ctx context.Context, ms *train.MonitoredSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b.Len() > 0 && h.path == "" {
		return h.writeLocked()
	}
	return nil
}

func (h *TraceHook) writeLocked() error {
	path := h.File
	if path == "" {
		path = filepath.Join(h.Dir, trace.FileName(h.first))
	}
	if err := trace.WriteFile(path, h.b.File()); err != nil {
		return fmt.Errorf("estimator: writing the step trace: %w", err)
	}
	h.path = path
	log := h.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Info("wrote a step trace (open it in https://ui.perfetto.dev or chrome://tracing)", "path", path, "steps", h.b.Len(), "first_global_step", h.first)
	return nil
}

var _ Hook = (*TraceHook)(nil)
