//go:build linux

package cuda

import "github.com/ebitengine/purego"

// dlopen opens a shared library with its symbols global, so that libraries
// opened later (cuBLAS after cuBLASLt) resolve against it.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(handle uintptr, name string) (uintptr, error) { return purego.Dlsym(handle, name) }

// ccall calls the C function fn. Every argument is an integer or a pointer
// (the CUDA, NVRTC and cuBLAS calls used take floats by pointer), so
// purego's integer-register path is exact. go:uintptrescapes moves Go
// values whose addresses are converted to uintptr in the call expression
// to the heap and keeps them alive for the call.
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

const canLoad = true
