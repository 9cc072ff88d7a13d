package rpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// ErrUnavailable is wrapped by errors of calls that could not reach their
// peer (connection refused, peer gone) and by WaitForTasks when tasks stay
// unreachable. It is worker.ErrUnavailable, which a master tests.
var ErrUnavailable = worker.ErrUnavailable

// ErrUnauthenticated is wrapped by errors of calls the peer refused because
// Options.Authenticate failed.
var ErrUnauthenticated = errors.New("unauthenticated")

// sentinels lists the errors callers test with errors.Is, with their status
// code and a stable name. A server sends the first match's code and name
// (in an ErrorInfo detail); a client's RemoteError unwraps to the sentinel
// of that name (or, from other peers, of the code), so errors.Is works
// across the wire as in process.
var sentinels = []struct {
	name string
	err  error
	code codes.Code
}{
	{"DEADLINE_EXCEEDED", context.DeadlineExceeded, codes.DeadlineExceeded},
	{"CANCELED", context.Canceled, codes.Canceled},
	{"WORKER_NO_GRAPH", worker.ErrNoGraph, codes.NotFound},
	{"NOT_FOUND", graph.ErrNotFound, codes.NotFound},
	{"UNINITIALIZED", kernel.ErrUninitialized, codes.FailedPrecondition},
	{"SESSION_CLOSED", session.ErrClosed, codes.FailedPrecondition},
	{"STEP_DONE", rendezvous.ErrStepDone, codes.Aborted},
	{"ABORTED", rendezvous.ErrAborted, codes.Aborted},
	{"DUPLICATE_SEND", rendezvous.ErrDuplicateSend, codes.AlreadyExists},
	{"CORRUPT_TENSOR", tensor.ErrCorrupt, codes.DataLoss},
	{"QUEUE_CLOSED", cpu.ErrQueueClosed, codes.OutOfRange},
	{"UNAUTHENTICATED", ErrUnauthenticated, codes.Unauthenticated},
	{"UNAVAILABLE", ErrUnavailable, codes.Unavailable},
	{"PERMISSION_DENIED", service.ErrPermissionDenied, codes.PermissionDenied},
	{"TOO_MANY_STEPS", rendezvous.ErrTooManySteps, codes.ResourceExhausted},
}

// errorDomain marks the ErrorInfo details distflow writes.
const errorDomain = "distflow"

// toStatus converts a service error into a gRPC status error that keeps its
// message; nil stays nil.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	// The first sentinel err wraps gives the code; all of them travel, so
	// that errors.Is finds each on the other side (a step aborted because
	// a queue closed is both).
	var first int = -1
	var also []string
	for i, s := range sentinels {
		if errors.Is(err, s.err) {
			if first < 0 {
				first = i
			} else {
				also = append(also, s.name)
			}
		}
	}
	if first >= 0 {
		s := sentinels[first]
		info := &errdetails.ErrorInfo{Reason: s.name, Domain: errorDomain}
		if len(also) > 0 {
			info.Metadata = map[string]string{"also": strings.Join(also, ",")}
		}
		st, derr := status.New(s.code, err.Error()).WithDetails(info)
		if derr != nil {
			return status.Error(s.code, err.Error())
		}
		return st.Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

// RemoteError is an error returned by a peer (or by gRPC on the way to it).
// Its message is the peer's; Unwrap yields the sentinel of its status code
// (context.DeadlineExceeded, graph.ErrNotFound, ErrUnavailable, ...), so
// errors.Is works as it would in process.
type RemoteError struct {
	Peer   string // the address or task called, "/job:ps/task:0 at 127.0.0.1:2222"
	Method string // "RunGraph"
	Code   codes.Code
	Msg    string // the peer's message
	Reason string // the name of the peer's sentinel error, if any
	// Also names the other sentinels the peer's error wrapped.
	Also []string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("rpc: %s on %s: %s", e.Method, e.Peer, e.Msg)
}

// Unwrap returns the sentinel errors the peer's error wrapped (those of
// Reason and Also), or else the sentinel of the status code.
func (e *RemoteError) Unwrap() []error {
	var errs []error
	for _, s := range sentinels {
		if e.Reason != "" && (s.name == e.Reason || slices.Contains(e.Also, s.name)) || e.Reason == "" && s.code == e.Code {
			errs = append(errs, s.err)
			if e.Reason == "" {
				break
			}
		}
	}
	return errs
}

// fromStatus converts the error of a gRPC call into a *RemoteError naming
// peer and method. When ctx has ended the error also wraps ctx.Err().
func fromStatus(ctx context.Context, peer, method string, err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	re := &RemoteError{Peer: peer, Method: method, Code: st.Code(), Msg: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			re.Reason = info.GetReason()
			if also := info.GetMetadata()["also"]; also != "" {
				re.Also = strings.Split(also, ",")
			}
		}
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(re, cerr) {
		return fmt.Errorf("%w (%w)", re, cerr)
	}
	return re
}
