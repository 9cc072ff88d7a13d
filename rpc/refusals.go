package rpc

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// A refusal that repeats (same logger, what was refused, peer host and
// reason) is logged refusalBurst times per refusalWindow: a peer that
// retries, or floods a task with bad handshakes, costs a few lines per
// window and then one with the count of those hidden, not one line per
// attempt. The burst keeps each of a client's first tries visible (it may
// try gRPC, the tensor channel and the ring in turn).
const (
	refusalWindow = 10 * time.Second
	refusalBurst  = 5
)

// maxRefusalKeys bounds the limiter's memory against peers that vary
// their reason or address.
const maxRefusalKeys = 4096

type refusalKey struct {
	log    *slog.Logger
	what   string
	host   string
	reason string
}

type refusalEntry struct {
	since  time.Time // start of the window
	logged int       // lines written in the window
	hidden int       // repeats not logged in the window
}

var refusals = struct {
	sync.Mutex
	m map[refusalKey]*refusalEntry
}{m: map[refusalKey]*refusalEntry{}}

// logRefusal writes msg with args to log unless the same refusal was
// logged refusalBurst times in the current window; the first line of the
// next window says how many were hidden ("repeats").
func logRefusal(log *slog.Logger, now time.Time, msg, remote string, err error, args ...any) {
	host, _, splitErr := net.SplitHostPort(remote)
	if splitErr != nil {
		host = remote
	}
	reason := err.Error()
	if len(reason) > 256 {
		reason = reason[:256]
	}
	k := refusalKey{log: log, what: msg, host: host, reason: reason}
	refusals.Lock()
	e := refusals.m[k]
	if e != nil && now.Sub(e.since) < refusalWindow {
		if e.logged >= refusalBurst {
			e.hidden++
			refusals.Unlock()
			return
		}
		e.logged++
		refusals.Unlock()
		log.Warn(msg, append(args, "remote", remote, "err", err)...)
		return
	}
	hidden := 0
	if e != nil {
		hidden = e.hidden
	} else if len(refusals.m) >= maxRefusalKeys {
		for k, e := range refusals.m {
			if now.Sub(e.since) >= refusalWindow {
				delete(refusals.m, k)
			}
		}
		if len(refusals.m) >= maxRefusalKeys {
			clear(refusals.m)
		}
	}
	refusals.m[k] = &refusalEntry{since: now, logged: 1}
	refusals.Unlock()
	args = append(args, "remote", remote, "err", err)
	if hidden > 0 {
		args = append(args, "repeats", hidden)
	}
	log.Warn(msg, args...)
}
