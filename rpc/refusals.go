package rpc

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// Refusals are logged at a bounded rate, since whoever reaches a task's
// port can make them before authenticating. A refusal's kind is what was
// refused and its reason with the numbers taken out (a handshake's error
// names the client's ephemeral port, which every connection changes), and
// each kind is logged refusalBurst times per refusalWindow and peer IP;
// all kinds from all peers together, refusalAllBurst times per window and
// logger, which bounds a flood from many addresses or with reasons the
// client chooses (the subject of a self-signed certificate). What is not
// logged is counted, and a summary line per window says how many, of how
// many hosts ("rpc: refusals not logged").
const (
	refusalWindow   = 10 * time.Second
	refusalBurst    = 5
	refusalAllBurst = 50
)

// maxRefusalKeys bounds the limiter's memory: beyond it, new (kind, host)
// pairs are held to the all-peers limit alone.
const maxRefusalKeys = 4096

// maxReasonKey bounds the part of a reason that a kind keeps.
const maxReasonKey = 160

// maxSummaryHosts bounds the distinct hosts a summary counts.
const maxSummaryHosts = 1024

type refusalKey struct {
	log    *slog.Logger
	what   string
	host   string
	reason string // normalized: see refusalKind
}

type refusalEntry struct {
	since  time.Time // start of the window
	logged int       // lines written in the window
}

// refusalTotal is one logger's window over every kind and host.
type refusalTotal struct {
	since  time.Time
	logged int
	hidden int                 // refusals not logged in the window
	hosts  map[string]struct{} // their hosts, up to maxSummaryHosts
	armed  bool                // a summary is scheduled
}

// refusalLimiter decides which refusals are logged. Its zero value is not
// ready: see newRefusalLimiter.
type refusalLimiter struct {
	mu     sync.Mutex
	keys   map[refusalKey]*refusalEntry
	totals map[*slog.Logger]*refusalTotal
	// after runs f once d has passed (time.AfterFunc); tests replace it.
	after func(d time.Duration, f func())
	now   func() time.Time
}

func newRefusalLimiter() *refusalLimiter {
	return &refusalLimiter{
		keys:   map[refusalKey]*refusalEntry{},
		totals: map[*slog.Logger]*refusalTotal{},
		after:  func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		now:    time.Now,
	}
}

var refusals = newRefusalLimiter()

// logRefusal writes msg with args, the peer's address and the error to log
// unless the rate limits above hide it.
func logRefusal(log *slog.Logger, now time.Time, msg, remote string, err error, args ...any) {
	refusals.log(log, now, msg, remote, err, args...)
}

// refusalKind returns reason without its digits (a port, an address, a
// count) and cut to maxReasonKey bytes.
func refusalKind(reason string) string {
	b := make([]byte, 0, min(len(reason), maxReasonKey))
	digits := false
	for i := 0; i < len(reason) && len(b) < maxReasonKey; i++ {
		c := reason[i]
		if c >= '0' && c <= '9' {
			if !digits {
				b = append(b, '#')
			}
			digits = true
			continue
		}
		digits = false
		b = append(b, c)
	}
	return string(b)
}

func (l *refusalLimiter) log(log *slog.Logger, now time.Time, msg, remote string, err error, args ...any) {
	host, _, splitErr := net.SplitHostPort(remote)
	if splitErr != nil {
		host = remote
	}
	k := refusalKey{log: log, what: msg, host: host, reason: refusalKind(err.Error())}
	l.mu.Lock()
	tot := l.totalLocked(log, now)
	e := l.keys[k]
	if e != nil && now.Sub(e.since) >= refusalWindow {
		e.since, e.logged = now, 0
	}
	if e == nil {
		if len(l.keys) >= maxRefusalKeys {
			l.pruneLocked(now)
		}
		if len(l.keys) < maxRefusalKeys {
			e = &refusalEntry{since: now}
			l.keys[k] = e
		}
	}
	if tot.logged >= refusalAllBurst || e != nil && e.logged >= refusalBurst {
		tot.hidden++
		if len(tot.hosts) < maxSummaryHosts {
			tot.hosts[host] = struct{}{}
		}
		if !tot.armed {
			tot.armed = true
			l.after(tot.since.Add(refusalWindow).Sub(now), func() { l.flush(log, l.now()) })
		}
		l.mu.Unlock()
		return
	}
	tot.logged++
	if e != nil {
		e.logged++
	}
	l.mu.Unlock()
	log.Warn(msg, append(args, "remote", remote, "err", err)...)
}

// totalLocked returns log's window, a new one if the last has ended (whose
// summary is then written, unless already).
func (l *refusalLimiter) totalLocked(log *slog.Logger, now time.Time) *refusalTotal {
	tot := l.totals[log]
	if tot == nil {
		tot = &refusalTotal{since: now, hosts: map[string]struct{}{}}
		l.totals[log] = tot
		return tot
	}
	if now.Sub(tot.since) >= refusalWindow {
		l.summaryLocked(log, tot)
		tot.since, tot.logged = now, 0
	}
	return tot
}

// summaryLocked writes the summary of tot's window, if it hid anything,
// and clears its count.
func (l *refusalLimiter) summaryLocked(log *slog.Logger, tot *refusalTotal) {
	if tot.hidden == 0 {
		return
	}
	// Written under the lock: a slog handler does not call back here, and
	// a summary is at most one line per window.
	log.Warn("rpc: refusals not logged", "count", tot.hidden, "hosts", len(tot.hosts), "window", refusalWindow,
		"since", tot.since.UTC().Format(time.RFC3339))
	tot.hidden = 0
	clear(tot.hosts)
}

// flush writes log's summary if its window has ended by now.
func (l *refusalLimiter) flush(log *slog.Logger, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tot := l.totals[log]
	if tot == nil {
		return
	}
	tot.armed = false
	if now.Sub(tot.since) < refusalWindow {
		if tot.hidden > 0 { // the window was renewed since: its own end
			tot.armed = true
			l.after(tot.since.Add(refusalWindow).Sub(now), func() { l.flush(log, l.now()) })
		}
		return
	}
	l.summaryLocked(log, tot)
	delete(l.totals, log)
}

// pruneLocked forgets the keys whose window has ended.
func (l *refusalLimiter) pruneLocked(now time.Time) {
	for k, e := range l.keys {
		if now.Sub(e.since) >= refusalWindow {
			delete(l.keys, k)
		}
	}
}
