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
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// ringLoop is the training loop of the collective strategies on an
// elastic ring. The lowest rank alive leads (rank 0, the chief, while it
// lives): it watches the other ranks with heartbeats and sends a view
// (generation, step, members) whenever the members change or a step
// failed; the members then agree on one model, that of the member that
// has trained the most steps (a rank that joins, or one whose last step
// was cut short, starts equal), and the steps go on among the members. A
// rank that is lost is left out within the lost deadline; one that comes
// back (the same process, or a new one with the same task id) is let back
// in at the current step. Every rank watches the others: when every rank
// below it is lost, it takes the lead (views, model, input position,
// checkpoints), and it hands the lead back when a lower rank sends a
// newer view (rank 0 restarted, or awake again). The leader saves the
// checkpoints; every rank restores the latest when it starts.
type ringLoop struct {
	r    *replica
	ring *allreduce.Ring
	st   collectiveStep
	sess *session.Session
	// ms runs the user's hooks around each step.
	ms    *train.MonitoredSession
	t     *tower
	in    *openInput
	steps int64
	batch int
	// setStep/stepsMade write the global step (the leader, for checkpoints).
	setStep   *graph.Node
	stepsMade graph.Output
	gsType    tensor.DType
	saver     *checkpoint.Saver
	sched     *checkpoint.Schedule

	// done is the last step this rank trained, or restored.
	done int64
	// mismatches counts the views in a row whose step mismatchAt failed
	// because the ranks' data did not match (disagree).
	mismatchAt int64
	mismatches int
	// leader: this rank leads now; ledLast: it led when training ended
	// (it saves the final checkpoint and marks the end).
	leader, ledLast bool

	// what the heartbeats say of the other ranks (run)
	mu       sync.Mutex
	lost     map[int]bool
	excluded map[int]time.Time // ranks a failed step found down, and when
	// lossCh is closed when a rank is lost: the leader's step in flight,
	// which would wait for it until the step deadline, is cut short.
	lossCh chan struct{}
	// changed is poked at every change (the leader's wait after a failed
	// step); wake is closed and replaced at every change (followers).
	changed chan struct{}
	wake    chan struct{}
	// answered says when the heartbeats last heard from a rank.
	answered func(int) time.Time

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

	// events receives the training events of each progress window (nil:
	// none); logFetches are fetched on the steps that end a window: the
	// model's logged tensors (logNames), then the merged summaries.
	events     *summary.Writer
	logNames   []string
	logFetches []graph.Output

	// claims, when set, reads the batch at the input position pos plus
	// this rank's place in the view (rank); position saves pos with the
	// model (the leader).
	claims   *claimer
	position *inputPosition
	pos      int64
	rank     int
}

// errLeadChanged ends lead or follow: this rank leads now, or a lower
// rank leads again.
var errLeadChanged = errors.New("estimator: the ring's leader changed")

// errHookStopped ends follow: a hook of this rank asked to stop.
var errHookStopped = errors.New("estimator: a hook asked to stop")

// viewGen is the generation of a new view: after the last this rank sent
// or took, and after any that a predecessor sent (a restarted chief), since
// the members only take newer views.
func viewGen(last int64) int64 { return max(last+1, time.Now().UnixMilli()) }

// run trains until the end of training, leading while every lower rank is
// lost and following the leader otherwise.
func (l *ringLoop) run(ctx context.Context) error {
	r := l.r
	peers := map[int]cluster.TaskID{}
	for i, t := range r.reps {
		if i != r.index {
			peers[i] = t
		}
	}
	l.lost, l.excluded = map[int]bool{}, map[int]time.Time{}
	l.lossCh, l.changed, l.wake = make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	m := &membership{cfg: r.cfg, log: r.log, peers: peers, onChange: l.onChange,
		waiting: "nothing: the ring re-forms without it (the lowest rank alive leads)"}
	mctx, stop := context.WithCancel(ctx)
	watched := m.watch(mctx)
	defer func() { stop(); watched() }()
	l.answered = m.answered
	for {
		var err error
		if l.leading() {
			if r.index != 0 {
				r.log.Warn("every lower rank is lost: this rank leads the ring", "rank", r.index, "step", l.done+1, "lost", m.lost())
			}
			err = l.lead(ctx)
		} else {
			err = l.follow(ctx)
		}
		if !errors.Is(err, errLeadChanged) {
			return err
		}
	}
}

// onChange records what the heartbeats say of rank i.
func (l *ringLoop) onChange(i int, alive bool) {
	l.mu.Lock()
	l.lost[i] = !alive
	if !alive {
		close(l.lossCh)
		l.lossCh = make(chan struct{})
	}
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// leading reports whether every rank below this one is lost.
func (l *ringLoop) leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.r.index {
		if !l.lost[i] {
			return false
		}
	}
	return true
}

// untilLeading returns a channel closed once this rank should lead
// (every lower rank lost), watched until ctx ends.
func (l *ringLoop) untilLeading(ctx context.Context) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		for {
			l.mu.Lock()
			wake := l.wake
			l.mu.Unlock()
			if l.leading() {
				close(out)
				return
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// foreignView returns the newest view received from another rank if it
// is newer than gen.
func (l *ringLoop) foreignView(gen int64) (allreduce.View, bool) {
	v, ok := l.ring.NewestView()
	if !ok || v.Gen <= gen {
		return allreduce.View{}, false
	}
	return v, true
}

// lead is the leader's loop, from the step after l.done.
func (l *ringLoop) lead(ctx context.Context) error {
	r, cfg := l.r, l.r.cfg
	me := r.index
	l.leader = true
	defer func() { l.leader = false }()
	// The members: this rank first, then every rank the heartbeats see
	// alive, lower ones too (a rank back from a pause may not count the
	// ranks below it lost again yet: it trains as a member until it, or
	// a rank below it, takes the lead back with a newer view).
	members := func() []int {
		l.mu.Lock()
		defer l.mu.Unlock()
		out := []int{me}
		for i := range len(r.reps) {
			if i == me || l.lost[i] {
				continue
			}
			if at, ok := l.excluded[i]; ok {
				// Let back in once it has answered since: a new process,
				// or the old one awake again.
				if l.answered(i).After(at) {
					delete(l.excluded, i)
				} else {
					continue
				}
			}
			out = append(out, i)
		}
		return out
	}
	_, lostAfter := cfg.heartbeats()
	// The views this rank took as a follower, or a predecessor sent: a
	// lower rank's newer view than these (and than this rank's own) takes
	// the lead back.
	var seen int64
	if v, ok := l.ring.NewestView(); ok {
		seen = v.Gen
	}
	if l.endedElsewhere(ctx) {
		if me != 0 {
			return nil
		}
		l.done = l.steps
	}
	var view allreduce.View
	var group *allreduce.Group
	fresh := true
	// The route of the view's all-reduces, when the ring has summation
	// servers: through them, or round the ring while one does not answer
	// (tried again every serverRetry, at a new view).
	ringOnly, probed := false, time.Time{}
	told := map[int]int64{} // the lower ranks sent a view, and which
	var telling sync.WaitGroup
	defer telling.Wait()
	for l.done < l.steps {
		if fresh && l.endedElsewhere(ctx) {
			// Another rank ended training while this one was away: no
			// view for ranks that have exited (each send would wait for
			// the step deadline).
			if me != 0 {
				return nil
			}
			l.done, group = l.steps, nil
			break
		}
		if v, ok := l.foreignView(max(seen, view.Gen)); ok && v.Members[0] < me {
			r.log.Info("a lower rank leads the ring again; following it", "leader", r.reps[v.Members[0]].String(), "generation", v.Gen)
			// It is alive, whatever the heartbeats have seen yet.
			l.mu.Lock()
			l.lost[v.Members[0]] = false
			l.mu.Unlock()
			return errLeadChanged
		}
		if view.RingOnly && time.Since(probed) >= serverRetry && !fresh {
			probed = time.Now()
			if len(l.ring.DownServers(ctx)) == 0 {
				fresh = true // the servers answer again: a view that goes through them
			}
		}
		if want := members(); fresh || !slices.Equal(want, view.Members) {
			if len(view.Members) > 0 { // not the first view
				r.log.Warn("the ring re-forms", "step", l.done+1, "members", l.names(want), "were", l.names(view.Members))
			}
			last := max(seen, view.Gen)
			if v, ok := l.ring.NewestView(); ok {
				last = max(last, v.Gen)
			}
			if l.ring.Servers() > 0 && len(view.Members) > 0 {
				// Not at the first view: servers still starting are
				// waited for by the operations, not taken for down.
				ringOnly, probed = l.route(ctx, ringOnly), time.Now()
			}
			view = allreduce.View{Gen: viewGen(last), Step: l.done + 1, Members: want, Sync: true, RingOnly: ringOnly}
			// A view is one small message: a member that has not taken it
			// within twice the lost deadline is down (a send to a task that
			// has exited waits for its whole deadline).
			vctx, cancel := context.WithTimeout(ctx, min(cfg.StepTimeout, 2*lostAfter))
			err := l.ring.SendView(vctx, view)
			cancel()
			if err != nil {
				r.log.Warn("a member did not take the new view", "generation", view.Gen, "err", err)
				if now := members(); !slices.Equal(now, want) {
					continue // the heartbeats have seen more meanwhile: a new view
				}
			}
			var gerr error
			if group, gerr = l.ring.Among(view); gerr != nil {
				return gerr
			}
			l.mu.Lock()
			cut := l.lossCh
			l.mu.Unlock()
			l.tellLower(ctx, view, told, &telling)
			if err := l.sync(ctx, group, cut, l.ring.ViewAfter(view.Gen)); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if l.endedElsewhere(ctx) {
					if me != 0 {
						return nil
					}
					l.done, group = l.steps, nil
					break
				}
				if derr := l.disagree(err, l.done+1); derr != nil {
					return derr
				}
				if _, ok := l.foreignView(view.Gen); !ok {
					l.failed(ctx, err, l.done+1, lostAfter, l.ring.ViewAfter(view.Gen))
				}
				continue
			}
			fresh = false
		}
		l.tellLower(ctx, view, told, &telling)
		l.mu.Lock()
		cut := l.lossCh
		l.mu.Unlock()
		if err := l.step(ctx, group, l.done+1, cut, l.ring.ViewAfter(view.Gen)); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if endsTraining(err) {
				return err
			}
			if derr := l.disagree(err, l.done+1); derr != nil {
				return derr
			}
			fresh = true // a new view: some members may have applied the step and others not
			if _, ok := l.foreignView(view.Gen); ok {
				continue // another rank sent a view: answer it at once
			}
			if l.endedElsewhere(ctx) {
				if me != 0 {
					return nil
				}
				l.done, group = l.steps, nil
				break
			}
			l.failed(ctx, err, l.done+1, lostAfter, l.ring.ViewAfter(view.Gen))
			continue
		}
		l.done++
		if l.ms.ShouldStop() && l.done < l.steps {
			r.log.Info("a hook asked to stop: training ends at this step", "step", l.done, "target", l.steps)
			l.steps = l.done
		}
		if l.saver != nil && l.sched.Due(l.done, time.Now()) {
			if err := l.save(ctx, l.done); err != nil {
				return err
			}
		}
	}
	if group != nil {
		if err := l.st.finish(ctx, l.sess, group); err != nil {
			return err
		}
	}
	l.ledLast = true
	// Every rank waits for a view, the members and those left out: this
	// one ends their training. A rank that is down is not waited for long.
	vctx, cancel := context.WithTimeout(ctx, min(cfg.StepTimeout, 2*lostAfter))
	defer cancel()
	all := []int{me}
	for i := range r.reps {
		if i != me {
			all = append(all, i)
		}
	}
	last := view.Gen
	if v, ok := l.ring.NewestView(); ok {
		last = max(last, v.Gen)
	}
	if err := l.ring.SendView(vctx, allreduce.View{Gen: viewGen(last), Step: l.done + 1, Members: all, Stop: true}); err != nil {
		r.log.Info("telling every rank that training is over", "err", err)
	}
	return nil
}

// tellLower sends view, in the background, to each lower rank that the
// heartbeats see alive and that was not sent it yet (an acting leader's):
// that rank, back, learns that another rank leads and takes the lead back
// at once, rather than when its own step or sync of an older view fails
// (two leaders otherwise trained apart until then; a chaos run saw rank 0
// train alone to the end while ranks 1 and 2 finished without it).
func (l *ringLoop) tellLower(ctx context.Context, view allreduce.View, told map[int]int64, wg *sync.WaitGroup) {
	var to []int
	l.mu.Lock()
	for j := range l.r.index {
		switch {
		case l.lost[j]:
			delete(told, j) // tell it again when it is back
		case told[j] != view.Gen:
			told[j] = view.Gen
			to = append(to, j)
		}
	}
	l.mu.Unlock()
	if len(to) == 0 {
		return
	}
	wg.Go(func() {
		tctx, cancel := context.WithTimeout(ctx, l.r.cfg.StepTimeout)
		defer cancel()
		if err := l.ring.SendViewTo(tctx, view, to); err != nil {
			l.r.log.Info("telling a lower rank that this one leads", "generation", view.Gen, "err", err)
		}
	})
}

// endedElsewhere reports whether another rank ended training while this
// one was away (the end-of-training marker names the target step): rank 0
// then takes the model of the final checkpoint, to keep and evaluate; any
// other rank has nothing left to do (it must not train on alone).
func (l *ringLoop) endedElsewhere(ctx context.Context) bool {
	if l.done >= l.steps {
		return false
	}
	if _, ok := trainingEnded(l.r.cfg.CheckpointDir, l.steps); !ok {
		return false
	}
	if l.r.index != 0 {
		l.r.log.Info("training ended while this rank was away; exiting", "task", l.r.cfg.Task.String())
		return true
	}
	restored, ok, err := l.saver.RestoreLatest(ctx, l.sess)
	if err != nil || !ok || restored < l.steps {
		l.r.log.Warn("training ended while this rank was away, but the final checkpoint cannot be restored; training on", "restored", restored, "err", err)
		return false
	}
	l.r.log.Info("another rank ended training while this one was away; taking the final checkpoint", "global_step", restored)
	return true
}

// serverRetry is how often a leader whose view goes round the ring probes
// the summation servers, to go through them again once they all answer.
const serverRetry = 5 * time.Second

// route returns the route of a new view on a ring with summation servers:
// round the ring (true) while one of them does not answer, through them
// otherwise. was is the route of the last view: a change is logged.
func (l *ringLoop) route(ctx context.Context, was bool) bool {
	down := l.ring.DownServers(ctx)
	switch {
	case len(down) > 0:
		names := make([]string, len(down))
		for i, d := range down {
			names[i] = l.ring.PeerName(d)
		}
		if !was {
			l.r.log.Warn("a summation server is down; the ranks go round the ring", "step", l.done+1, "down", names)
		}
		return true
	case was:
		l.r.log.Info("the summation servers answer again; the ranks sum through them", "step", l.done+1)
	}
	return false
}

// failed handles a step (or the sync of a view) that failed on the
// leader: the ranks it found down are left out at once; a failure that a
// member told of (it is alive, and waits for the next view) or one on the
// summation servers' side (the next view's route says whether they
// answer) needs no wait; otherwise it waits, at most the lost deadline,
// for the heartbeats to tell who is lost.
func (l *ringLoop) failed(ctx context.Context, err error, step int64, lostAfter time.Duration, newer <-chan struct{}) {
	var pe *allreduce.PeerDownError
	if errors.As(err, &pe) {
		l.mu.Lock()
		for _, d := range pe.Down {
			l.excluded[d] = time.Now()
		}
		l.mu.Unlock()
		l.r.log.Warn("a step failed: leaving out the ranks that are down", "step", step, "down", pe.Peers, "err", err)
		return
	}
	if errors.Is(err, allreduce.ErrServerFailed) || errors.Is(err, allreduce.ErrViewFailed) {
		l.r.log.Warn("a step failed; a new view", "step", step, "err", err)
		return
	}
	// The heartbeats count a peer lost lostAfter after its last answer,
	// which they see within another half of it: wait for that, not less.
	l.r.log.Warn("a step failed; waiting for the heartbeats to tell who is lost", "step", step, "lost_after", lostAfter, "err", err)
	select {
	case <-l.changed:
	case <-newer: // another rank leads: answer it at once
	case <-time.After(2 * lostAfter):
	case <-ctx.Done():
	}
}

// maxMismatches bounds the views in a row whose same step fails because
// the ranks' data do not match (allreduce.ErrMismatch: ranks that build
// different models, or a peer that sends garbage). A new view does not
// mend that, and the loop re-formed the ring for ever, which looked like a
// hang under --quiet.
const maxMismatches = 3

// disagree counts a failure of step (its sync or the step itself); it
// returns the error that ends training once the ranks' data did not match
// in maxMismatches views in a row, else nil.
func (l *ringLoop) disagree(err error, step int64) error {
	if !errors.Is(err, allreduce.ErrMismatch) {
		l.mismatches = 0
		return nil
	}
	if step != l.mismatchAt {
		l.mismatchAt, l.mismatches = step, 0
	}
	if l.mismatches++; l.mismatches < maxMismatches {
		return nil
	}
	return fmt.Errorf("estimator: %s: step %d failed in %d views in a row because the ranks' data do not match; "+
		"do all ranks run the same model, with the same flags? %w", l.r.cfg.Task, step, l.mismatches, err)
}

// follow is the loop of the other ranks: take the leader's views and
// train among their members until the leader says training is over, or
// until every lower rank is lost (errLeadChanged: this one leads).
func (l *ringLoop) follow(ctx context.Context) error {
	r, cfg := l.r, l.r.cfg
	gen := int64(-1)
	for {
		if l.leading() {
			return errLeadChanged
		}
		wctx, cancel := context.WithTimeout(ctx, cfg.WaitTimeout)
		var view allreduce.View
		// The leader may have ended training while this rank was away
		// (it missed the last view): its marker says so (ended.go).
		err := untilTrainingEnds(wctx, cfg.CheckpointDir, l.steps, endedPoll, func(ctx context.Context) (err error) {
			view, err = l.nextView(ctx, gen)
			return err
		})
		cancel()
		if errors.Is(err, errTrainingEnded) {
			r.log.Info("training ended while this rank was away; exiting", "task", cfg.Task.String(), "err", err)
			return nil
		}
		if errors.Is(err, errLeadChanged) {
			return err
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("estimator: %s: waiting for the lowest rank alive to say which ranks train (wait timeout %v): %w", cfg.Task, cfg.WaitTimeout, err)
		}
		gen = view.Gen
		if view.Stop {
			return nil
		}
		if !view.Has(r.index) {
			continue // left out: wait to be let back in
		}
		if err := l.followView(ctx, view); err != nil {
			if errors.Is(err, errHookStopped) {
				return nil
			}
			return err
		}
	}
}

// followView trains among the members of view until a step fails or the
// last step is done; it returns only the errors that end training.
func (l *ringLoop) followView(ctx context.Context, view allreduce.View) error {
	r := l.r
	group, err := l.ring.Among(view)
	if err != nil {
		return err
	}
	vctx, stop := context.WithCancel(ctx)
	defer stop()
	newer, lead := l.ring.ViewAfter(view.Gen), l.untilLeading(vctx)
	if view.Sync {
		if err := l.sync(ctx, group, newer, lead); err != nil {
			if derr := l.disagree(err, l.done+1); derr != nil {
				return derr
			}
			r.log.Warn("taking the members' model failed; waiting for the next view", "generation", view.Gen, "err", err)
			return nil
		}
	} else {
		l.done = view.Step - 1
	}
	for l.done < l.steps {
		if err := l.step(ctx, group, l.done+1, newer, lead); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if endsTraining(err) {
				return err
			}
			if derr := l.disagree(err, l.done+1); derr != nil {
				return derr
			}
			r.log.Warn("a step failed; waiting for the next view", "step", l.done+1, "generation", view.Gen, "err", err)
			return nil
		}
		l.done++
		if l.ms.ShouldStop() && l.done < l.steps {
			// Training ends where the leader's hooks say; this rank's
			// leave it, and the ring re-forms without it.
			r.log.Info("a hook asked to stop: this rank leaves the ring", "step", l.done, "target", l.steps)
			l.steps = l.done
			return errHookStopped
		}
		if l.done == l.steps {
			if err := l.st.finish(ctx, l.sess, group); err != nil {
				r.log.Warn("the last average failed; waiting for the next view", "err", err)
			}
		}
	}
	return nil
}

// nextView waits for a view newer than gen; it returns errLeadChanged
// once this rank should lead.
func (l *ringLoop) nextView(ctx context.Context, gen int64) (allreduce.View, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lead := l.untilLeading(ctx)
	go func() {
		select {
		case <-lead:
			cancel()
		case <-ctx.Done():
		}
	}()
	v, err := l.ring.NextView(ctx, gen)
	if err != nil {
		select {
		case <-lead:
			return v, errLeadChanged
		default:
		}
	}
	return v, err
}

// sync gives every member of group one state: the model and the input
// position of the member that has trained the most steps (the leader on
// a tie), and that count of steps done. Any of cuts, when closed, cuts it
// short (as in step).
func (l *ringLoop) sync(ctx context.Context, group *allreduce.Group, cuts ...<-chan struct{}) error {
	bctx, cancel := context.WithTimeout(ctx, l.r.cfg.StepTimeout)
	defer cancel()
	for _, cut := range cuts {
		go func() {
			select {
			case <-cut:
				cancel()
			case <-bctx.Done():
			}
		}()
	}
	// Integers go in two float32s of 22 bits each: exact up to 2^44.
	const half = 1 << 22
	done := make([]float32, 2*group.Size())
	done[2*group.Rank()], done[2*group.Rank()+1] = float32(l.done/half), float32(l.done%half)
	if err := group.AllReduce(bctx, "steps_done", -1, done); err != nil {
		return fmt.Errorf("estimator: %s: telling the members' steps: %w", l.r.cfg.Task, err)
	}
	root, most := 0, int64(-1)
	for i := range group.Size() {
		if d := int64(done[2*i])*half + int64(done[2*i+1]); d > most {
			root, most = i, d
		}
	}
	if err := l.st.broadcast(bctx, l.sess, rooted{group, root}); err != nil {
		return fmt.Errorf("estimator: %s: taking the model of the member at %d steps (%s): %w", l.r.cfg.Task, most, l.r.reps[group.Members()[root]], err)
	}
	if l.claims != nil {
		// The input position goes with the model.
		buf := []float32{float32(l.pos / half), float32(l.pos % half)}
		if err := group.Broadcast(bctx, "input_position", -1, root, buf); err != nil {
			return fmt.Errorf("estimator: %s: taking the members' input position: %w", l.r.cfg.Task, err)
		}
		l.pos = int64(buf[0])*half + int64(buf[1])
	}
	if most != l.done {
		l.r.log.Info("took the model of the member furthest on", "member", l.r.reps[group.Members()[root]].String(), "steps_done", most, "had", l.done)
	}
	l.done = most
	// The global step counts the steps done, on every member alike: a
	// learning-rate schedule reads it, and members at different rates
	// would apply the same mean gradient differently.
	if err := l.setGlobalStep(bctx, most); err != nil {
		return fmt.Errorf("estimator: %s: setting the global step to the member's %d: %w", l.r.cfg.Task, most, err)
	}
	l.st.restart()
	return nil
}

// setGlobalStep writes step to the rank's global step.
func (l *ringLoop) setGlobalStep(ctx context.Context, step int64) error {
	made := tensor.New(l.gsType)
	made.SetFloat64At(0, float64(step))
	_, err := l.sess.Run(ctx, map[graph.Output]*tensor.Tensor{l.stepsMade: made}, nil, []*graph.Node{l.setStep})
	return err
}

// rooted is a group whose broadcasts come from the member at root.
type rooted struct {
	*allreduce.Group
	root int
}

func (g rooted) Broadcast(ctx context.Context, name string, round int64, _ int, data []float32) error {
	return g.Group.Broadcast(ctx, name, round, g.root, data)
}

// step trains one step among group's members; any of cuts, when closed,
// cuts it short (a member: a newer view came, or this rank should lead;
// the leader: a member was lost, or another rank sent a view).
func (l *ringLoop) step(ctx context.Context, group *allreduce.Group, step int64, cuts ...<-chan struct{}) error {
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
	leader := l.leader
	for _, cut := range cuts {
		go func() {
			select {
			case <-cut:
				// A view that ends training lets a member's last step
				// finish.
				if v, ok := l.ring.NewestView(); !ok || !v.Stop || leader {
					cancel()
				}
			case <-sctx.Done():
			}
		}()
	}
	logging := step%int64(cfg.LogEverySteps) == 0 || step == l.steps
	var own []graph.Output
	if logging {
		own = l.logFetches
	}
	stepStart := time.Now()
	var loss float64
	var logged []*tensor.Tensor
	var stepErr error
	err = l.ms.RunStep(sctx, func(ctx context.Context, extra []graph.Output) (int64, []*tensor.Tensor, error) {
		var vals []*tensor.Tensor
		loss, vals, stepErr = l.st.step(ctx, l.sess, l.feeds, group, step, append(own[:len(own):len(own)], extra...))
		if stepErr == nil && (math.IsNaN(loss) || math.IsInf(loss, 0)) { // as the NaN guard of the ps strategies
			stepErr = fmt.Errorf("%w (%v): lower the learning rate", train.ErrNaNLoss, loss)
		}
		if stepErr != nil {
			return 0, nil, stepErr
		}
		r.observeStep(time.Since(stepStart), l.batch, step, loss)
		logged = vals[:len(own)]
		return step, vals[len(own):], nil
	})
	if err != nil {
		if stepErr == nil { // a hook failed: no view mends that
			err = &hookError{err}
		}
		return fmt.Errorf("estimator: %sstep %d: %w", r.who(), step, err)
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
	if logging {
		now := time.Now()
		elapsed := now.Sub(l.windowStart).Seconds()
		rate := float64(l.window*l.batch*ranks) / elapsed
		var line strings.Builder
		fmt.Fprintf(&line, "%sstep %d/%d", r.who(), step, l.steps)
		if n := r.stop.ExamplesPerEpoch; n > 0 {
			fmt.Fprintf(&line, "  epoch %.2f", float64(step*int64(l.batch*len(r.reps)))/float64(n))
		}
		fmt.Fprintf(&line, "  loss %.4f  %.0f examples/s (%d ranks)%s", loss, rate, ranks, l.st.describe())
		for i, n := range l.logNames {
			fmt.Fprintf(&line, "  %s %.4f", n, logged[i].Float64At(0))
		}
		fmt.Fprintln(cfg.Progress, line.String())
		writeWindow(l.events, window{globalStep: step, loss: loss, examplesPerSec: rate, stepsPerSec: float64(l.window) / elapsed,
			logNames: l.logNames, logged: logged, summaries: logged[len(l.logNames):]})
		l.window, l.windowStart = 0, now
	}
	l.lastMembers = ranks
	return nil
}

// save writes a checkpoint at step (the leader).
func (l *ringLoop) save(ctx context.Context, step int64) error {
	if err := l.setGlobalStep(ctx, step); err != nil {
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

// hookError is a step's error that came from a user's hook: training
// ends, as under every strategy, rather than the ring re-forming.
type hookError struct{ err error }

func (e *hookError) Error() string { return e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }

// endsTraining reports whether a step's error ends training on this rank
// whatever the view: a non-finite loss, or a hook that failed.
func endsTraining(err error) bool {
	return errors.Is(err, train.ErrNaNLoss) || errors.As(err, new(*hookError))
}

// names names ranks by task, for the logs.
func (l *ringLoop) names(ranks []int) []string {
	out := make([]string, len(ranks))
	for i, k := range ranks {
		out[i] = l.r.reps[k].String()
	}
	return out
}
