//go:build race

package server_test

// raceEnabled reports whether the race detector is on: sync.Pool then drops
// items at random, so allocation counts do not hold.
const raceEnabled = true
