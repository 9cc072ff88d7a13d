//go:build !amd64 || purego

package linalg

import "runtime"

// archPaths lists the amd64 paths as missing: this build has only the
// portable kernel.
func archPaths() []archPath {
	why := "GOARCH=amd64 (built for " + runtime.GOARCH + ")"
	if runtime.GOARCH == "amd64" {
		why = "a build without the purego tag"
	}
	return []archPath{
		{PathInfo{Name: "avx512", Missing: why}, nil},
		{PathInfo{Name: "avx2", Missing: why}, nil},
	}
}
