//go:build !unix

package serving

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
