//go:build !nocuda

package main

// The CUDA platform is in the default build. It loads the NVIDIA libraries
// at run time through purego, without cgo, which makes the binary
// dynamically linked against the C library (any glibc system has it);
// -tags nocuda leaves it out for a fully static binary (the CPU image).
import _ "github.com/distflow/distflow/device/cuda"

const cudaBuilt = true
