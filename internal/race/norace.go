//go:build !race

// Package race tells code whether the race detector is on: tests that count
// allocations or move huge tensors skip or shrink under it.
package race

// Enabled reports whether the program was built with -race.
const Enabled = false
