package estimator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// endedFile is the marker the chief writes in the checkpoint directory
// once training has ended, before it stops the ps tasks: the global step
// it ended at. A worker that cannot reach the ps tasks (it was stopped or
// partitioned while the chief finished) reads it to tell "the ps is down
// and will come back" from "the ps is gone because training is over";
// the directory is shared by every task already (the ps tasks write their
// checkpoint shards there), so no other channel is needed.
const endedFile = "training_ended"

// errTrainingEnded says that the chief ended training while this replica
// waited for the cluster: the replica's work is done.
var errTrainingEnded = errors.New("estimator: the chief has ended training")

// markTrainingEnded records in dir that training ended at step (written
// to a temporary file then renamed, so a reader sees all or nothing).
func markTrainingEnded(dir string, step int64) error {
	tmp, err := os.CreateTemp(dir, endedFile+".tmp*")
	if err != nil {
		return fmt.Errorf("estimator: marking the end of training in %s: %w", dir, err)
	}
	_, err = fmt.Fprintf(tmp, "%d\n", step)
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
	return nil
}

// trainingEnded reports whether dir holds the marker of a training that
// ended at or after target (a marker of an earlier, shorter run in the
// same directory does not count). The file is read as hostile: at most 32
// bytes, one decimal integer.
func trainingEnded(dir string, target int64) (step int64, ended bool) {
	if dir == "" {
		return 0, false
	}
	f, err := os.Open(filepath.Join(dir, endedFile))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0, false
	}
	step, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || step < target {
		return 0, false
	}
	return step, true
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
