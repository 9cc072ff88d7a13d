//go:build !linux

package worker

// physicalMemory returns 0: the memory is not known on this system.
func physicalMemory() int64 { return 0 }
