// Package graph is the dataflow graph: Nodes (instances of ops), their
// Outputs (the edges), and the Scope through which graphs are built, with
// name scopes, devices, control dependencies and a deferred first error.
//
//	s := graph.NewScope()
//	x := s.Out("Placeholder", "x", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(-1, 3)})
//	layer := s.SubScope("layer1").WithDevice("/job:worker/task:0")
//	y := layer.Out("Relu", "", []graph.Output{x}, nil)
//	if err := s.Err(); err != nil { ... } // the first error of the whole build
//	b, _ := s.Graph().Marshal()            // protobuf; Unmarshal rebuilds it exactly
//
// Builders never panic on user mistakes: after the first error every
// further AddNode is a no-op. Nodes are appended only, so creation order is
// a topological order. A step's signature (Signature: feeds, fetches,
// targets) and NewSubgraph, the nodes it runs, are the one place where the
// runtime prunes: the executor and the master's plan both call it.
package graph
