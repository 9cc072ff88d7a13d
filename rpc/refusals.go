package rpc

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// refusalWindow is how long a refusal already logged stays quiet when it
// repeats (same logger, what was refused, peer host and reason): a peer
// that retries, or floods a task with bad handshakes, costs one line per
// window with the count of those it hid, not one line per attempt.
const refusalWindow = 10 * time.Second

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
	since  time.Time // when the last logged line was written
	hidden int       // repeats not logged since
}

var refusals = struct {
	sync.Mutex
	m map[refusalKey]*refusalEntry
}{m: map[refusalKey]*refusalEntry{}}

// logRefusal writes msg with args to log unless the same refusal was
// logged less than refusalWindow ago; the next line written says how many
// were hidden ("repeats").
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
		e.hidden++
		refusals.Unlock()
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
	refusals.m[k] = &refusalEntry{since: now}
	refusals.Unlock()
	args = append(args, "remote", remote, "err", err)
	if hidden > 0 {
		args = append(args, "repeats", hidden)
	}
	log.Warn(msg, args...)
}
