package estimator

import (
	"context"
	"errors"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/train"
)

// Permanent reports whether err, the error of a task's training, would
// recur if the task ran again from its last checkpoint: a failure of the
// task's own input or computation (a label out of range, an input that
// ended, a non-finite loss) rather than of its peers, the network or the
// machine. A launcher restarts a task that failed otherwise; one that
// failed so is not restarted, and its error ends the run (the distflow
// command exits with localcluster.ExitPermanent).
//
// A kernel's error is the task's own unless the step's context ended (a
// cut or a deadline), a peer was lost or aborted the step, the session
// closed, or it is a variable not yet set or a non-finite write, which
// another task's restart or values can cause; errors that another task
// sent are never the task's own.
func Permanent(err error) bool {
	if errors.Is(err, train.ErrNaNLoss) || errors.As(err, new(*hookError)) || errors.Is(err, ErrInputEnded) {
		return true
	}
	if !errors.As(err, new(*kernel.NodeError)) || errors.As(err, new(*rpc.RemoteError)) {
		return false
	}
	for _, transient := range []error{context.Canceled, context.DeadlineExceeded, kernel.ErrUninitialized, kernel.ErrNonFiniteWrite,
		rendezvous.ErrAborted, rendezvous.ErrStepDone, session.ErrClosed} {
		if errors.Is(err, transient) {
			return false
		}
	}
	return !train.TaskLost(err)
}
