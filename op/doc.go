// Package op is the op registry: every op is declared once, as data (its
// inputs, attributes and how its outputs' dtypes and shapes follow from
// them), and found by name. Kernels (package kernel) and gradients (package
// grad) are registered separately, under the same name.
//
//	op.Register(op.Def{
//		Name:   "Square",
//		Inputs: []op.Arg{{Name: "x"}},
//		Infer:  op.PassThrough,
//	})
//	def, ok := op.Lookup("Square")
//
// Infer functions reject invalid inputs with errors that name the shapes;
// the graph adds the node and the op. Register panics on a duplicate (a
// programmer error found at init).
package op
