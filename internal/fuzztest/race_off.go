//go:build !race

package fuzztest

const raceEnabled = false
