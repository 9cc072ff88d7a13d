package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/distflow/distflow/cluster"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/worker"
)

// WorkerCache is the worker.Cache of a task in a cluster: it resolves task
// names through a cluster.Spec and dials each task on its first use. The
// task itself is served by the local service, in process. Until a remote
// task has answered once, every call to it first waits for it as
// WaitForTasks does (bounded by the call's context, logged), so tasks may
// start in any order and a missing peer fails a step with an error naming
// it. It is safe for concurrent use.
type WorkerCache struct {
	self  string
	local worker.Service
	opts  Options
	tasks []string          // sorted
	addrs map[string]string // task name -> host:port

	mu      sync.Mutex
	closed  bool
	clients map[string]*workerClient
	conns   []*grpc.ClientConn
}

var _ worker.Cache = (*WorkerCache)(nil)

// NewWorkerCache returns the cache of task self ("/job:worker/task:0") of
// spec; local serves self (it may be nil when self is not a task of spec,
// as for a client-only process). Close it to drop its connections.
func NewWorkerCache(spec *cluster.Spec, self string, local worker.Service, opts Options) *WorkerCache {
	c := &WorkerCache{self: self, local: local, opts: opts, addrs: map[string]string{}, clients: map[string]*workerClient{}}
	for _, t := range spec.Tasks() {
		addr, err := spec.Address(t)
		if err != nil {
			continue // Tasks and Address agree on a valid spec
		}
		c.tasks = append(c.tasks, t.String())
		c.addrs[t.String()] = addr
	}
	slices.Sort(c.tasks)
	return c
}

// Tasks lists every task of the cluster, sorted.
func (c *WorkerCache) Tasks() []string { return slices.Clone(c.tasks) }

// Address returns the host:port of a task.
func (c *WorkerCache) Address(task string) (string, error) {
	addr, ok := c.addrs[task]
	if !ok {
		return "", fmt.Errorf("rpc: task %q is not in the cluster (tasks: %s)", task, strings.Join(c.tasks, ", "))
	}
	return addr, nil
}

// Worker returns the service of task: the local one for the cache's own
// task, else a gRPC client, dialled (without waiting) on first use.
func (c *WorkerCache) Worker(task string) (worker.Service, error) {
	if task == c.self && c.local != nil {
		return c.local, nil
	}
	addr, err := c.Address(task)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("rpc: worker cache of %s is closed: %w", c.self, ErrUnavailable)
	}
	if w, ok := c.clients[task]; ok {
		return w, nil
	}
	opts := c.opts
	opts.metricsPeer = task // metrics name the peer by its task
	cc, _, err := dial(addr, opts)
	if err != nil {
		return nil, fmt.Errorf("rpc: task %s: %w", task, err)
	}
	peer := task + " at " + addr
	raw := newWorkerClient(cc, peer, nil)
	w := newWorkerClient(cc, peer, newTensorPool(addr, peer, opts))
	var up atomic.Bool
	log := c.opts.logger()
	w.ready = func(ctx context.Context) error {
		if up.Load() {
			return nil
		}
		if err := waitForTask(ctx, raw, task, addr, log); err != nil {
			return err
		}
		up.Store(true)
		return nil
	}
	w.answered = &up
	c.clients[task] = w
	c.conns = append(c.conns, cc)
	return w, nil
}

// Close closes every connection of the cache; calls in progress fail and
// later Worker calls for remote tasks return an error.
func (c *WorkerCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for _, w := range c.clients {
		w.tensors.close()
	}
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	c.conns, c.clients = nil, nil
	return errors.Join(errs...)
}

var _ io.Closer = (*WorkerCache)(nil)

// logEvery bounds how often a wait for one task is logged.
const logEvery = 3 * time.Second

// WaitForTasks waits until every task answers GetStatus, retrying each one
// with a backoff of 50 ms doubling to 2 s and logging who it still waits
// for ("waiting for /job:ps/task:0 at 127.0.0.1:2222") at most every few
// seconds. It returns nil once all have answered, or, when ctx ends, an
// error naming the tasks still missing (wrapping ErrUnavailable and
// ctx.Err()). A peer that answers with an error other than unavailability
// (such as a refused authentication) fails the wait at once. log may be nil.
func WaitForTasks(ctx context.Context, cache worker.Cache, tasks []string, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	type addresser interface {
		Address(task string) (string, error)
	}
	var (
		mu   sync.Mutex
		errs = map[string]error{}
		wg   sync.WaitGroup
	)
	for _, task := range tasks {
		wg.Go(func() {
			w, err := cache.Worker(task)
			if err == nil {
				addr := "(address unknown)"
				if a, ok := cache.(addresser); ok {
					addr, _ = a.Address(task)
				}
				if wc, ok := w.(*workerClient); ok && wc.ready != nil {
					w = &workerClient{c: wc.c, cc: wc.cc, peer: wc.peer} // poll without the cache's own wait
				}
				err = waitForTask(ctx, w, task, addr, log)
			}
			if err != nil {
				mu.Lock()
				errs[task] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) == 0 {
		return nil
	}
	names := make([]string, 0, len(errs))
	for t := range errs {
		names = append(names, t)
	}
	slices.Sort(names)
	all := make([]error, len(names))
	for i, t := range names {
		all[i] = errs[t]
	}
	return fmt.Errorf("rpc: tasks not ready: %s: %w", strings.Join(names, ", "), errors.Join(all...))
}

// waitForTask polls one task's GetStatus until it answers or ctx ends.
func waitForTask(ctx context.Context, w worker.Service, task, addr string, log *slog.Logger) error {
	delay := backoffBase
	var lastLog time.Time
	for attempt := 1; ; attempt++ {
		// Calls wait for the connection (WaitForReady), so an attempt that
		// times out has already waited: only failures that come back at
		// once are followed by a pause.
		actx, cancel := context.WithTimeout(ctx, max(delay, 500*time.Millisecond))
		start := time.Now()
		_, err := w.GetStatus(actx, &pb.GetStatusRequest{})
		// gRPC may fail a call whose deadline is about to pass before the
		// context says so: its error counts as the attempt's timeout.
		attemptTimedOut := ctx.Err() == nil && (actx.Err() != nil || errors.Is(err, context.DeadlineExceeded))
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("rpc: "+task+" is up", "task", task, "addr", addr, "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("rpc: %s at %s is not reachable (%d attempts; last: %v): %w (%w)", task, addr, attempt, err, ErrUnavailable, ctx.Err())
		}
		if !attemptTimedOut && !errors.Is(err, ErrUnavailable) {
			return fmt.Errorf("rpc: %s at %s: %w", task, addr, err)
		}
		if time.Since(lastLog) >= logEvery {
			log.Info("rpc: waiting for "+task+" at "+addr, "task", task, "addr", addr, "attempt", attempt, "err", err)
			lastLog = time.Now()
		}
		if pause := delay - time.Since(start); !attemptTimedOut && pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		delay = min(2*delay, backoffMax)
	}
}
