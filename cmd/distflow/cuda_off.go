//go:build nocuda

package main

// Built with -tags nocuda: a static binary without the CUDA platform.
const cudaBuilt = false
