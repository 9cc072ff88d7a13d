// Package gopool runs functions on goroutines kept between calls, whose
// stacks have already grown.
//
//	gopool.Go(func() { ... })
//
// A short-lived goroutine that goes through a deep call stack (a transport
// receiving a tensor) grows its stack anew each time; at a remote step's
// scale, copying stacks took about a tenth of the CPU. At most MaxIdle
// goroutines wait for work; the others exit when done.
package gopool

import "sync/atomic"

// MaxIdle is how many goroutines at most wait for work.
const MaxIdle = 64

var (
	work = make(chan func()) // to a waiting goroutine
	idle atomic.Int32        // goroutines waiting on work
)

// Go runs f on a waiting goroutine, or on a new one. It does not wait for
// f.
func Go(f func()) {
	select {
	case work <- f:
	default:
		go loop(f)
	}
}

func loop(f func()) {
	for {
		f()
		f = nil // let what f holds go while waiting
		if idle.Add(1) > MaxIdle {
			idle.Add(-1)
			return
		}
		f = <-work
		idle.Add(-1)
	}
}
