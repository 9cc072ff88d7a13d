// Package workertest provides an in-memory network of workers for tests of
// distributed logic without sockets, with fault injection: a task can be
// cut (every call to or from it fails at once) or slowed down (every call
// to it waits first, honouring the caller's context).
//
//	net := workertest.NewCluster("/job:ps/task:0", "/job:worker/task:0")
//	m := master.New(master.Config{Task: "/job:worker/task:0", Workers: net.From("/job:worker/task:0")})
//	net.Cut("/job:ps/task:0") // later steps fail naming the ps task
//
// Tensors that cross the network are copied, as a real transport would, so
// that the sender and the receiver never share a buffer.
package workertest

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// ErrUnreachable is wrapped by every call to or from a cut task. It wraps
// worker.ErrUnavailable, as the errors of a real transport do.
var ErrUnreachable = fmt.Errorf("task unreachable: %w", worker.ErrUnavailable)

// Network connects in-process worker services by task name. It is safe for
// concurrent use.
type Network struct {
	mu       sync.Mutex
	services map[string]worker.Service
	workers  map[string]*worker.Worker
	cut      map[string]chan struct{} // closed while the task is cut
	delay    map[string]time.Duration
	calls    map[string]int // by "task method"
	log      *slog.Logger   // of the workers NewCluster and Restart make
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{
		services: map[string]worker.Service{}, workers: map[string]*worker.Worker{},
		cut: map[string]chan struct{}{}, delay: map[string]time.Duration{}, calls: map[string]int{},
	}
}

// NewCluster returns a network of one *worker.Worker per task, each
// reaching the others through the network (as seen from its own task).
// Workers log to a discarding logger and let their graphs read and write
// files anywhere (worker.Config.UnconfinedFiles); use NewNetwork and Add
// for others.
func NewCluster(tasks ...string) *Network {
	n := NewNetwork()
	n.log = slog.New(slog.DiscardHandler)
	for _, t := range tasks {
		n.mu.Lock()
		n.install(t)
		n.mu.Unlock()
	}
	return n
}

// install makes a new worker for task and serves it; n.mu must be held.
func (n *Network) install(task string) *worker.Worker {
	// The network's workers run the test's own graphs: their file ops are
	// not confined (package worker's tests confine theirs).
	w := worker.New(worker.Config{Task: task, Workers: n.From(task), Logger: n.log, UnconfinedFiles: true})
	n.services[task], n.workers[task] = w, w
	return w
}

// Restart replaces a task made by NewCluster with a new worker, as a
// supervisor restarts a crashed process on the same address: the calls in
// flight to or from the old one fail with ErrUnreachable, and the new one
// has no graphs, no variables and another incarnation. Cut and Delay of
// the task are undone. It returns the new worker.
func (n *Network) Restart(task string) *worker.Worker {
	n.Cut(task)
	n.mu.Lock()
	w := n.install(task)
	n.mu.Unlock()
	n.Heal(task)
	return w
}

// Add registers the service of a task.
func (n *Network) Add(task string, s worker.Service) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.services[task] = s
}

// Local returns the *worker.Worker of a task made by NewCluster, for
// inspection (nil for other tasks). It bypasses fault injection.
func (n *Network) Local(task string) *worker.Worker {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.workers[task]
}

// Cut makes every call to or from task fail with ErrUnreachable until Heal,
// including the calls in flight.
func (n *Network) Cut(task string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := n.cutCh(task)
	select {
	case <-ch: // already cut
	default:
		close(ch)
	}
}

// cutCh returns the channel closed when task is cut; n.mu must be held.
// The empty task (an outside client) is never cut.
func (n *Network) cutCh(task string) chan struct{} {
	if task == "" {
		return nil
	}
	ch, ok := n.cut[task]
	if !ok {
		ch = make(chan struct{})
		n.cut[task] = ch
	}
	return ch
}

// Heal undoes Cut and Delay of task.
func (n *Network) Heal(task string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.cut[task]:
		delete(n.cut, task)
	default:
	}
	delete(n.delay, task)
}

// Delay makes every call to task wait d first (or until the caller's
// context ends, which fails the call).
func (n *Network) Delay(task string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay[task] = d
}

// Calls returns how many calls of method ("RunGraph", "RegisterGraph", ...)
// reached task, from any caller.
func (n *Network) Calls(task, method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[task+" "+method]
}

// Tasks lists the tasks of the network, sorted.
func (n *Network) Tasks() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.services))
	for t := range n.services {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Worker returns the service of task as seen from outside the cluster (a
// client that is never cut).
func (n *Network) Worker(task string) (worker.Service, error) { return n.From("").Worker(task) }

// From returns the network as seen from task: calls fail if either end is
// cut. It is the worker.Cache a worker or master of that task uses.
func (n *Network) From(task string) worker.Cache { return view{n: n, from: task} }

type view struct {
	n    *Network
	from string
}

func (v view) Tasks() []string { return v.n.Tasks() }

func (v view) Worker(task string) (worker.Service, error) {
	v.n.mu.Lock()
	_, ok := v.n.services[task]
	v.n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("workertest: no task %s in the network", task)
	}
	return link{n: v.n, from: v.from, to: task}, nil
}

// link is one caller's connection to one task.
type link struct {
	n        *Network
	from, to string
}

// call applies faults, counts the call and runs f on the target service.
// A call in flight when either end is cut fails, as on a broken connection.
func call[R any](ctx context.Context, l link, method string, f func(ctx context.Context, s worker.Service) (R, error)) (R, error) {
	var zero R
	l.n.mu.Lock()
	l.n.calls[l.to+" "+method]++
	s := l.n.services[l.to]
	cutTo, cutFrom, d := l.n.cutCh(l.to), l.n.cutCh(l.from), l.n.delay[l.to]
	l.n.mu.Unlock()
	unreachable := func() error {
		select {
		case <-cutTo:
			return fmt.Errorf("workertest: %s to task %s: %w", method, l.to, ErrUnreachable)
		case <-cutFrom:
			return fmt.Errorf("workertest: %s from task %s to task %s: %w", method, l.from, l.to, ErrUnreachable)
		default:
			return nil
		}
	}
	if err := unreachable(); err != nil {
		return zero, err
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return zero, fmt.Errorf("workertest: %s to task %s: %w", method, l.to, ctx.Err())
		case <-cutTo:
		case <-cutFrom:
		}
		if err := unreachable(); err != nil {
			return zero, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-cutTo:
		case <-cutFrom:
		case <-ctx.Done():
		}
		cancel()
	}()
	r, err := f(ctx, s)
	if err != nil {
		if uerr := unreachable(); uerr != nil {
			return zero, uerr
		}
		return zero, err
	}
	return r, nil
}

func (l link) GetStatus(ctx context.Context, req *pb.GetStatusRequest) (*pb.GetStatusResponse, error) {
	return call(ctx, l, "GetStatus", func(ctx context.Context, s worker.Service) (*pb.GetStatusResponse, error) {
		return s.GetStatus(ctx, req)
	})
}

func (l link) RegisterGraph(ctx context.Context, req *pb.RegisterGraphRequest) (*pb.RegisterGraphResponse, error) {
	return call(ctx, l, "RegisterGraph", func(ctx context.Context, s worker.Service) (*pb.RegisterGraphResponse, error) {
		return s.RegisterGraph(ctx, req)
	})
}

func (l link) DeregisterGraph(ctx context.Context, req *pb.DeregisterGraphRequest) (*pb.DeregisterGraphResponse, error) {
	return call(ctx, l, "DeregisterGraph", func(ctx context.Context, s worker.Service) (*pb.DeregisterGraphResponse, error) {
		return s.DeregisterGraph(ctx, req)
	})
}

func (l link) RunGraph(ctx context.Context, req *pb.RunGraphRequest) (*pb.RunGraphResponse, error) {
	return call(ctx, l, "RunGraph", func(ctx context.Context, s worker.Service) (*pb.RunGraphResponse, error) { return s.RunGraph(ctx, req) })
}

func (l link) RecvTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	return call(ctx, l, "RecvTensor", func(ctx context.Context, s worker.Service) (*tensor.Tensor, error) {
		t, err := s.RecvTensor(ctx, stepID, key)
		if err != nil {
			return nil, err
		}
		return t.Clone(), nil // the receiver must not share the sender's buffer
	})
}

func (l link) CleanupStep(ctx context.Context, req *pb.CleanupStepRequest) (*pb.CleanupStepResponse, error) {
	return call(ctx, l, "CleanupStep", func(ctx context.Context, s worker.Service) (*pb.CleanupStepResponse, error) {
		return s.CleanupStep(ctx, req)
	})
}

func (l link) CloseSession(ctx context.Context, req *pb.WorkerCloseSessionRequest) (*pb.WorkerCloseSessionResponse, error) {
	return call(ctx, l, "CloseSession", func(ctx context.Context, s worker.Service) (*pb.WorkerCloseSessionResponse, error) {
		return s.CloseSession(ctx, req)
	})
}

func (l link) Shutdown(ctx context.Context, req *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	return call(ctx, l, "Shutdown", func(ctx context.Context, s worker.Service) (*pb.ShutdownResponse, error) { return s.Shutdown(ctx, req) })
}
