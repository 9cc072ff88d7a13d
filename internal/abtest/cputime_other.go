//go:build !unix

package abtest

import "time"

// CPUTime is not measured here: the CPU figures read 0.
func CPUTime() time.Duration { return 0 }
