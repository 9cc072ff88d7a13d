//go:build !linux

package netdelay

import "time"

func sleepFor(d time.Duration) { time.Sleep(d) }

func lockSleeper() {}
