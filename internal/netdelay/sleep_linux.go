//go:build linux

package netdelay

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// sleepFor blocks this goroutine's thread in nanosleep (the runtime hands
// its processor to other goroutines meanwhile). Call lockSleeper first.
func sleepFor(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// lockSleeper wires the calling goroutine to its thread and gives the
// thread the smallest timer slack (Linux's default, 50 us, is a fifth of a
// 0.25 ms delay). The goroutine must end, or call runtime.UnlockOSThread.
func lockSleeper() {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}
