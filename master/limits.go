package master

import (
	"context"
	"fmt"
	"time"

	"github.com/distflow/distflow/service"
)

// callerUse is what one caller's sessions hold on the master, for its
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

// checkLimitsLocked reports an error when size more bytes of graphs (and,
// with session, one more session) would take caller past the limits.
func (m *Master) checkLimitsLocked(caller string, session bool, size int64) error {
	cu := m.callers[caller]
	if cu == nil {
		cu = &callerUse{}
	}
	if max := m.cfg.MaxSessions; session && max > 0 && cu.sessions+1 > max {
		return fmt.Errorf("%w: %s: %d sessions open, limit %d (master.Config.MaxSessions); close sessions", ErrTooManySessions, callerName(caller), cu.sessions, max)
	}
	if max := m.cfg.MaxGraphBytes; max > 0 && cu.bytes+size > max {
		return fmt.Errorf("%w: a graph holding about %d bytes in memory on top of the %d bytes that the sessions of %s hold exceeds the limit of %d bytes (master.Config.MaxGraphBytes)", ErrTooManySessions, size, cu.bytes, callerName(caller), max)
	}
	return nil
}

// addSessionLocked counts s, of size bytes, for caller.
func (m *Master) addSessionLocked(s *session, caller string, size int64) {
	cu := m.callers[caller]
	if cu == nil {
		cu = &callerUse{}
		m.callers[caller] = cu
	}
	cu.sessions++
	cu.bytes += size
	s.caller, s.bytes, s.lastUsed = caller, size, m.cfg.Now()
}

// removeSessionLocked takes s out of the master's sessions and uncounts
// all it holds; later charges and releases of it count nothing.
func (m *Master) removeSessionLocked(s *session) {
	if m.sessions[s.handle] != s {
		return
	}
	delete(m.sessions, s.handle)
	if cu := m.callers[s.caller]; cu != nil {
		cu.bytes -= s.bytes
		if cu.sessions--; cu.sessions <= 0 {
			delete(m.callers, s.caller)
		}
	}
	s.bytes = 0
}

// charge counts size more bytes of graphs for s (an extension, a plan),
// or reports the limit that refuses them.
func (m *Master) charge(s *session, size int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions[s.handle] != s {
		return nil // closed: what it holds goes with it
	}
	if err := m.checkLimitsLocked(s.caller, false, size); err != nil {
		return err
	}
	s.bytes += size
	m.callers[s.caller].bytes += size
	return nil
}

// release uncounts size bytes that s no longer holds.
func (m *Master) release(s *session, size int64) {
	if size == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions[s.handle] != s {
		return
	}
	s.bytes -= size
	m.callers[s.caller].bytes -= size
}

// idle reports whether s has gone unused for longer than
// Config.SessionIdle at now.
func (m *Master) idle(s *session, now time.Time) bool {
	return m.cfg.SessionIdle >= 0 && now.Sub(s.lastUsed) > m.cfg.SessionIdle
}

// expireIdleLocked closes the sessions idle for longer than
// Config.SessionIdle.
func (m *Master) expireIdleLocked() {
	if m.cfg.SessionIdle < 0 {
		return
	}
	now := m.cfg.Now()
	for _, s := range m.sessions {
		if m.idle(s, now) {
			m.expireLocked(s, now)
		}
	}
}

// expireLocked closes an idle session: it is forgotten at once, and closed
// on its tasks in the background.
func (m *Master) expireLocked(s *session, now time.Time) {
	m.removeSessionLocked(s)
	m.log.Info("master: closed an idle session", "session", s.handle, "caller", callerName(s.caller), "idle", now.Sub(s.lastUsed))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := m.closeSession(ctx, s); err != nil {
			m.log.Debug("master: closing an idle session failed", "session", s.handle, "err", err)
		}
	}()
}

// buildBudget is the graph-building time a caller may still spend at
// once: it grows by Config.BuildShare of the time that passes, up to
// Config.BuildBurst, and shrinks by the time its graphs take to decode.
// A caller's graphs are built one at a time (turn): concurrent requests
// would otherwise all pass the check before any is charged.
type buildBudget struct {
	credit time.Duration
	at     time.Time
	turn   chan struct{}
}

// buildTurn waits for caller's turn to build a graph, within ctx, and
// reports an error when caller has spent its share of the master's
// graph-building time; otherwise the caller builds, then calls done with
// the time it took.
func (m *Master) buildTurn(ctx context.Context, caller string) (done func(took time.Duration), err error) {
	if m.cfg.BuildShare < 0 {
		return func(time.Duration) {}, nil
	}
	m.mu.Lock()
	b := m.buildLocked(caller)
	m.mu.Unlock()
	select {
	case b.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the graphs %s is building already: %w", callerName(caller), ctx.Err())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b.refill(m.cfg.Now(), m.cfg.BuildShare, m.cfg.BuildBurst)
	if b.credit <= 0 {
		<-b.turn
		wait := time.Duration(float64(-b.credit)/m.cfg.BuildShare) + time.Millisecond
		return nil, fmt.Errorf("%w: %s has spent its share of this master's time to build graphs (%.0f%% of a core, %v at once: master.Config.BuildShare); retry in %v",
			ErrTooManySessions, callerName(caller), 100*m.cfg.BuildShare, m.cfg.BuildBurst, wait.Round(time.Millisecond))
	}
	return func(took time.Duration) {
		m.mu.Lock()
		b.credit -= took
		m.mu.Unlock()
		<-b.turn
	}, nil
}

// refill brings b's credit up to now.
func (b *buildBudget) refill(now time.Time, share float64, burst time.Duration) {
	b.credit = min(burst, b.credit+time.Duration(float64(now.Sub(b.at))*share))
	b.at = now
}

// buildLocked returns caller's budget. Budgets back at their burst, with
// no graph building, are forgotten once there are many, so that the map
// holds only the callers that spent some lately.
func (m *Master) buildLocked(caller string) *buildBudget {
	now := m.cfg.Now()
	if b := m.builds[caller]; b != nil {
		return b
	}
	if len(m.builds) >= maxBuildBudgets {
		for c, o := range m.builds {
			if o.refill(now, m.cfg.BuildShare, m.cfg.BuildBurst); len(o.turn) == 0 && o.credit >= m.cfg.BuildBurst {
				delete(m.builds, c)
			}
		}
	}
	b := &buildBudget{credit: m.cfg.BuildBurst, at: now, turn: make(chan struct{}, 1)}
	m.builds[caller] = b
	return b
}

// maxBuildBudgets is how many callers' budgets the master keeps before it
// forgets those back at their burst.
const maxBuildBudgets = 1024
