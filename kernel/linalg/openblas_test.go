//go:build openblas

package linalg_test

// With the openblas tag the conformance suite and the benchmarks cover the
// "openblas" backend too: registering it is enough.
import _ "github.com/distflow/distflow/kernel/linalg/openblas"
