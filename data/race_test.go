//go:build race

package data

// raceEnabled reports whether the race detector is on; slow tests skip then.
const raceEnabled = true
