// Package serving serves model exports (package savedmodel) over
// TensorFlow Serving's REST API, so that clients written for
// tensorflow_model_server work unchanged.
//
//	srv, err := serving.New(serving.Config{BaseDir: "/models/mnist", ModelName: "mnist"})
//	if err != nil { ... } // no complete version under /models/mnist
//	ln, err := net.Listen("tcp", "127.0.0.1:8501")
//	err = srv.Serve(ctx, ln) // until ctx is done, then a graceful shutdown
//
//	$ curl -d '{"instances": [[0.1, 0.2, ...]]}' http://127.0.0.1:8501/v1/models/mnist:predict
//	{"predictions":[[0.01,0.9,...]]}
//
// # Endpoints
//
//	GET  /v1/models/NAME[/versions/V]             status: {"model_version_status":[...]}
//	GET  /v1/models/NAME[/versions/V]/metadata    the signature_def "serving_default"
//	POST /v1/models/NAME[/versions/V]:predict     row ("instances") or columnar ("inputs") format
//
// As in TensorFlow Serving, an instance of a single-input model is the bare
// value of the input, and an object keyed by input name otherwise (always
// allowed); a single output is answered as bare values, several as objects
// keyed by output name. The columnar format takes and answers whole tensors.
// "signature_name" may be given; only "serving_default" exists. Errors are
// {"error": "..."}: 400 for a malformed or mismatched request (naming the
// input), 404 for an unknown model or version, 405 for a wrong method, 413
// for a body over Config.MaxBodyBytes, 500 for an internal failure.
// float32 outputs are written in the shortest form that parses back to the
// same float32, so a client gets the exact bits of an in-process prediction;
// NaN and infinities are written NaN, Infinity and -Infinity as TensorFlow
// Serving does (these are not standard JSON), and read back in requests.
//
// # Hostile clients
//
// A request is decoded straight into its tensors, never into generic JSON
// values: whatever the JSON, decoding a body allocates at most 4 bytes per
// byte of it (the tensors; 2 for float32), beyond a few buffers kept for
// reuse that small bodies are read into. A Content-Length over
// Config.MaxBodyBytes is answered 413 before the body is read. Config.HTTP
// bounds the time a client may take to send a header (ReadHeaderTimeout)
// and a body (ReadTimeout, plus a second per MinTransferRate bytes
// received: a slower client is answered 408 and cut off), to take an
// answer (WriteTimeout, likewise), and to keep an idle connection
// (IdleTimeout), and the size of a header (MaxHeaderBytes). Serve applies
// them all; a handler mounted on another http.Server applies the body and
// answer deadlines itself, and leaves the others to that server.
//
// # Several models
//
// Models serves several Servers, one per model, under one address and one
// metrics path, as tensorflow_model_server does with a model config file
// (ReadModelConfigFile reads one).
//
// # Metrics
//
// Prometheus scrapes the server at Config.MetricsPath (TF Serving's
// /monitoring/prometheus/metrics by default), under TF Serving's names: the
// predict requests by status, their latency, the model's runs and the
// waits for a batch (metrics.go).
//
// # Batching
//
// Concurrent predict requests for a model whose inputs and outputs all have
// a batch dimension are merged along it into one Predict call, up to
// Config.MaxBatchSize rows; each request gets back exactly its rows, bit for
// bit as if it ran alone. Batches run on the requests' own goroutines, at
// most Config.BatchThreads at once; requests that arrive while every thread
// is busy queue and form the next batch. A batch waits for more requests
// only while some are on their way, for at most Config.BatchTimeout: a lone
// client does not wait, and under load batches grow by themselves.
//
// # Versions
//
// The server serves the newest complete version under Config.BaseDir (as
// tensorflow_model_server's --model_base_path) and polls the directory; a
// newer complete version is loaded and takes the new requests, while requests
// holding the old one finish on it before it is closed. Incomplete and
// unloadable versions are skipped and logged once. With
// Config.WaitForVersion, a server whose directory has no complete version
// yet (or does not exist yet) waits for one, as tensorflow_model_server
// does: it answers 503 meanwhile, its status endpoint included, so that a
// readiness probe fails until the first version is loaded.
package serving
