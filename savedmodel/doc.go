// Package savedmodel writes and loads model exports: a self-describing,
// versioned directory holding a prediction graph, its variables and a
// signature, which a server can load without the code that built the model.
//
//	// Export: after training, with the session's variable values at hand.
//	version, dir, err := savedmodel.WriteVersion("/models/mnist", savedmodel.Model{
//		Graph:      s.Graph(),
//		Inputs:     map[string]graph.Output{"images": x},
//		Outputs:    map[string]graph.Output{"probabilities": probs},
//		Variables:  values, // variable node name -> value
//		GlobalStep: step,
//	})
//
//	// Serve: load the newest complete version and predict.
//	p, version, err := savedmodel.LoadLatest("/models/mnist")
//	defer p.Close()
//	out, err := p.Predict(ctx, map[string]*tensor.Tensor{"images": batch})
//	probs := out["probabilities"]
//
// # Layout
//
// A base directory holds numbered versions, as TensorFlow Serving's
// --model_base_path does; each version directory holds three files:
//
//	/models/mnist/
//	    1/
//	        graph.pb       the pruned prediction graph, a GraphDef (graph.Marshal)
//	        variables.bin  the variables' values
//	        model.json     metadata, written last
//	    2/ ...
//
// graph.pb keeps only the ancestors of the outputs (no optimizer, gradients
// or savers); its Variable nodes stay as they are, and Load replaces each by a
// Const node holding the value from variables.bin, so a loaded model has no
// state and needs no initialisation.
//
// variables.bin is the 8-byte magic "DFVARS\x00\x01", a uvarint count, then
// per variable, in name order: uvarint length and bytes of the name, uvarint
// length and bytes of the tensor (the binary encoding of package tensor).
//
// model.json records the format and its version (FormatVersion), the
// signature (input and output names, graph tensor names, dtypes, shapes with
// -1 for an unknown dimension and null for an unknown rank), the global step,
// the creation time, and the size and SHA-256 of every other file:
//
//	{"format": "distflow.savedmodel", "format_version": 1, "global_step": 2000,
//	 "created": "2025-01-01T00:00:00Z",
//	 "signature": {"inputs": {"images": {"name": "images:0", "dtype": "float32", "shape": [-1, 784]}},
//	               "outputs": {...}},
//	 "files": {"graph.pb": {"size": 1234, "sha256": "..."}, "variables.bin": {...}}}
//
// # Atomicity and trust
//
// Write builds the version in a temporary directory beside its destination
// (a name starting with "."), fsyncs every file and the directory, writes
// model.json last and renames the directory into place: a reader sees a
// version complete or not at all. A numbered directory without a valid
// model.json is incomplete: Versions skips it and Load reports ErrIncomplete.
//
// Load treats the directory as untrusted: file sizes are bounded before
// reading, sizes and checksums are verified, unknown format versions are
// refused (ErrUnsupported), the graph is validated node by node as it is
// imported, ops with side effects beyond random numbers (savers, queues,
// Send/Recv, variable updates) are refused, and the signature is checked
// against the graph. Errors wrap the sentinels of this package so callers
// can tell a missing export from a damaged one and from a bad request.
package savedmodel
