//go:build race

package linalgtest

// RaceEnabled reports whether the race detector is on; the suite then skips
// its large cases, which would take minutes under -race.
const RaceEnabled = true
