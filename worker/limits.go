package worker

import (
	"context"

	"github.com/distflow/distflow/service"
)

// callerUse is what one caller's sessions hold on the worker, for its
// limits.
type callerUse struct {
	sessions int
	bytes    int64
}

// callerOf names the caller of a request for its limits: the task or
// client the transport named (service.Caller), or "" for every caller it
// did not name.
func callerOf(ctx context.Context) string {
	c, _ := service.Caller(ctx)
	return c
}

// callerName is how errors name a caller.
func callerName(caller string) string {
	if caller == "" {
		return "callers the transport does not name"
	}
	return caller
}

// checkGraphLimitsLocked reports an error when one more graph of size
// bytes (GraphMemory) registered by caller would take session (whose use
// is nil when it holds no graph) or caller past the limits, or when the
// session belongs to another caller.
func (w *Worker) checkGraphLimitsLocked(caller, session string, use *sessionUse, size int64) error {
	cu := w.callers[caller]
	if cu == nil {
		cu = &callerUse{}
	}
	if use == nil {
		if max := w.cfg.MaxCallerSessions; max > 0 && cu.sessions+1 > max {
			return w.errorf("register graph of session %q: %w: %s: graphs in %d sessions, limit %d (worker.Config.MaxCallerSessions); close sessions", session, ErrTooManyGraphs, callerName(caller), cu.sessions, max)
		}
		use = &sessionUse{caller: caller}
	}
	if use.caller != caller {
		return w.errorf("register graph of session %q from %s: %w: the session belongs to %s", session, callerName(caller), service.ErrPermissionDenied, callerName(use.caller))
	}
	if max := w.cfg.MaxGraphs; max > 0 && use.graphs+1 > max {
		return w.errorf("register graph of session %q: %w: %d graphs registered, limit %d (worker.Config.MaxGraphs); close the session or deregister graphs", session, ErrTooManyGraphs, use.graphs, max)
	}
	if max := w.cfg.MaxGraphBytes; max > 0 && use.bytes+size > max {
		return w.errorf("register graph of session %q: %w: a graph holding about %d bytes in memory on top of %d bytes registered exceeds the session's limit of %d bytes (worker.Config.MaxGraphBytes)", session, ErrTooManyGraphs, size, use.bytes, max)
	}
	if max := w.cfg.MaxCallerGraphBytes; max > 0 && cu.bytes+size > max {
		return w.errorf("register graph of session %q: %w: a graph holding about %d bytes in memory on top of the %d bytes that the sessions of %s hold exceeds the limit of %d bytes (worker.Config.MaxCallerGraphBytes)", session, ErrTooManyGraphs, size, cu.bytes, callerName(caller), max)
	}
	return nil
}

// addLocked counts a graph of size bytes registered by caller in session,
// which checkGraphLimitsLocked admitted.
func (w *Worker) addLocked(caller, session string, size int64) {
	use := w.sessions[session]
	cu := w.callers[caller]
	if cu == nil {
		cu = &callerUse{}
		w.callers[caller] = cu
	}
	if use == nil {
		use = &sessionUse{caller: caller}
		w.sessions[session] = use
		cu.sessions++
	}
	use.graphs++
	use.bytes += size
	use.lastUsed = w.cfg.Now()
	cu.bytes += size
}

// releaseLocked uncounts a graph of size bytes of session.
func (w *Worker) releaseLocked(session string, size int64) {
	use := w.sessions[session]
	if use == nil {
		return
	}
	use.graphs--
	use.bytes -= size
	cu := w.callers[use.caller]
	if cu != nil {
		cu.bytes -= size
	}
	if use.graphs > 0 {
		return
	}
	delete(w.sessions, session)
	if cu != nil {
		if cu.sessions--; cu.sessions <= 0 {
			delete(w.callers, use.caller)
		}
	}
}
