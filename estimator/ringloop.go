package estimator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// ringLoop is the training loop of the collective strategies on an
// elastic ring. Rank 0 (the chief) leads: it watches the other ranks with
// heartbeats and sends a view (generation, step, members) whenever the
// members change or a step failed; every member then takes rank 0's
// model (a rank that joins, or one whose last step was cut short, starts
// equal) and the steps go on among the members. A rank that is lost is
// left out within the lost deadline; one that comes back (the same
// process, or a new one with the same task id) is let back in at the
// current step. Rank 0 alone saves and restores checkpoints: restarted,
// it resumes from the latest one and its first view brings the others
// back to it.
type ringLoop struct {
	r     *replica
	ring  *allreduce.Ring
	st    collectiveStep
	sess  *session.Session
	t     *tower
	in    *openInput
	steps int64
	batch int
	// setStep/stepsMade write the global step (rank 0, for checkpoints).
	setStep   *graph.Node
	stepsMade graph.Output
	gsType    tensor.DType
	saver     *checkpoint.Saver
	sched     *checkpoint.Schedule

	// what the loop did
	loss         float64
	localSteps   int
	timedSteps   int
	seconds      float64
	feeds        map[graph.Output]*tensor.Tensor
	window       int
	windowStart  time.Time
	lastMembers  int
	trainStart   time.Time
	warmup       int
	stepsInRound int64

	// claims, when set, reads the batch at the input position pos plus
	// this rank's place in the view (rank); position saves pos with the
	// model (rank 0).
	claims   *claimer
	position *inputPosition
	pos      int64
	rank     int
}

// viewGen is the generation of a new view: after the last, and after any
// that a predecessor of this rank 0 sent (a restarted chief), since the
// members only take newer views.
func viewGen(last int64) int64 { return max(last+1, time.Now().UnixMilli()) }

// lead is rank 0's loop; start is the first step (after a restore).
func (l *ringLoop) lead(ctx context.Context, start int64) error {
	r, cfg := l.r, l.r.cfg
	peers := map[int]cluster.TaskID{}
	for i, t := range r.reps[1:] {
		peers[i+1] = t
	}
	var (
		mu       sync.Mutex
		lost     = map[int]bool{}
		excluded = map[int]time.Time{} // ranks a failed step found down, and when
	)
	changed := make(chan struct{}, 1)
	// lossCh is closed when a member is lost: the step in flight, which
	// would wait for it until the step deadline, is cut short.
	lossCh := make(chan struct{})
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	m := &membership{cfg: cfg, log: r.log, peers: peers, waiting: "nothing: the ring re-forms without it",
		onChange: func(i int, alive bool) {
			mu.Lock()
			lost[i] = !alive
			if !alive {
				close(lossCh)
				lossCh = make(chan struct{})
			}
			mu.Unlock()
			poke()
		}}
	mctx, stop := context.WithCancel(ctx)
	watched := m.watch(mctx)
	defer func() { stop(); watched() }()
	members := func() []int {
		mu.Lock()
		defer mu.Unlock()
		out := []int{0}
		for i := 1; i < len(r.reps); i++ {
			if lost[i] {
				continue
			}
			if at, ok := excluded[i]; ok {
				// Let back in once it has answered since: a new process,
				// or the old one awake again.
				if m.answered(i).After(at) {
					delete(excluded, i)
				} else {
					continue
				}
			}
			out = append(out, i)
		}
		return out
	}
	_, lostAfter := cfg.heartbeats()

	var view allreduce.View
	var group *allreduce.Group
	step, fresh := start, true
	for step <= l.steps {
		if want := members(); fresh || !slices.Equal(want, view.Members) {
			if len(view.Members) > 0 { // not the first view
				r.log.Warn("the ring re-forms", "step", step, "members", l.names(want), "were", l.names(view.Members))
			}
			view = allreduce.View{Gen: viewGen(view.Gen), Step: step, Members: want, Sync: true}
			vctx, cancel := context.WithTimeout(ctx, cfg.StepTimeout)
			err := l.ring.SendView(vctx, view)
			cancel()
			if err != nil {
				r.log.Warn("a member did not take the new view", "generation", view.Gen, "err", err)
			}
			var gerr error
			if group, gerr = l.ring.Among(view); gerr != nil {
				return gerr
			}
			mu.Lock()
			cut := lossCh
			mu.Unlock()
			if err := l.sync(ctx, group, cut); err != nil {
				l.failed(ctx, err, step, &mu, excluded, changed, lostAfter)
				continue
			}
			fresh = false
		}
		mu.Lock()
		cut := lossCh
		mu.Unlock()
		if err := l.step(ctx, group, step, cut); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, train.ErrNaNLoss) {
				return err
			}
			l.failed(ctx, err, step, &mu, excluded, changed, lostAfter)
			fresh = true // a new view: some members may have applied the step and others not
			continue
		}
		if l.saver != nil && l.sched.Due(step, time.Now()) {
			if err := l.save(ctx, step); err != nil {
				return err
			}
		}
		step++
	}
	if err := l.st.finish(ctx, l.sess, group); err != nil {
		return err
	}
	// Every rank waits for a view, the members and those left out: this
	// one ends their training. A rank that is down is not waited for long.
	vctx, cancel := context.WithTimeout(ctx, min(cfg.StepTimeout, 2*lostAfter))
	defer cancel()
	all := make([]int, len(r.reps))
	for i := range all {
		all[i] = i
	}
	if err := l.ring.SendView(vctx, allreduce.View{Gen: viewGen(view.Gen), Step: step, Members: all, Stop: true}); err != nil {
		r.log.Info("telling every rank that training is over", "err", err)
	}
	return nil
}

// failed handles a step (or the sync of a view) that failed on rank 0:
// the ranks it found down are left out at once; otherwise it waits, at
// most the lost deadline, for the heartbeats to tell who is lost.
func (l *ringLoop) failed(ctx context.Context, err error, step int64, mu *sync.Mutex, excluded map[int]time.Time, changed <-chan struct{}, lostAfter time.Duration) {
	var pe *allreduce.PeerDownError
	if errors.As(err, &pe) {
		mu.Lock()
		for _, d := range pe.Down {
			excluded[d] = time.Now()
		}
		mu.Unlock()
		l.r.log.Warn("a step failed: leaving out the ranks that are down", "step", step, "down", pe.Peers, "err", err)
		return
	}
	// The heartbeats count a peer lost lostAfter after its last answer,
	// which they see within another half of it: wait for that, not less.
	l.r.log.Warn("a step failed; waiting for the heartbeats to tell who is lost", "step", step, "lost_after", lostAfter, "err", err)
	select {
	case <-changed:
	case <-time.After(2 * lostAfter):
	case <-ctx.Done():
	}
}

// follow is the loop of the other ranks: take rank 0's views and train
// among their members until rank 0 says training is over.
func (l *ringLoop) follow(ctx context.Context) error {
	r, cfg := l.r, l.r.cfg
	// Rank 0 leads: name it when it is lost, rather than only when the
	// wait for its next view times out.
	wctx, stop := context.WithCancel(ctx)
	m := &membership{cfg: cfg, log: r.log, peers: map[int]cluster.TaskID{0: r.reps[0]}, onChange: func(int, bool) {},
		waiting: "rank 0's next view (the chief leads the ring)"}
	watched := m.watch(wctx)
	defer func() { stop(); watched() }()
	gen := int64(-1)
	for {
		wctx, cancel := context.WithTimeout(ctx, cfg.WaitTimeout)
		var view allreduce.View
		// Rank 0 may have ended training while this rank was away (it
		// missed the last view): its marker says so (ended.go).
		err := untilTrainingEnds(wctx, cfg.CheckpointDir, l.steps, endedPoll, func(ctx context.Context) (err error) {
			view, err = l.ring.NextView(ctx, gen)
			return err
		})
		cancel()
		if errors.Is(err, errTrainingEnded) {
			r.log.Info("training ended while this rank was away; exiting", "task", cfg.Task.String(), "err", err)
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("estimator: %s: waiting for rank 0 (%s) to say which ranks train (wait timeout %v): %w", cfg.Task, r.reps[0], cfg.WaitTimeout, err)
		}
		gen = view.Gen
		if view.Stop {
			return nil
		}
		if !view.Has(r.index) {
			continue // left out: wait to be let back in
		}
		group, err := l.ring.Among(view)
		if err != nil {
			return err
		}
		newer := l.ring.ViewAfter(gen)
		if view.Sync {
			if err := l.sync(ctx, group, newer); err != nil {
				r.log.Warn("taking rank 0's model failed; waiting for its next view", "generation", gen, "err", err)
				continue
			}
		}
		for step := view.Step; step <= l.steps; step++ {
			if err := l.step(ctx, group, step, newer); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if errors.Is(err, train.ErrNaNLoss) {
					return err
				}
				r.log.Warn("a step failed; waiting for rank 0's next view", "step", step, "generation", gen, "err", err)
				break
			}
			if step == l.steps {
				if err := l.st.finish(ctx, l.sess, group); err != nil {
					r.log.Warn("the last average failed; waiting for rank 0's next view", "err", err)
				}
			}
		}
	}
}

// sync gives every member of group rank 0's model; cut, when closed,
// cuts it short (as in step).
func (l *ringLoop) sync(ctx context.Context, group *allreduce.Group, cut <-chan struct{}) error {
	bctx, cancel := context.WithTimeout(ctx, l.r.cfg.StepTimeout)
	defer cancel()
	go func() {
		select {
		case <-cut:
			cancel()
		case <-bctx.Done():
		}
	}()
	if err := l.st.broadcast(bctx, l.sess, group); err != nil {
		return fmt.Errorf("estimator: %s: taking rank 0's model: %w", l.r.cfg.Task, err)
	}
	if l.claims != nil {
		// Rank 0's input position goes with its model: in two float32s
		// of 22 bits each, exact up to 2^44 examples.
		const half = 1 << 22
		buf := []float32{float32(l.pos / half), float32(l.pos % half)}
		if err := group.Broadcast(bctx, "input_position", -1, 0, buf); err != nil {
			return fmt.Errorf("estimator: %s: taking rank 0's input position: %w", l.r.cfg.Task, err)
		}
		l.pos = int64(buf[0])*half + int64(buf[1])
	}
	l.st.restart()
	return nil
}

// step trains one step among group's members; newer, if set, cuts it short
// when it is closed (a member: rank 0 sent a newer view; rank 0: a member
// was lost).
func (l *ringLoop) step(ctx context.Context, group *allreduce.Group, step int64, newer <-chan struct{}) error {
	r, cfg := l.r, l.r.cfg
	l.rank = group.Rank()
	b, err := l.in.next()
	if err != nil {
		return fmt.Errorf("estimator: %sreading a batch: %w", r.who(), err)
	}
	if err := l.t.feeds(l.feeds, b); err != nil {
		return err
	}
	if cfg.StepDelay > 0 {
		select {
		case <-time.After(cfg.StepDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.StepTimeout)
	defer cancel()
	if newer != nil {
		go func() {
			select {
			case <-newer:
				// A view that ends training lets the last step finish.
				if v, ok := l.ring.NewestView(); !ok || !v.Stop || r.index == 0 {
					cancel()
				}
			case <-sctx.Done():
			}
		}()
	}
	stepStart := time.Now()
	loss, err := l.st.step(sctx, l.sess, l.feeds, group, step)
	if err != nil {
		return fmt.Errorf("estimator: %sstep %d: %w", r.who(), step, err)
	}
	r.observeStep(time.Since(stepStart), l.batch, step, loss)
	if math.IsNaN(loss) || math.IsInf(loss, 0) { // as the NaN guard of the ps strategies
		return fmt.Errorf("estimator: %sstep %d: %w (%v): lower the learning rate", r.who(), step, train.ErrNaNLoss, loss)
	}
	if l.claims != nil {
		l.claims.logTrained()
		l.pos += int64(group.Size() * l.batch)
	}
	l.loss = loss
	l.localSteps++
	l.window++
	if l.localSteps == l.warmup {
		l.trainStart = time.Now()
	}
	ranks := group.Size()
	if step%int64(cfg.LogEverySteps) == 0 || step == l.steps {
		now := time.Now()
		var line strings.Builder
		fmt.Fprintf(&line, "%sstep %d/%d", r.who(), step, l.steps)
		if n := r.stop.ExamplesPerEpoch; n > 0 {
			fmt.Fprintf(&line, "  epoch %.2f", float64(step*int64(l.batch*len(r.reps)))/float64(n))
		}
		fmt.Fprintf(&line, "  loss %.4f  %.0f examples/s (%d ranks)%s", loss,
			float64(l.window*l.batch*ranks)/now.Sub(l.windowStart).Seconds(), ranks, l.st.describe())
		fmt.Fprintln(cfg.Progress, line.String())
		l.window, l.windowStart = 0, now
	}
	l.lastMembers = ranks
	return nil
}

// save writes a checkpoint at step (rank 0).
func (l *ringLoop) save(ctx context.Context, step int64) error {
	made := tensor.New(l.gsType)
	made.SetFloat64At(0, float64(step))
	if _, err := l.sess.Run(ctx, map[graph.Output]*tensor.Tensor{l.stepsMade: made}, nil, []*graph.Node{l.setStep}); err != nil {
		return err
	}
	if l.position != nil {
		if err := l.position.write(ctx, l.sess, l.pos); err != nil {
			return err
		}
	}
	start := time.Now()
	if _, err := l.saver.Save(ctx, l.sess, step); err != nil {
		return fmt.Errorf("estimator: saving a checkpoint at step %d: %w", step, err)
	}
	l.r.observeCheckpoint(time.Since(start))
	l.sched.Saved(step, time.Now())
	return nil
}

// names names ranks by task, for the logs.
func (l *ringLoop) names(ranks []int) []string {
	out := make([]string, len(ranks))
	for i, k := range ranks {
		out[i] = l.r.reps[k].String()
	}
	return out
}
