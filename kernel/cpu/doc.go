// Package cpu holds the CPU kernels of every op. Importing it for its side
// effects registers them with the kernel registry:
//
//	import _ "github.com/distflow/distflow/kernel/cpu"
//
// Package session does this, so users of a session get every kernel.
//
// There is one file per op family (core.go: Const, Placeholder, Identity,
// StopGradient, NoOp, Variable; the other families in files named after
// them). Unexported identifiers start with their family's name so that
// families never collide.
//
// Contracts every kernel here keeps:
//   - Kernels never modify their inputs. A tensor may be shared by several
//     consumers, by the graph (a Const's value is handed out as is) and by the
//     caller (a fed tensor), so a kernel writes only into tensors it allocated.
//   - Errors on user input are returned (c.Errorf), never panics; they name
//     the node and the shapes or values involved.
//   - Large loops use kernel.ParallelFor; small tensors run inline.
package cpu
