package estimator

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// Asynchronous training saves checkpoints from two replicas: the chief, and
// a deputy (the non-chief replica of lowest index that its heartbeats find
// alive), each into a directory of its own, and the chief restores the
// newest of all of them. Otherwise, while the chief is stopped or
// restarting, the other replicas train on and a lost ps rolls everyone back
// to the chief's last checkpoint: hundreds of steps per second of pause,
// where the promise is one checkpoint interval.
//
// Why a second saver at all times, and not one elected when the chief is
// found away: the heartbeats find a peer lost after the lost deadline (15 s
// with the default step deadline, seconds at the least), and async training
// takes hundreds of steps per second, so a deputy that waited for that
// verdict would itself leave a gap of many intervals. A second saver leaves
// none whichever one task is away, at the price of a second copy of each
// checkpoint (written by the ps tasks, which hold the variables; the
// workers only write the index). Why not the ps tasks saving their own
// shards on the global step: a checkpoint is one consistent set of shards
// and one index, and with several ps tasks somebody must gather the
// shards' descriptions; that is what the replicas do already, and a lost
// ps loses the checkpoint anyway.
//
// Why a directory per deputy: two writers in one directory race, on the
// files of a step both save (the hook's global step is read before the
// update, so two replicas can save the same step, and one's shard would
// be paired with the other's index), and in retention (each would delete
// the other's checkpoint in progress as debris). In a directory of its own
// each deputy is the only writer, as the chief is in the main one.

// deputyDir is the directory where replica index of a cluster saves its
// checkpoints when it stands in for the chief.
func deputyDir(dir string, index int) string {
	return filepath.Join(dir, fmt.Sprintf("replica-%d", index))
}

// deputyDirs lists the deputies' directories of a run of replicas, for the
// chief's restores.
func deputyDirs(dir string, replicas int) []string {
	var out []string
	for i := 1; i < replicas; i++ {
		out = append(out, deputyDir(dir, i))
	}
	return out
}

// deputyHook saves checkpoints on the chief's schedule, three quarters of
// its interval apart, into the replica's own directory while the replica is the deputy: replica 1 always, replica
// i > 1 while the heartbeats find replicas 1 to i-1 lost. A failed save is
// a warning, not the end of training: the chief's checkpoints still count.
type deputyHook struct {
	train.NoHook
	saver    *checkpoint.Saver
	schedule *checkpoint.Schedule
	log      *slog.Logger
	index    int
	// acting is whether the replica is the deputy now (set by elect's
	// heartbeats, read by the training loop).
	acting atomic.Bool
}

// AfterRun saves when the replica is the deputy and a checkpoint is due.
func (h *deputyHook) AfterRun(ctx context.Context, step *train.StepContext, _ []*tensor.Tensor) error {
	if !h.acting.Load() {
		// Not saving: the schedule starts afresh when the replica becomes
		// the deputy (its first checkpoint is then due at once).
		h.schedule.Saved(step.GlobalStep-h.schedule.Steps, time.Time{})
		return nil
	}
	if !h.schedule.Due(step.GlobalStep, time.Now()) {
		return nil
	}
	start := time.Now()
	prefix, err := h.saver.Save(ctx, step.Session, step.GlobalStep)
	if err != nil {
		h.log.Warn("the deputy's checkpoint failed; the chief's are still saved", "global_step", step.GlobalStep, "err", err)
		return nil
	}
	h.schedule.Saved(step.GlobalStep, time.Now())
	h.log.Info("saved a checkpoint as the chief's deputy", "prefix", prefix, "dir", h.saver.Dir(), "global_step", step.GlobalStep, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// elect makes replica r the deputy while every replica between the chief
// and it is lost, per heartbeats (replica 1 is the deputy at once). It
// returns the function that stops watching.
func (h *deputyHook) elect(ctx context.Context, r *replica) (stop func()) {
	if h.index == 1 {
		h.acting.Store(true)
		return func() {}
	}
	peers := map[int]cluster.TaskID{}
	for i := 1; i < h.index; i++ {
		peers[i] = r.reps[i]
	}
	var mu sync.Mutex
	lost := map[int]bool{}
	wctx, cancel := context.WithCancel(ctx)
	m := &membership{cfg: r.cfg, peers: peers, waiting: "a lower replica to save the checkpoints",
		// The replicas' own watches name lost peers; this one is quiet.
		log: slog.New(slog.DiscardHandler),
		onChange: func(i int, alive bool) {
			mu.Lock()
			defer mu.Unlock()
			lost[i] = !alive
			n := 0
			for _, l := range lost {
				if l {
					n++
				}
			}
			acting := n == len(peers)
			if h.acting.Swap(acting) != acting {
				if acting {
					h.log.Warn("every replica between the chief and this one is lost: this replica saves the checkpoints as the chief's deputy", "dir", h.saver.Dir())
				} else {
					h.log.Info("a lower replica answers again: it saves the deputy's checkpoints", "peer", r.reps[i].String())
				}
			}
		}}
	watched := m.watch(wctx)
	return func() { cancel(); watched() }
}

// newSavers returns the chief's Saver of vars (which restores from the
// deputies' directories too when there are deputies), or a non-chief's
// deputy hook (nil without deputies).
func newSavers(s *graph.Scope, r *replica, vars []*ops.Variable, deputies bool) (*checkpoint.Saver, *deputyHook, error) {
	cfg := r.cfg
	scfg := checkpoint.SaverConfig{Dir: cfg.CheckpointDir, Keep: cfg.KeepCheckpoints, Logger: r.log}
	switch {
	case deputies && r.chief():
		scfg.Also = deputyDirs(cfg.CheckpointDir, len(r.reps))
	case deputies:
		scfg.Dir = deputyDir(cfg.CheckpointDir, r.index)
	case !r.chief():
		return nil, nil, nil
	}
	sv, err := checkpoint.NewSaver(s, vars, scfg)
	if err != nil {
		return nil, nil, err
	}
	if r.chief() {
		return sv, nil, nil
	}
	// Three saves per four intervals: the other replicas train on while a
	// save is written (tens of milliseconds, tens of steps here), so
	// checkpoints exactly one interval apart let a ps lost during a save
	// roll back more than one interval (95 of 100 steps were seen in one
	// run of four of TestChiefStoppedLosesAtMostOneInterval).
	return nil, &deputyHook{saver: sv, index: r.index, log: r.log,
		schedule: &checkpoint.Schedule{Steps: cfg.SaveCheckpointsSteps * 3 / 4, Every: cfg.SaveCheckpointsSecs * 3 / 4}}, nil
}
