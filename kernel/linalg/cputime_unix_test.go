//go:build unix

package linalg_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) this process has used.
// Benchmarks report rates over it beside wall-clock rates: on a shared
// machine a run that is descheduled loses wall time but not CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
