//go:build !unix

package linalg_test

import "time"

// cpuTime is not measured here; benchmarks then leave out CPU-time rates.
func cpuTime() time.Duration { return 0 }
