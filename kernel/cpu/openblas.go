//go:build openblas

package cpu

// With the openblas tag, the kernels' matrix products and convolutions run
// on OpenBLAS (linalg.Default becomes "openblas").
import _ "github.com/distflow/distflow/kernel/linalg/openblas"
