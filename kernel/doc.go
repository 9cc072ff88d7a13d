// Package kernel is the interface between ops and their implementations: a
// registry of kernel factories by (op, device), the Context a kernel computes
// in, and the state that outlives steps (Resources: variables).
//
//	kernel.Register("Square", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
//		x := c.Input(0)
//		out := c.Alloc(0, x.DType(), x.Shape()...) // a reused buffer when one fits
//		...
//		return nil
//	}))
//
// The CPU kernels live in kernel/cpu; matrix multiply and convolution go
// through kernel/linalg. Kernels never modify their inputs, return errors
// instead of panicking, and use ParallelFor for large loops.
package kernel
