package train

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// StalenessBound keeps asynchronous replicas within bound steps of each
// other (stale synchronous parallel). Every replica has an int64 step
// counter variable "staleness/step_<i>", built through the caller's scope
// (or found there, when replicas share one graph)
// (so a replica device setter puts them on the ps) and initialised to zero
// by the global variables initializer. A replica calls Wait before each
// step, which returns once its counter is at most bound ahead of the
// slowest replica's, and Advance after it. A replica that stops for good
// calls Done, so that it no longer holds the others back.
//
// Every replica builds the same counters (same names) in its graph; index
// says which one is its own. Wait polls the counters with a backoff from
// 1 ms to 100 ms. The methods are safe for concurrent use.
type StalenessBound struct {
	replicas, index, bound int
	counters               []graph.Output
	advance, done          *graph.Node
	// set writes this replica's counter (Rejoin) from the fed value.
	set  *graph.Node
	feed graph.Output

	mu   sync.Mutex
	lost map[int]bool // replicas that Wait ignores (SetLive)
}

// NewStalenessBound adds the counters of replicas replicas and the nodes of
// replica index. On bad arguments it records an error in s and returns nil.
func NewStalenessBound(s *graph.Scope, replicas, index, bound int) *StalenessBound {
	if s.Err() != nil {
		return nil
	}
	if replicas < 1 || index < 0 || index >= replicas || bound < 0 {
		s.SetErr(fmt.Errorf("train: staleness bound: replica %d of %d with bound %d: want 0 <= index < replicas and bound >= 0", index, replicas, bound))
		return nil
	}
	sb := &StalenessBound{replicas: replicas, index: index, bound: bound}
	var mine *ops.Variable
	for i := range replicas {
		// Replicas sharing one graph share the counters.
		name := fmt.Sprintf("staleness/step_%d", i)
		v := ops.LookupVariable(s.Graph(), s.Prefix()+name)
		if v == nil {
			v = ops.NewVariable(s, name, tensor.Int64, nil, ops.ZerosInit(), ops.NotTrainable())
		}
		if v == nil {
			return nil
		}
		sb.counters = append(sb.counters, v.Value())
		if i == index {
			mine = v
		}
	}
	ss := s.WithDevice(mine.Node().Device()).SubScope(fmt.Sprintf("staleness/replica_%d", index))
	sb.advance = ops.AssignAdd(ss, mine.Value(), ops.Const(ss, int64(1))).Node
	sb.done = ops.Assign(ss, mine.Value(), ops.Const(ss, int64(math.MaxInt64/2))).Node
	sb.feed = ops.Placeholder(ss, "rejoin_step", tensor.Int64, tensor.ScalarShape())
	sb.set = ops.Assign(ss, mine.Value(), sb.feed).Node
	if s.Err() != nil {
		return nil
	}
	return sb
}

// Steps returns every replica's counter (a finished replica's is huge).
func (sb *StalenessBound) Steps(ctx context.Context, sess *session.Session) ([]int64, error) {
	out, err := sess.Run(ctx, nil, sb.counters, nil)
	if err != nil {
		return nil, fmt.Errorf("train: staleness bound: reading the step counters: %w", err)
	}
	steps := make([]int64, len(out))
	for i, t := range out {
		steps[i] = t.Int64s()[0]
	}
	return steps, nil
}

// Wait returns once this replica is at most bound steps ahead of the
// slowest, polling with backoff; it returns ctx's error if ctx ends first.
func (sb *StalenessBound) Wait(ctx context.Context, sess *session.Session) error {
	delay := time.Millisecond
	for {
		steps, err := sb.Steps(ctx, sess)
		if err != nil {
			return err
		}
		slowest := sb.slowest(steps)
		if steps[sb.index]-slowest <= int64(sb.bound) {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("train: staleness bound: replica %d at step %d waiting for the slowest at %d (bound %d): %w",
				sb.index, steps[sb.index], slowest, sb.bound, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// slowest is the smallest counter of the replicas not lost (this one's
// when every other is lost).
func (sb *StalenessBound) slowest(steps []int64) int64 {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	slowest := steps[sb.index]
	for i, v := range steps {
		if !sb.lost[i] {
			slowest = min(slowest, v)
		}
	}
	return slowest
}

// SetLive tells the bound that replica i is lost (alive false: Wait no
// longer waits for it) or back. It is safe for concurrent use.
func (sb *StalenessBound) SetLive(i int, alive bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.lost == nil {
		sb.lost = map[int]bool{}
	}
	sb.lost[i] = !alive
}

// Rejoin sets this replica's counter to the slowest of the others (not
// lost, not finished), if it is behind it: a replica that starts again
// after it was lost takes up at the others' step instead of holding them
// back while it catches up. A replica calls it before its first step.
func (sb *StalenessBound) Rejoin(ctx context.Context, sess *session.Session) error {
	steps, err := sb.Steps(ctx, sess)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	others := int64(-1)
	for i, v := range steps {
		if i != sb.index && !sb.lost[i] && v < math.MaxInt64/4 && (others < 0 || v < others) {
			others = v
		}
	}
	sb.mu.Unlock()
	if others <= steps[sb.index] {
		return nil
	}
	if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{sb.feed: tensor.Scalar(others)}, nil, []*graph.Node{sb.set}); err != nil {
		return fmt.Errorf("train: staleness bound: replica %d rejoining at step %d: %w", sb.index, others, err)
	}
	return nil
}

// Advance counts one step of this replica.
func (sb *StalenessBound) Advance(ctx context.Context, sess *session.Session) error {
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{sb.advance}); err != nil {
		return fmt.Errorf("train: staleness bound: advancing replica %d: %w", sb.index, err)
	}
	return nil
}

// Done marks this replica finished: it no longer holds the others back.
func (sb *StalenessBound) Done(ctx context.Context, sess *session.Session) error {
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{sb.done}); err != nil {
		return fmt.Errorf("train: staleness bound: finishing replica %d: %w", sb.index, err)
	}
	return nil
}
