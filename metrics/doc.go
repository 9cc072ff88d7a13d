// Package metrics holds the Prometheus metrics of one distflow task: a
// registry of its own (never the global default one, so that several tasks
// in one process, as in tests, do not mix), whose every series carries the
// task's job and task index as constant labels, and the HTTP endpoint that
// serves it as Prometheus text at /metrics.
//
//	m := metrics.New("worker", 1)
//	ep, err := metrics.Listen("127.0.0.1:0", m, nil) // GET ep.URL(): http://127.0.0.1:PORT/metrics
//	defer ep.Close()
//	m.StepSeconds.Observe(0.012)
//	m.ExamplesTotal.Add(100)
//
// The names follow Prometheus' conventions and are listed in Names; the
// transport's series are resolved once per peer and method (RPC,
// TensorChannel), so that the hot path only adds to pre-resolved
// children. The package imports only the Prometheus client and the
// standard library, so that every layer above may use it; a nil *Task
// is valid everywhere and records nothing.
package metrics
