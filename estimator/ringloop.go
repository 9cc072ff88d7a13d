package estimator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator/internal/ringstate"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/session"
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
	st   RingStep
	sess *session.Session
	// ms runs the user's hooks around each step.
	ms *train.MonitoredSession
	// towers are the rank's model, one per GPU, each reading its input.
	towers []*tower
	ins    []*openInput
	steps  int64
	batch  int
	// setStep/stepsMade write the global step (the leader, for checkpoints).
	setStep   *graph.Node
	stepsMade graph.Output
	gsType    tensor.DType
	saver     *checkpoint.Saver
	sched     *checkpoint.Schedule

	// done is the last step this rank trained, or restored (the ring
	// machine's count, mirrored for sync and the final checkpoint).
	done int64
	// gen is the generation of the view of the operation in flight;
	// lineage that of the view in which the model's newest step was
	// trained (0: restored, or none yet). Of two members that have done
	// as many steps, a sync takes the model of the newer lineage: a rank
	// whose step finished after the others had given it up (stopped
	// mid-step) does not bring that step back over theirs.
	gen, lineage int64
	// leader: this rank leads now; ledLast: it led when training ended
	// (it saves the final checkpoint and marks the end).
	leader, ledLast bool

	feeds map[graph.Output]*tensor.Tensor
	// prog counts the steps, prints the progress lines and writes the
	// training events; lastMembers is the size of the last step's ring.
	prog        *progress
	lastMembers int

	// claims, when set, reads the batch at the input position pos plus
	// this rank's place in the view (rank); position saves pos with the
	// model (the leader).
	claims   *claimer
	position *inputPosition
	pos      int64
	rank     int
}

// serverRetry is how often a leader whose view goes round the ring probes
// the summation servers, to go through them again once they all answer.
const serverRetry = 5 * time.Second

// run trains until the end of training. The ring's state machine
// (ringstate) decides who leads, which views are sent and taken, when the
// ring re-forms and when training ends; run is its shell: it turns the
// heartbeats, the views received, the end-of-training marker, timers and
// the outcomes of its operations into events, and carries out the
// machine's actions on the ring, one operation at a time.
func (l *ringLoop) run(ctx context.Context) error {
	r, cfg := l.r, l.r.cfg
	_, lostAfter := cfg.heartbeats()
	m, err := ringstate.New(ringstate.Config{Rank: r.index, Ranks: len(r.reps), Steps: l.steps, LostAfter: lostAfter,
		WaitTimeout: cfg.WaitTimeout, Servers: l.ring.Servers() > 0, ServerRetry: serverRetry, MaxMismatches: maxMismatches})
	if err != nil {
		return fmt.Errorf("estimator: %s: %w", cfg.Task, err)
	}
	sh := &ringShell{l: l, m: m, lostAfter: lostAfter, ready: make(chan struct{}, 1)}
	peers := map[int]cluster.TaskID{}
	for i, t := range r.reps {
		if i != r.index {
			peers[i] = t
		}
	}
	sh.hb = &membership{cfg: cfg, log: r.log, peers: peers, onChange: sh.onChange, onAnswer: sh.onAnswer,
		waiting: "nothing: the ring re-forms without it (the lowest rank alive leads)"}
	wctx, stop := context.WithCancel(ctx)
	sh.bg = wctx
	var bg sync.WaitGroup
	watched := sh.hb.watch(wctx)
	defer func() {
		stop()
		sh.cancelOp()
		watched()
		bg.Wait()
		sh.ops.Wait()
		sh.telling.Wait()
		sh.leaving.Wait()
		if sh.timer != nil {
			sh.timer.Stop()
		}
	}()
	// The views other ranks send, newest first.
	bg.Go(func() {
		for gen := int64(-1); ; {
			v, err := l.ring.NextView(wctx, gen)
			if err != nil {
				if wctx.Err() == nil { // the ring was closed
					sh.mu.Lock()
					sh.viewsErr = err
					sh.mu.Unlock()
					sh.push(ringstate.ViewsClosed{})
				}
				return
			}
			gen = v.Gen
			sh.push(ringstate.ViewReceived{View: v})
		}
	})
	// The members' word that they left a view: the leader does not wait
	// for their part of its operations.
	bg.Go(func() {
		for gen := int64(-1); ; {
			d, err := l.ring.NextDeparture(wctx, gen)
			if err != nil {
				return
			}
			gen = d.Gen
			sh.push(ringstate.MemberLeft{Gen: d.Gen, Rank: d.Rank})
		}
	})
	// The end-of-training marker: a follower waiting for a view that
	// never comes (it missed the view that ends training) exits on it.
	if dir, target := cfg.CheckpointDir, l.steps; dir != "" {
		bg.Go(func() {
			tick := time.NewTicker(endedPoll)
			defer tick.Stop()
			for {
				if _, ok := trainingEnded(dir, target); ok {
					sh.push(ringstate.MarkerSeen{})
				}
				select {
				case <-wctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	sh.push(ringstate.Start{Done: l.done})
	for {
		for _, ev := range sh.take() {
			if end, err := sh.handle(ctx, ev); end {
				return err
			}
		}
		select {
		case <-sh.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ringShell carries out the ring machine's actions for a ringLoop.
type ringShell struct {
	l         *ringLoop
	m         *ringstate.Machine // stepped by run's goroutine only
	hb        *membership
	lostAfter time.Duration

	mu    sync.Mutex
	inbox []ringstate.Event
	ready chan struct{} // poked when inbox fills
	// viewsErr is why no view can come any more (the ring was closed).
	viewsErr error

	// The operation in flight (one at a time): cutOff cuts it short.
	ops    sync.WaitGroup
	opMu   sync.Mutex
	cutOff func()
	// lastErr is the last operation's error: the one that ends training
	// when the machine says so.
	lastErr error
	group   *allreduce.Group
	// view is the last view this rank sent, first whether the next is
	// the first of this lead (for the logs); telling waits for the
	// background sends to lower ranks.
	view    allreduce.View
	first   bool
	telling sync.WaitGroup
	timer   *time.Timer
	// bg ends when run returns: the notices that this rank left a view
	// (leaving) go on in the background until then at most.
	bg      context.Context
	leaving sync.WaitGroup
	// downServers names the summation servers the last probe found down.
	downServers []string
}

func (sh *ringShell) push(ev ringstate.Event) {
	sh.mu.Lock()
	sh.inbox = append(sh.inbox, ev)
	sh.mu.Unlock()
	select {
	case sh.ready <- struct{}{}:
	default:
	}
}

func (sh *ringShell) take() []ringstate.Event {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	evs := sh.inbox
	sh.inbox = nil
	return evs
}

// onChange and onAnswer are the heartbeats' reports.
func (sh *ringShell) onChange(i int, alive bool) {
	if alive {
		sh.push(ringstate.PeerAlive{Rank: i})
	} else {
		sh.push(ringstate.PeerLost{Rank: i})
	}
}

func (sh *ringShell) onAnswer(i int) { sh.push(ringstate.Answered{Rank: i}) }

// handle steps the machine with ev and carries out its actions; the
// answers to its questions are stepped at once. end says that training
// is over on this rank, with err.
func (sh *ringShell) handle(ctx context.Context, ev ringstate.Event) (end bool, err error) {
	queue := []ringstate.Event{ev}
	for len(queue) > 0 {
		ev := queue[0]
		queue = queue[1:]
		switch ev.(type) {
		case ringstate.SyncFailed, ringstate.StepFailed:
			if ctx.Err() != nil { // cancelled, not failed
				return true, ctx.Err()
			}
		}
		for _, a := range sh.m.Step(time.Now(), ev) {
			answer, end, err := sh.do(ctx, a)
			if end {
				return true, err
			}
			if answer != nil {
				queue = append([]ringstate.Event{answer}, queue...)
			}
		}
	}
	return false, nil
}

// failure classifies an operation's error for the machine.
func failure(err error) ringstate.Failure {
	var f ringstate.Failure
	var pe *allreduce.PeerDownError
	if errors.As(err, &pe) {
		f.PeerDown, f.Down = true, slices.Clone(pe.Down)
	}
	f.Notice = errors.Is(err, allreduce.ErrServerFailed) || errors.Is(err, allreduce.ErrViewFailed)
	f.Mismatch = errors.Is(err, allreduce.ErrMismatch)
	f.Fatal = endsTraining(err)
	return f
}

// do carries out action a: a question's answer is returned, an operation
// starts in the background and reports when done.
func (sh *ringShell) do(ctx context.Context, a ringstate.Action) (answer ringstate.Event, end bool, err error) {
	l, r := sh.l, sh.l.r
	switch a := a.(type) {
	case ringstate.Lead:
		l.leader, sh.first = true, true
		if r.index != 0 {
			r.log.Warn("every lower rank is lost: this rank leads the ring", "rank", r.index, "step", sh.m.Done()+1, "lost", sh.hb.lost())
		}
	case ringstate.Follow:
		sh.follow(a)
	case ringstate.CheckEnded:
		return ringstate.Ended{Yes: sh.endedElsewhere(ctx, a.Final)}, false, nil
	case ringstate.ProbeServers:
		return sh.probeServers(ctx), false, nil
	case ringstate.SendView:
		if !a.Wait {
			sh.tell(ctx, a.View, a.To)
			return nil, false, nil
		}
		sh.sendView(ctx, a.View)
	case ringstate.Join:
		group, err := l.ring.Among(a.View)
		if err != nil {
			return nil, true, err
		}
		sh.group = group
	case ringstate.Sync:
		sh.startSync(ctx)
	case ringstate.Train:
		sh.startStep(ctx, a.Step)
	case ringstate.Finish:
		sh.startFinish(ctx)
	case ringstate.Cut:
		sh.cancelOp()
	case ringstate.Exclude:
		sh.exclude(a)
	case ringstate.Leave:
		sh.leave(a.View)
	case ringstate.Readmit:
	case ringstate.Checkpoint:
		l.done, l.steps = a.Step, sh.m.Steps()
		if l.saver != nil && l.sched.Due(a.Step, time.Now()) {
			if err := l.save(ctx, a.Step); err != nil {
				return nil, true, err
			}
		}
	case ringstate.WakeAt:
		sh.wakeAt(a.At)
	case ringstate.End:
		return nil, true, sh.end(a)
	}
	return nil, false, nil
}

// follow makes this rank a member; a lower rank that leads again is logged.
func (sh *ringShell) follow(a ringstate.Follow) {
	l, r := sh.l, sh.l.r
	l.leader = false
	if a.Leader >= 0 {
		gen := int64(0)
		if nv, ok := l.ring.NewestView(); ok {
			gen = nv.Gen
		}
		r.log.Info("a lower rank leads the ring again; following it", "leader", r.reps[a.Leader].String(), "generation", gen)
	}
}

// probeServers asks the summation servers whether they answer.
func (sh *ringShell) probeServers(ctx context.Context) ringstate.Event {
	down := sh.l.ring.DownServers(ctx)
	sh.downServers = sh.downServers[:0]
	for _, d := range down {
		sh.downServers = append(sh.downServers, sh.l.ring.PeerName(d))
	}
	return ringstate.ServersProbed{Down: len(down) > 0}
}

// startSync starts the sync of the view's members: one model, that of the
// member furthest on.
func (sh *ringShell) startSync(ctx context.Context) {
	l := sh.l
	l.done, l.gen = sh.m.Done(), sh.m.View().Gen
	gen, leader, step := l.gen, l.leader, sh.m.Done()+1
	sh.start(ctx, func(ctx context.Context, cut <-chan struct{}) ringstate.Event {
		if err := l.sync(ctx, sh.group, cut); err != nil {
			sh.lastErr = err
			sh.failed(leader, "taking the members' model failed; waiting for the next view", gen, step, err)
			return ringstate.SyncFailed{Failure: failure(err)}
		}
		return ringstate.Synced{Done: l.done}
	})
}

// startStep starts the training step step among the view's members; a
// hook that asks to stop ends training there (the leader) or takes this
// rank out of the ring.
func (sh *ringShell) startStep(ctx context.Context, step int64) {
	l, r := sh.l, sh.l.r
	l.done, l.gen = sh.m.Done(), sh.m.View().Gen
	gen, leader := l.gen, l.leader
	sh.start(ctx, func(ctx context.Context, cut <-chan struct{}) ringstate.Event {
		if err := l.step(ctx, sh.group, step, cut); err != nil {
			sh.lastErr = err
			if !endsTraining(err) {
				sh.failed(leader, "a step failed; waiting for the next view", gen, step, err)
			}
			return ringstate.StepFailed{Step: step, Failure: failure(err)}
		}
		stop := l.ms.ShouldStop() && step < l.steps
		if stop {
			if leader {
				r.log.Info("a hook asked to stop: training ends at this step", "step", step, "target", l.steps)
			} else {
				r.log.Info("a hook asked to stop: this rank leaves the ring", "step", step, "target", l.steps)
			}
		}
		return ringstate.Trained{Step: step, Stop: stop}
	})
}

// startFinish starts the strategy's work after the last step (a last
// average).
func (sh *ringShell) startFinish(ctx context.Context) {
	l, r := sh.l, sh.l.r
	l.done = sh.m.Done()
	leader := l.leader
	sh.start(ctx, func(ctx context.Context, _ <-chan struct{}) ringstate.Event {
		if err := l.st.Finish(ctx, l.sess, sh.group); err != nil {
			sh.lastErr = err
			if !leader {
				r.log.Warn("the last average failed; waiting for the next view", "err", err)
			}
			return ringstate.Finished{Failed: true}
		}
		return ringstate.Finished{}
	})
}

// exclude logs the ranks that the next view leaves out, and why.
func (sh *ringShell) exclude(a ringstate.Exclude) {
	names := make([]string, len(a.Ranks))
	for i, k := range a.Ranks {
		names[i] = sh.l.ring.PeerName(k)
	}
	log, step := sh.l.r.log, sh.m.Done()+1
	switch a.Cause {
	case ringstate.NotTaken:
		log.Warn("members did not take the new view: leaving them out until they answer again", "step", step, "ranks", names)
	case ringstate.LeftAgain:
		log.Warn("members left two views in a row: leaving them out until they answer again", "step", step, "ranks", names)
	default:
		log.Warn("a step failed: leaving out the ranks that are down", "step", step, "down", names, "err", sh.lastErr)
	}
}

// leave tells the other members of view v, in the background, that this
// rank left it: an operation of v failed here, and they would wait for
// this rank's part until their step deadline. The notice is sent again
// to a member that does not take it (one whose connection still fails)
// until it does, a newer view comes, or twice the lost deadline passes.
func (sh *ringShell) leave(v allreduce.View) {
	l, cfg := sh.l, sh.l.r.cfg
	sh.leaving.Go(func() {
		ctx, cancel := context.WithTimeout(sh.bg, min(cfg.StepTimeout, 2*sh.lostAfter))
		defer cancel()
		if err := l.ring.LeaveView(ctx, v); err != nil && sh.bg.Err() == nil {
			l.r.log.Info("telling the members that this rank left the view", "generation", v.Gen, "err", err)
		}
	})
}

// wakeAt sets the machine's timer to at.
func (sh *ringShell) wakeAt(at time.Time) {
	if sh.timer != nil {
		sh.timer.Stop()
	}
	if sh.l.leader {
		// The heartbeats count a peer lost lostAfter after its last
		// answer, which they see within another half of it.
		sh.l.r.log.Warn("a step failed; waiting for the heartbeats to tell who is lost", "step", sh.m.Done()+1, "lost_after", sh.lostAfter, "err", sh.lastErr)
	}
	sh.timer = time.AfterFunc(time.Until(at), func() { sh.push(ringstate.Tick{}) })
}

// failed logs a failed operation of view gen: a follower's with msg; the
// leader's when a member told of it or the summation servers failed (the
// others are logged as the machine decides: ranks left out, or a wait for
// the heartbeats).
func (sh *ringShell) failed(leader bool, msg string, gen, step int64, err error) {
	switch {
	case !leader:
		sh.l.r.log.Warn(msg, "step", step, "generation", gen, "err", err)
	case errors.As(err, new(*allreduce.PeerDownError)):
	case errors.Is(err, allreduce.ErrServerFailed) || errors.Is(err, allreduce.ErrViewFailed):
		sh.l.r.log.Warn("a step failed; a new view", "step", step, "err", err)
	}
}

// end carries out the machine's end: the error that ends training, if any.
func (sh *ringShell) end(a ringstate.End) error {
	l, r, cfg := sh.l, sh.l.r, sh.l.r.cfg
	sh.telling.Wait()
	l.done, l.steps, l.ledLast = sh.m.Done(), sh.m.Steps(), a.Led
	switch a.Reason {
	case ringstate.Away:
		r.log.Info("training ended while this rank was away; exiting", "task", cfg.Task.String())
	case ringstate.ByMismatch:
		return fmt.Errorf("estimator: %s: step %d failed in %d views in a row because the ranks' data do not match; "+
			"do all ranks run the same model, with the same flags? %w", cfg.Task, a.Step, a.Mismatches, sh.lastErr)
	case ringstate.ByFatal:
		return sh.lastErr
	case ringstate.WaitExpired:
		return fmt.Errorf("estimator: %s: waiting for the lowest rank alive to say which ranks train (wait timeout %v): %w", cfg.Task, cfg.WaitTimeout, context.DeadlineExceeded)
	case ringstate.Closed:
		sh.mu.Lock()
		err := sh.viewsErr
		sh.mu.Unlock()
		return fmt.Errorf("estimator: %s: waiting for the lowest rank alive to say which ranks train (wait timeout %v): %w", cfg.Task, cfg.WaitTimeout, err)
	}
	return nil
}

// start runs op, an operation of the machine's, in the background; its
// event is pushed when it is done. Cut closes its cut channel.
func (sh *ringShell) start(ctx context.Context, op func(ctx context.Context, cut <-chan struct{}) ringstate.Event) {
	cut := make(chan struct{})
	var once sync.Once
	sh.opMu.Lock()
	sh.cutOff = func() { once.Do(func() { close(cut) }) }
	sh.opMu.Unlock()
	sh.ops.Go(func() { sh.push(op(ctx, cut)) })
}

// cancelOp cuts the operation in flight short.
func (sh *ringShell) cancelOp() {
	sh.opMu.Lock()
	defer sh.opMu.Unlock()
	if sh.cutOff != nil {
		sh.cutOff()
	}
}

// sendView sends the leader's view v to its members in the background:
// a view is one small message, and a member that has not taken it within
// twice the lost deadline is down (a send to a task that has exited waits
// for its whole deadline).
func (sh *ringShell) sendView(ctx context.Context, v allreduce.View) {
	l, r, cfg := sh.l, sh.l.r, sh.l.r.cfg
	if !v.Stop {
		if !sh.first {
			r.log.Warn("the ring re-forms", "step", v.Step, "members", l.names(v.Members), "were", l.names(sh.view.Members))
			if v.RingOnly && !sh.view.RingOnly {
				r.log.Warn("a summation server is down; the ranks go round the ring", "step", v.Step, "down", sh.downServers)
			}
			if !v.RingOnly && sh.view.RingOnly {
				r.log.Info("the summation servers answer again; the ranks sum through them", "step", v.Step)
			}
		}
		sh.first, sh.view = false, v
	}
	sh.start(ctx, func(ctx context.Context, _ <-chan struct{}) ringstate.Event {
		vctx, cancel := context.WithTimeout(ctx, min(cfg.StepTimeout, 2*sh.lostAfter))
		defer cancel()
		err := l.ring.SendView(vctx, v)
		var missing []int
		if err != nil {
			if v.Stop {
				r.log.Info("telling every rank that training is over", "err", err)
			} else {
				r.log.Warn("a member did not take the new view", "generation", v.Gen, "err", err)
			}
			var nt *allreduce.ViewNotTakenError
			if errors.As(err, &nt) {
				missing = nt.Ranks
			}
		}
		return ringstate.ViewSent{Gen: v.Gen, Failed: err != nil, Missing: missing}
	})
}

// tell sends view to the lower ranks to, in the background: back, they
// learn that another rank leads and take the lead back at once.
func (sh *ringShell) tell(ctx context.Context, view allreduce.View, to []int) {
	sh.telling.Go(func() {
		tctx, cancel := context.WithTimeout(ctx, sh.l.r.cfg.StepTimeout)
		defer cancel()
		if err := sh.l.ring.SendViewTo(tctx, view, to); err != nil {
			sh.l.r.log.Info("telling a lower rank that this one leads", "generation", view.Gen, "err", err)
		}
	})
}

// endedElsewhere reports whether another rank ended training while this
// one was away (the end-of-training marker names the target step). final
// (rank 0, leading): it takes the model of the final checkpoint, to keep
// and evaluate, and trains on if it cannot.
func (sh *ringShell) endedElsewhere(ctx context.Context, final bool) bool {
	l := sh.l
	if _, ok := trainingEnded(l.r.cfg.CheckpointDir, l.steps); !ok {
		return false
	}
	if !final {
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

// maxMismatches bounds the views in a row whose same step fails because
// the ranks' data do not match (allreduce.ErrMismatch: ranks that build
// different models, or a peer that sends garbage). A new view does not
// mend that, and the loop re-formed the ring for ever, which looked like a
// hang under --quiet.
const maxMismatches = 3

// sync gives every member of group one state: the model and the input
// position of the member that has trained the most steps (on a tie, the
// one whose newest step was trained in the newest view, then the
// leader), and that count of steps done. Any of cuts, when closed, cuts it
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
	// Each member's steps done and lineage; a view's generation is at
	// most the clock's milliseconds and some more, well within 2^44.
	done := make([]float32, 4*group.Size())
	me := done[4*group.Rank():]
	me[0], me[1], me[2], me[3] = float32(l.done/half), float32(l.done%half), float32(l.lineage/half), float32(l.lineage%half)
	if err := group.AllReduce(bctx, "steps_done", -1, done); err != nil {
		return fmt.Errorf("estimator: %s: telling the members' steps: %w", l.r.cfg.Task, err)
	}
	root, most, lineage := 0, int64(-1), int64(-1)
	for i := range group.Size() {
		d, g := int64(done[4*i])*half+int64(done[4*i+1]), int64(done[4*i+2])*half+int64(done[4*i+3])
		if d > most || (d == most && g > lineage) {
			root, most, lineage = i, d, g
		}
	}
	if err := l.st.Broadcast(bctx, l.sess, rooted{group, root}); err != nil {
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
	l.done, l.lineage = most, lineage
	// The global step counts the steps done, on every member alike: a
	// learning-rate schedule reads it, and members at different rates
	// would apply the same mean gradient differently.
	if err := l.setGlobalStep(bctx, most); err != nil {
		return fmt.Errorf("estimator: %s: setting the global step to the member's %d: %w", l.r.cfg.Task, most, err)
	}
	l.st.Restart()
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
	for i, t := range l.towers {
		b, err := l.ins[i].next()
		if err != nil {
			return fmt.Errorf("estimator: %sreading a batch: %w", r.who(), err)
		}
		if err := t.feeds(l.feeds, b); err != nil {
			return err
		}
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
				// finish, not a step past the end (the leader's hooks
				// ended training before it).
				if v, ok := l.ring.NewestView(); !ok || !v.Stop || leader || step >= v.Step {
					cancel()
				}
			case <-sctx.Done():
			}
		}()
	}
	var own []graph.Output
	if l.prog.due() || step == l.steps {
		own = l.prog.fetches(true)
	}
	stepStart := time.Now()
	var loss float64
	var logged []*tensor.Tensor
	var stepErr error
	err := l.ms.RunStep(sctx, func(ctx context.Context, extra []graph.Output) (int64, []*tensor.Tensor, error) {
		var vals []*tensor.Tensor
		loss, vals, stepErr = l.st.Step(ctx, l.sess, l.feeds, group, step, append(own[:len(own):len(own)], extra...))
		if stepErr == nil && (math.IsNaN(loss) || math.IsInf(loss, 0)) { // as the NaN guard of the ps strategies
			stepErr = fmt.Errorf("%w (%v): lower the learning rate", train.ErrNaNLoss, loss)
		}
		if stepErr != nil {
			return 0, nil, stepErr
		}
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
		l.claims.logTrained(fmt.Sprintf(" %d %d", step, l.gen))
		l.pos += int64(group.Size() * l.batch * len(l.towers))
	}
	l.lastMembers, l.lineage = group.Size(), l.gen
	l.prog.stepped(trained{global: step, loss: loss, examples: l.batch * len(l.towers), shown: l.batch * len(l.towers) * l.lastMembers, took: time.Since(stepStart),
		logged: logged, last: step == l.steps, note: fmt.Sprintf(" (%d ranks)%s", l.lastMembers, l.st.Describe())})
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
// whatever the view: a non-finite loss, a hook that failed, or a failure
// of this rank's own input or computation, which a new view would meet
// again at the same input position (Permanent), as every strategy on
// parameter servers fails on it at once.
func endsTraining(err error) bool { return Permanent(err) }

// names names ranks by task, for the logs.
func (l *ringLoop) names(ranks []int) []string {
	out := make([]string, len(ranks))
	for i, k := range ranks {
		out[i] = l.r.reps[k].String()
	}
	return out
}
