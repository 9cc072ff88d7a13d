package estimator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/distflow/distflow/cluster"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
)

// endedFile is the marker the chief writes in the checkpoint directory
// once training has ended, after its final checkpoint and before it stops
// the ps tasks: the global step it ended at, then the chief's result as
// JSON. The end of training is state, not an event: a worker that cannot
// reach the ps tasks (it was stopped or partitioned while the chief
// finished) reads it to tell "the ps is down and will come back" from "the
// ps is gone because training is over"; a chief started again on the
// directory (restarted after it crashed while stopping the cluster, or the
// same command run twice) reads it to finish the shutdown and report the
// result without training. The directory is shared by every task already
// (the ps tasks write their checkpoint shards there), so no other channel
// is needed.
const endedFile = "training_ended"

// maxEndedBytes bounds what is read of the marker: a step and a Result.
const maxEndedBytes = 1 << 20

// errTrainingEnded says that the chief ended training while this replica
// waited for the cluster: the replica's work is done.
var errTrainingEnded = errors.New("estimator: the chief has ended training")

// endMarker is what the marker holds.
type endMarker struct {
	step int64
	// result is the chief's result as training ended (nil in a marker
	// without one).
	result *Result
}

// markTrainingEnded records in dir that training ended at step with the
// chief's result res (written to a temporary file, synced, then renamed
// over the last marker and the directory synced, so that a reader sees
// all or nothing).
func markTrainingEnded(dir string, step int64, res *Result) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n", step)
	if res != nil {
		if err := json.NewEncoder(&b).Encode(res); err != nil {
			return fmt.Errorf("estimator: marking the end of training in %s: %w", dir, err)
		}
	}
	tmp, err := os.CreateTemp(dir, endedFile+".tmp*")
	if err != nil {
		return fmt.Errorf("estimator: marking the end of training in %s: %w", dir, err)
	}
	_, err = tmp.Write(b.Bytes())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, endedFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("estimator: marking the end of training in %s: %w", dir, err)
	}
	// The rename survives a crash of the machine too, as the checkpoint
	// before it does.
	if d, err := os.Open(dir); err == nil {
		if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
			d.Close()
			return fmt.Errorf("estimator: marking the end of training in %s: syncing the directory: %w", dir, err)
		}
		d.Close()
	}
	return nil
}

// readEndMarker reads the marker in dir; ok is false when there is none
// or it is not one. The file is read as hostile: at most maxEndedBytes, a
// decimal integer on the first line; a result that does not decode is
// left out.
func readEndMarker(dir string) (m endMarker, ok bool) {
	if dir == "" {
		return m, false
	}
	f, err := os.Open(filepath.Join(dir, endedFile))
	if err != nil {
		return m, false
	}
	defer f.Close()
	br := bufio.NewReader(io.LimitReader(f, maxEndedBytes))
	line, err := br.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return m, false
	}
	if m.step, err = strconv.ParseInt(string(bytes.TrimSpace([]byte(line))), 10, 64); err != nil {
		return m, false
	}
	var res Result
	if err := json.NewDecoder(br).Decode(&res); err == nil && res.GlobalStep == m.step {
		m.result = &res
	}
	return m, true
}

// trainingEnded reports whether dir holds the marker of a training that
// ended at or after target (a marker of an earlier, shorter run in the
// same directory does not count).
func trainingEnded(dir string, target int64) (step int64, ended bool) {
	m, ok := readEndMarker(dir)
	if !ok || m.step < target {
		return 0, false
	}
	return m.step, true
}

// untilTrainingEnds runs wait (a wait for the cluster) and, every poll,
// looks for the chief's end-of-training marker for target in dir: found,
// it cuts wait short and returns errTrainingEnded.
func untilTrainingEnds(ctx context.Context, dir string, target int64, poll time.Duration, wait func(context.Context) error) error {
	if dir == "" {
		return wait(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- wait(ctx) }()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if step, ok := trainingEnded(dir, target); ok {
			cancel()
			<-done
			return fmt.Errorf("%w (at global step %d)", errTrainingEnded, step)
		}
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
	}
}

// endedPoll is how often a replica waiting for the cluster looks for the
// end-of-training marker: a stat and a read of a few bytes.
const endedPoll = 500 * time.Millisecond

// markEnded marks the end of training in the checkpoint directory, if
// any, with the run's result, after the final checkpoint and before the
// cluster stops: a replica that cannot reach the cluster then knows why,
// and a run started again on the directory ends at once.
func (r *replica) markEnded(ctx context.Context, res *Result) {
	if r.cfg.CheckpointDir == "" {
		return
	}
	res.WallSeconds = time.Since(r.started).Seconds()
	if err := markTrainingEnded(r.cfg.CheckpointDir, res.GlobalStep, res); err != nil {
		r.log.Warn("a replica away now waits for the cluster until its wait timeout, and a run on this directory trains again", "err", err)
		return
	}
	r.holdAfterEnded(ctx)
}

// envHoldAfterEnded, when set, makes the chief wait after it has marked
// the end of training, before it stops the ps tasks, until it is killed:
// a test hook for a chief that dies there.
const envHoldAfterEnded = "DISTFLOW_HOLD_AFTER_END_MARKER"

// holdAfterEnded is the test hook's wait.
func (r *replica) holdAfterEnded(ctx context.Context) {
	if os.Getenv(envHoldAfterEnded) == "" {
		return
	}
	r.log.Warn("holding after the end-of-training marker until killed ($" + envHoldAfterEnded + ")")
	<-ctx.Done()
}

// endedBefore is the start of Train on a directory where training has
// ended already at or past this run's target (a restarted chief, or the
// same command run again): nothing is trained and no checkpoint changes.
// The chief takes the final checkpoint as its trained model (for Evaluate,
// Export, VariableValue), finishes stopping the serving tasks, and returns
// the result the marker recorded; any other replica returns at once. ok
// is false when training has not ended (or there is no checkpoint
// directory): train then.
func (r *replica) endedBefore(ctx context.Context) (res *Result, ok bool, err error) {
	cfg := r.cfg
	m, found := readEndMarker(cfg.CheckpointDir)
	if !found {
		return nil, false, nil
	}
	// The target, from the batch size when Stop is in epochs: the first
	// batch of the input (read to learn the shapes, not claimed).
	in, err := openTrainInput(ctx, r.input, InputContext{NumReplicas: r.numReplicas(), ReplicaIndex: max(r.index, 0), Seed: cfg.Seed})
	if err != nil {
		return nil, false, err
	}
	defer in.close()
	target := r.stop.steps(in.first[0].Shape()[0], r.batchesPerStep())
	if m.step < target {
		return nil, false, nil // an earlier, shorter run's
	}
	if !r.chief() {
		r.log.Info("training has ended already; exiting", "task", cfg.Task.String(), "global_step", m.step, "dir", cfg.CheckpointDir)
		return &Result{Task: cfg.Task.String(), Strategy: cfg.Strategy.String(), GlobalStep: m.step,
			WallSeconds: time.Since(r.started).Seconds()}, true, nil
	}
	r.e.rememberInput(in.spec)
	model, err := r.e.buildLocalAt(ctx, in.spec, Eval, 0)
	if err != nil {
		return nil, false, fmt.Errorf("estimator: training ended at global step %d (%s in %s), but its final checkpoint cannot be restored (remove the marker to train again): %w",
			m.step, endedFile, cfg.CheckpointDir, err)
	}
	model.sess.Close()
	r.e.mu.Lock()
	r.e.trained, r.e.step, r.e.predictor = model.values, model.step, nil
	r.e.mu.Unlock()
	r.log.Info("training has ended already: taking the final checkpoint; nothing to train", "global_step", m.step, "restored", model.step, "dir", cfg.CheckpointDir)
	fmt.Fprintf(cfg.Progress, "%straining ended already at global step %d (%s in %s): nothing to train\n", r.who(), m.step, endedFile, cfg.CheckpointDir)
	if cfg.Cluster != nil {
		r.finishShutdown(ctx, cfg.update().ChiefOnly)
	}
	res = &Result{Strategy: cfg.Strategy.String(), GlobalStep: m.step}
	if m.result != nil {
		res = m.result
	}
	res.Task, res.Chief = "", true
	if cfg.Cluster != nil {
		res.Task = cfg.Task.String()
	}
	res.Metrics, res.Export, res.WallSeconds = nil, "", time.Since(r.started).Seconds()
	return res, true, nil
}

// finishWait bounds how long a chief that finds training ended waits for
// each serving task to answer its Shutdown: they are started with it (a
// local cluster, a supervisor), or are gone already.
const finishWait = 10 * time.Second

// finishShutdown tells the serving tasks (the ps tasks, and with in-graph
// replication the other workers) that training is finished, as the chief
// does at the end of training, trying each again until it answers or
// finishWait (at most the wait timeout) has passed: a chief that finds
// training ended may have died before it told them, and they may be
// starting with it.
func (r *replica) finishShutdown(ctx context.Context, inGraph bool) {
	ctx, cancel := context.WithTimeout(ctx, min(finishWait, r.cfg.WaitTimeout))
	defer cancel()
	self := r.cfg.Task
	done := make(chan struct{})
	n := 0
	for _, t := range r.cfg.Cluster.Tasks() {
		if t == self || (t.Job != "ps" && !inGraph) {
			continue
		}
		n++
		go func() {
			defer func() { done <- struct{}{} }()
			if err := r.stopTask(ctx, t); err != nil {
				r.log.Warn("could not tell a serving task that training has ended; a supervisor must stop it", "task", t.String(), "err", err)
				return
			}
			r.log.Info("stopped task", "stopped", t.String())
		}()
	}
	for range n {
		<-done
	}
}

// stopTask sends t a Shutdown, again until it answers or ctx ends.
func (r *replica) stopTask(ctx context.Context, t cluster.TaskID) error {
	addr, err := r.cfg.Cluster.Address(t)
	if err != nil {
		return err
	}
	reason := fmt.Sprintf("training finished (%s, which found the end-of-training marker)", r.cfg.Task)
	for d := 20 * time.Millisecond; ; d = backoff(d) {
		w, closer, err := rpc.DialWorker(addr, r.cfg.rpc)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = w.Shutdown(cctx, &pb.ShutdownRequest{Reason: reason})
			cancel()
			closer.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("estimator: stopping %s at %s: %w", t, addr, err)
		case <-time.After(d):
		}
	}
}
